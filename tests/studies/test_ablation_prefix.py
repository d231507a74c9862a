"""Prefix reuse in the ablation runner: the same numbers as whole passes, within a memory budget, snapshots of one
configuration's layers at a time, and the command line's --recipe, --sweep and --no-prefix-reuse."""

import copy
import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import tiny
from layerscope.cli import app
from layerscope.studies.ablation import runner as ablation_runner
from layerscope.studies.ablation.configs import standard_configs, sweep_configs
from layerscope.studies.ablation.runner import Variant, score_configs

N_LAYERS = 4
VARIANTS = [Variant("pc", "per-channel", "linear", sweep=True), Variant("nb", "per-tensor", "all-weights", sweep=False)]
KEY = ["config", "variant", "lang", "sample"]


def model(arch):
    lm = tiny.tiny_lm(arch, adds_bos=arch == "gpt2", n_layers=N_LAYERS)
    with torch.no_grad():  # norm weights start at 0 or 1, which per-tensor quantization leaves as they are
        for p in lm.model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return lm


def configs():
    return standard_configs(N_LAYERS) | sweep_configs(N_LAYERS)


def score(lm, languages, **kwargs):
    return score_configs(lm, languages, configs(), VARIANTS, batch_size=3, max_length=None, **kwargs)


def same_numbers(a, b):
    """per_text of two runs, row for row by configuration, variant and text: nll within 1e-5 relative."""
    a, b = a.per_text.sort_values(KEY).reset_index(drop=True), b.per_text.sort_values(KEY).reset_index(drop=True)
    assert a[KEY].equals(b[KEY]) and a["n_scored"].tolist() == b["n_scored"].tolist()
    assert a["nll"].tolist() == pytest.approx(b["nll"].tolist(), rel=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_prefix_reuse_gives_the_numbers_of_whole_passes_with_fewer_layers(arch, languages):
    lm = model(arch)
    reused, whole = score(lm, languages), score(lm, languages, prefix_reuse=False)
    # baseline + 7 standard configurations per variant + 4 single layers for the swept one
    assert len(whole.per_text) == (8 + 8 + 4) * 7
    same_numbers(reused, whole)
    quantized = whole.per_text[whole.per_text["config"] == "all_quantized"]["nll"].to_numpy()
    assert (abs(quantized - whole.per_text[whole.per_text["config"] == "baseline"]["nll"].to_numpy()) > 1e-3).all()
    assert reused.reuse["on"] and not whole.reuse["on"]
    passes = 1 + 7 + 4 + 7  # the baseline once, shared by both variants
    assert reused.reuse["passes"] == whole.reuse["passes"] == passes
    assert whole.reuse["layers_run"] == whole.reuse["layers_whole"] == passes * N_LAYERS
    assert reused.reuse["layers_run"] < reused.reuse["layers_whole"] == passes * N_LAYERS
    assert whole.reuse["whole_passes"] == passes and reused.reuse["whole_passes"] < passes
    pd.testing.assert_frame_equal(reused.layer_error, whole.layer_error)


def test_a_budget_of_no_stream_runs_whole_and_two_streams_stay_within_it(languages):
    lm = model("llama")
    free = score(lm, languages)
    none = score(lm, languages, budget_bytes=0)
    assert none.reuse["whole_passes"] == none.reuse["passes"] and none.reuse["peak_bytes"] == 0
    same_numbers(none, free)
    budget = 2 * free.reuse["stream_bytes"]
    assert free.reuse["peak_bytes"] > budget  # unlimited, it keeps more than two streams: the budget binds
    two = score(lm, languages, budget_bytes=budget)
    assert 0 < two.reuse["peak_bytes"] <= budget and two.reuse["peak_streams"] <= 2
    assert two.reuse["whole_by_budget"] > 0
    assert free.reuse["layers_run"] < two.reuse["layers_run"] < none.reuse["layers_run"]
    same_numbers(two, free)


def test_snapshots_hold_one_configurations_layers_and_are_restored_in_turn(languages, monkeypatch):
    lm = model("gpt2")
    original = copy.deepcopy(lm.model.state_dict())
    events, snapshots, plans = [], [], []

    class Recording(ablation_runner.WeightSnapshot):
        def __init__(self, params):
            events.append("new")
            snapshots.append(set(params))
            super().__init__(params)

        def restore(self, names=None):
            events.append("restore")
            super().restore(names)

    def planned(*args, **kwargs):
        plans.append(real_plan(*args, **kwargs))
        return plans[-1]

    real_plan = ablation_runner.plan_passes
    monkeypatch.setattr(ablation_runner, "WeightSnapshot", Recording)
    monkeypatch.setattr(ablation_runner, "plan_passes", planned)
    score(lm, languages)
    cfgs = configs()
    # the callers' jobs: the baseline, then each variant's configurations in order (the sweep only where asked)
    jobs = [(None, cfgs["baseline"])] + [(v, c) for v in VARIANTS for c in cfgs.values() if c.name != "baseline"
                                         and (v.sweep or not c.name.startswith("only_L"))]
    quantizing = [p for p in plans[0].passes if jobs[p.job][0] is not None]
    assert len(plans[0].passes) == len(jobs) and len(snapshots) == len(quantizing)
    assert events == ["new", "restore"] * len(quantizing)  # never two snapshots alive at once
    for p, names in zip(quantizing, snapshots, strict=True):
        variant, cfg = jobs[p.job]
        layers = {int(name.split(".")[1]) for name in names}  # "layers.3.attn.c_attn.weight"
        assert layers == {i for i in cfg.quantize if i >= p.start}, cfg.name
        assert all(name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) for name in names) or \
            variant.targets == "all-weights"
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in original.items())


