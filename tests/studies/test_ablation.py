"""Ablation: configurations, language files, the degradation/disparity arithmetic, and the
runner against a naive copy-quantize-score loop."""

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

import tiny
from layerscope.data.languages import load_languages
from layerscope.errors import DatasetError
from layerscope.studies.ablation.analysis import add_degradation, disparity, disparity_table, verdicts
from layerscope.studies.ablation.configs import load_configs, standard_configs, sweep_configs
from layerscope.studies.ablation.runner import Variant, score_configs
from layerscope.study import StudyConfig
from layerscope.study.result import jsonable
from layerscope.study.settings import ConfigError


def test_standard_configs_are_the_notebooks_layer_sets():
    c = {name: sorted(cfg.quantize) for name, cfg in standard_configs(5).items()}
    assert c == {"baseline": [], "all_quantized": [0, 1, 2, 3, 4], "first_protected": [1, 2, 3, 4],
                 "last_protected": [0, 1, 2, 3], "gateway_protected": [1, 2, 3], "middle_protected": [0, 4],
                 "first_half_protected": [2, 3, 4], "second_half_protected": [0, 1]}
    assert {n: sorted(cfg.quantize) for n, cfg in sweep_configs(3).items()} == {
        "only_L0": [0], "only_L1": [1], "only_L2": [2]}


def test_a_configs_file_adds_baseline_and_all_quantized(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"odd": [1, 3], "tail": {"quantize": [4], "description": "last only"}}))
    configs = load_configs(path, 5)
    assert list(configs) == ["baseline", "all_quantized", "odd", "tail"]
    assert configs["odd"].quantize == {1, 3} and configs["tail"].description == "last only"


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"), ("[]", "expected a JSON object"), ('{"a": "1,2"}', "config 'a': expected a list"),
    ('{"a": [true]}', "config 'a': expected a list"), ('{"a": [0, 5]}', "layer 5 is out of range"),
])
def test_bad_configs_files_are_named(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_configs(path, 5)
    with pytest.raises(DatasetError, match="does not exist"):
        load_configs(tmp_path / "missing.json", 5)


def test_bundled_languages_meet_the_brief():
    langs = load_languages()
    assert len(langs.languages) >= 6 and len(langs.high) >= 2 and len(langs.low) >= 2
    assert all(len(lang.texts) >= 5 for lang in langs.languages)
    assert any(not all(ord(ch) < 0x250 for ch in "".join(lang.texts)) for lang in langs.languages)  # a non-Latin script
    assert langs.texts()[0][:2] == (langs.languages[0].code, 0)


@pytest.mark.parametrize("data, message", [
    ({"en": {"resource": "high", "texts": ["a"]}}, "no low-resource language"),
    ({"en": {"resource": "medium", "texts": ["a"]}}, "use \"high\" or \"low\""),
    ({"en": {"resource": "high", "texts": []}, "sw": {"resource": "low", "texts": ["b"]}}, "non-empty list"),
    ({"en": {"resource": "high", "texts": ["a", " "]}, "sw": {"resource": "low", "texts": ["b"]}},
     "language 'en', text 1"),
    ({"en": ["a"]}, 'expected an object with "resource"'),
])
def test_bad_language_files_are_named(tmp_path, data, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=message):
        load_languages(path)


def frame(rows):
    return pd.DataFrame(rows, columns=["config", "lang", "resource", "sample", "n_quantized", "nll"]).assign(
        ppl=lambda d: np.exp(d["nll"]))


def test_degradation_is_relative_to_the_baseline_text_and_clipped_at_zero():
    base = math.log(10.0)
    scored = add_degradation(frame([
        ("baseline", "en", "high", 0, 0, base), ("baseline", "en", "high", 1, 0, math.log(20.0)),
        ("q", "en", "high", 0, 2, math.log(15.0)), ("q", "en", "high", 1, 2, math.log(16.0)),
    ]))
    q = scored[scored["config"] == "q"]
    assert q["degradation"].tolist() == pytest.approx([0.5, 0.0])  # 16 < 20: clipped, as the notebook does
    assert q["delta_nll"].tolist() == pytest.approx([math.log(1.5), math.log(0.8)])  # not clipped


def test_disparity_is_null_with_a_reason_when_high_resource_does_not_degrade():
    assert disparity(0.2, 0.5) == (pytest.approx(2.5), None)
    ratio, why = disparity(0.0, 0.4)
    assert ratio is None and "below 0.001" in why
    assert disparity(0.0005, 0.4)[0] is None


def test_h5_reduction_halves_and_synergy_by_hand():
    # per config: (d_hr, d_lr). ratios: all 3.0, first 2.0, last 2.5, gateway 1.5, halves 1.2 and 2.4
    degradations = {"all_quantized": (0.2, 0.6), "first_protected": (0.2, 0.4), "last_protected": (0.2, 0.5),
                    "gateway_protected": (0.2, 0.3), "first_half_protected": (0.5, 0.6),
                    "second_half_protected": (0.1, 0.24)}
    rows = [("baseline", lang, res, 0, 0, 0.0) for lang, res in (("en", "high"), ("sw", "low"))]
    for name, (hr, lr) in degradations.items():
        rows += [(name, "en", "high", 0, 1, math.log(1 + hr)), (name, "sw", "low", 0, 1, math.log(1 + lr))]
    per_config = disparity_table(add_degradation(frame(rows)), ["baseline", *degradations])
    by = {r["config"]: r for r in per_config}
    assert by["baseline"]["disparity_ratio"] is None and by["baseline"]["reduction_pct"] is None
    assert by["gateway_protected"]["disparity_ratio"] == pytest.approx(1.5)
    assert by["gateway_protected"]["reduction_pct"] == pytest.approx(50.0)  # (3 - 1.5) / 3
    v = verdicts(per_config)
    assert v["h5"]["result"] == "SUPPORTED" and v["h5"]["reduction_pct"] == pytest.approx(50.0)
    assert v["halves"]["more_critical_for_disparity"] == "early"  # protecting the first half leaves 1.2 < 2.4
    assert v["halves"]["more_critical_for_degradation"] == "late"  # 0.55 > 0.17 mean degradation
    assert v["synergy"]["expected_additive"] == pytest.approx(2.0 + 2.5 - 3.0) and v["synergy"]["synergistic"] is False
    assert "Infinity" not in json.dumps(jsonable(v)) and json.dumps(jsonable(per_config), allow_nan=False)


def test_h5_is_undetermined_when_the_all_quantized_ratio_is_undefined():
    rows = [("baseline", "en", "high", 0, 0, 0.0), ("baseline", "sw", "low", 0, 0, 0.0)]
    for name in ("all_quantized", "gateway_protected"):
        rows += [(name, "en", "high", 0, 1, 0.0), (name, "sw", "low", 0, 1, 0.3)]
    v = verdicts(disparity_table(add_degradation(frame(rows)), ["baseline", "all_quantized", "gateway_protected"]))
    assert v["h5"]["result"] == "UNDETERMINED" and "undefined" in v["h5"]["reason"]


def naive_quantize(w, scheme, axis):
    """The rounding formula written out per tensor or per output channel."""
    if scheme == "per-tensor" or w.dim() == 1:
        s = w.abs().max() / 7
        return torch.clamp(torch.round(w / s), -8, 7) * s
    rows = w.T if axis == 1 else w
    out = torch.stack([torch.clamp(torch.round(r / (r.abs().max() / 7)), -8, 7) * (r.abs().max() / 7) for r in rows])
    return out.T if axis == 1 else out


@pytest.mark.parametrize("arch, variant, reuse", [
    ("llama", Variant("nb", "per-tensor", "all-weights", True), True),
    ("llama", Variant("nb", "per-tensor", "all-weights", True), False),
    ("gpt2", Variant("pc", "per-channel", "linear", True), True),
    ("gpt2", Variant("pc", "per-channel", "linear", False), False),
])
def test_runner_equals_a_fresh_copy_quantized_and_scored_text_by_text(tmp_path, arch, variant, reuse):
    lm = tiny.tiny_lm(arch, adds_bos=arch == "gpt2")
    with torch.no_grad():
        for name, p in lm.model.named_parameters():
            if "ln" in name or "norm" in name:
                p.uniform_(0.5, 1.5)
    original = copy.deepcopy(lm.model)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"en": {"resource": "high", "texts": tiny.TEXTS[:4]},
                                "sw": {"resource": "low", "texts": tiny.TEXTS[4:7]}}))
    languages = load_languages(path)
    configs = standard_configs(3) | (sweep_configs(3) if variant.sweep else {})
    out = score_configs(lm, languages, configs, [variant], batch_size=3, max_length=None, prefix_reuse=reuse).per_text
    assert len(out) == len(configs) * 7
    for name, cfg in configs.items():
        reference = copy.deepcopy(original)
        blocks = reference.transformer.h if arch == "gpt2" else reference.model.layers
        with torch.no_grad():
            for i in cfg.quantize:
                for pname, p in blocks[i].named_parameters():
                    conv = arch == "gpt2" and pname.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
                    linear = conv or (arch != "gpt2" and pname.endswith("proj.weight"))
                    if ((variant.targets == "linear" and linear)
                            or (variant.targets == "all-weights" and "weight" in pname)):
                        p.copy_(naive_quantize(p, variant.scheme, 1 if conv else 0))
            for (lang, sample, text) in languages.texts():
                ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
                expected = torch.exp(reference(ids, labels=ids).loss).item()
                got = out[(out["config"] == name) & (out["lang"] == lang) & (out["sample"] == sample)]["ppl"].item()
                assert got == pytest.approx(expected, rel=1e-4), (name, lang, sample)
    assert all(torch.equal(a, b)
               for a, b in zip(lm.model.state_dict().values(), original.state_dict().values(), strict=False))