# -- the command line --

cli = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablation-prefix")
    texts = root / "texts.json"
    texts.write_text(json.dumps({"en": {"resource": "high", "texts": tiny.TEXTS[:3]},
                                 "xx": {"resource": "low", "texts": tiny.TEXTS[3:6]}}))
    return str(tiny.save(root / "tiny-llama", "llama", adds_bos=True, n_layers=N_LAYERS)), str(texts)


def run(saved, out, *args):
    folder, texts = saved
    return cli.invoke(app, ["run", "ablation", "--model", folder, "--texts", texts, "--n-bootstrap", "200",
                            "--out", str(out), *args])


def test_the_cli_with_a_recipe_a_sweep_and_without_prefix_reuse(tmp_path, saved):
    reused = run(saved, tmp_path / "a", "--sweep", "--recipe", "group128")
    whole = run(saved, tmp_path / "b", "--sweep", "--recipe", "group128", "--no-prefix-reuse")
    assert reused.exit_code == 0, reused.output
    assert whole.exit_code == 0, whole.output
    a, b = pd.read_csv(tmp_path / "a" / "table.csv"), pd.read_csv(tmp_path / "b" / "table.csv")
    for metric in ("sqnr_db", "weight_rel_err"):
        rows = a[(a["metric"] == metric) & (a["recipe"] == "group128")]
        assert sorted(rows[rows["lang"].isna()]["layer"].astype(int)) == list(range(N_LAYERS)), metric
    key = ["scheme", "config", "lang"]  # rows come in the callers' order of configurations and texts in both runs
    ppl_a = a[a["metric"] == "ppl"].reset_index(drop=True)
    ppl_b = b[b["metric"] == "ppl"].reset_index(drop=True)
    assert len(ppl_a) == (8 + 4 + 8) * 6 and ppl_a[key].equals(ppl_b[key])
    assert set(ppl_a["recipe"]) == {"group128", "notebook"}
    assert ppl_a["value"].tolist() == pytest.approx(ppl_b["value"].tolist(), rel=1e-5)
    summary = json.loads((tmp_path / "a" / "result.json").read_text())["summary"]
    assert summary["recipe"] == "group128"
    reuse = {json.loads((tmp_path / out / "result.json").read_text())["summary"]["models"][saved[0]]["prefix_reuse"]
             ["on"] for out in ("a", "b")}
    assert reuse == {True, False}


@pytest.mark.parametrize("args, message", [
    (["--recipe", "nope"], "unknown --recipe 'nope'; use one of notebook, per-channel, group128, int8"),
    (["--recipe", "int8", "--bits", "3"], "--recipe int8 quantizes to 8 bits, not 3; leave out --bits"),
    (["--recipe", "group128", "--scheme", "per-tensor"], "leave out --scheme"),
])
def test_a_recipe_that_cannot_be_gets_one_clear_error(tmp_path, saved, args, message):
    result = run(saved, tmp_path / "o", *args)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert sum(line.startswith("error: ") for line in lines) == 1 and "Traceback" not in result.output
    assert message in result.output, result.output
    assert not (tmp_path / "o").exists()