def test_the_disparity_over_few_languages_gets_a_warning():
    from layerscope.studies.shared.caveats import group_warnings

    assert group_warnings(4, 4) == [
        "ablation: the disparity ratio compares the mean degradation of 4 high- with 4 low-resource languages "
        "(< 10 each): one language can swing it; treat H5 as descriptive."]
    assert group_warnings(10, 12) == [] and len(group_warnings(12, 9)) == 1


@pytest.mark.parametrize("kwargs, expected", [
    ({}, ("per-channel", "per-channel", "linear", 4)),
    ({"compat": "notebooks"}, ("notebook", "per-tensor", "all-weights", 4)),
    ({"recipe": "group128"}, ("group128", "group:128", "linear", 4)),
    ({"recipe": "group128", "bits": 3}, ("group128", "group:128", "linear", 3)),
    ({"recipe": "int8"}, ("int8", "per-channel", "linear", 8)),
    ({"scheme": "group:128"}, ("group128", "group:128", "linear", 4)),   # the recipe with that scheme and targets
    ({"scheme": "per-tensor"}, ("custom", "per-tensor", "linear", 4)),   # no recipe has it
    ({"recipe": "notebook", "targets": "all-weights"}, ("notebook", "per-tensor", "all-weights", 4)),
])
def test_a_recipe_sets_the_scheme_targets_and_bits(kwargs, expected):
    config = StudyConfig(study="ablation", **kwargs)
    assert (config.quant_recipe, config.quant_scheme, config.quant_targets, config.quant_bits) == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"recipe": "gptq"}, r"unknown --recipe 'gptq'; use one of notebook, per-channel, group128, int8"),
    ({"recipe": "int8", "bits": 3}, r"--recipe int8 quantizes to 8 bits, not 3; leave out --bits"),
    ({"recipe": "group128", "scheme": "per-tensor"}, r"--recipe group128 quantizes with --scheme group:128, not "
                                                     r"per-tensor; leave out --scheme"),
    ({"prefix_budget_gib": -1.0}, r"--prefix-budget-gib -1.0 must be 0 or more"),
])
def test_recipe_conflicts_are_one_clear_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        StudyConfig(study="ablation", **kwargs)


def test_weights_already_on_a_grid_get_a_warning_naming_it():
    from layerscope.studies.shared.caveats import prequantized_warnings

    models = [{"name": "a", "exact": "A, Q4_1 GGUF", "prequantized": "Q4_1"}, {"name": "b", "prequantized": None}]
    (warning,) = prequantized_warnings(models, 3)
    assert warning.startswith("ablation, a: its weights already lie on a Q4_1 grid (A, Q4_1 GGUF)")
    assert "to 3 bits" in warning and "relative to that Q4_1 model" in warning
    assert prequantized_warnings(models[1:], 4) == []
