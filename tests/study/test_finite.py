"""No verdict from a non-finite number: every study, run on a tiny model, with a NaN planted in one layer.

Each study runs once cleanly (its result passes the guard); then a NaN is planted in one layer, once in
what the analysis reads (activations, token states, NLL) and once in the finished result, and
``run_study`` / ``check_result`` must refuse it with a message naming the study, model, layer and metric.
"""

import dataclasses
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tiny
from conftest import SMALL_TEXTS, small_pairs
from layerscope.cli import app
from layerscope.run import run_study
from layerscope.study import StudyConfig
from layerscope.study.finite import NonFiniteError, check_result, check_rows, check_summary, verdict_metrics

STUDIES = ("divergence", "scaling", "phases", "anisotropy", "ablation")
LAYER = 2
"""The hidden-state index (the ablation: the decoder layer) a NaN is planted in; the tiny models have 0 to 3."""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("finite")
    model = str(tiny.save(root / "tiny-nobos", "llama", adds_bos=False))
    (root / "pairs.json").write_text(json.dumps(small_pairs()))
    (root / "texts.json").write_text(json.dumps(SMALL_TEXTS))
    (root / "prompts.txt").write_text("\n".join(tiny.TEXTS) + "\n")
    return root, model


def config(inputs, study: str) -> StudyConfig:
    root, model = inputs
    fast = {"n_permutations": 200}  # the pair studies' own setting
    files = {"divergence": {"dataset": str(root / "pairs.json"), **fast},
             "scaling": {"dataset": str(root / "pairs.json"), **fast},
             "phases": {"dataset": str(root / "pairs.json"), "n_bootstrap": 200, **fast},
             "anisotropy": {"prompts": str(root / "prompts.txt")},
             "ablation": {"texts": str(root / "texts.json"), "sweep": True}}[study]
    return StudyConfig(study=study, models=(model,), cache=False, **files)


@pytest.fixture(scope="module")
def clean(inputs):
    """Each study's result on the tiny model, with nothing planted: the guard lets every one through."""
    return {study: run_study(config(inputs, study)) for study in STUDIES}


def plant_in_activations(monkeypatch):
    """The pair studies read ``extract``'s activations: one value of text 0 at layer ``LAYER`` becomes NaN."""
    from layerscope.studies.shared import inputs as pair_inputs

    real = pair_inputs.extract

    def extract(*args, **kwargs):
        acts = real(*args, **kwargs)
        layer = acts.pooled["mean"][:, LAYER].copy()
        layer[0, 0] = np.nan
        return dataclasses.replace(acts, pooled={**acts.pooled, "mean": acts.pooled["mean"].with_layer(LAYER, layer)})

    monkeypatch.setattr(pair_inputs, "extract", extract)


def plant_in_token_states(monkeypatch):
    """Anisotropy reads ``token_states``: one token state at layer ``LAYER`` (text 1, position 2) becomes NaN."""
    import layerscope.studies.anisotropy as anisotropy

    real = anisotropy.token_states

    def token_states(*args, **kwargs):
        states = real(*args, **kwargs)
        token = int(np.flatnonzero((states.text_index == 1) & (states.position == 2))[0])
        layers = states.layers.copy()
        layers[LAYER, token, 3] = np.nan
        return dataclasses.replace(states, layers=layers)

    monkeypatch.setattr(anisotropy, "token_states", token_states)


def plant_in_nll(monkeypatch):
    """The ablation reads per-text NLL: text 0 of 'en' with only decoder layer ``LAYER`` quantized becomes NaN."""
    import layerscope.studies.ablation as ablation

    real = ablation.score_configs

    def score_configs(*args, **kwargs):
        scores = real(*args, **kwargs)
        out = scores.per_text
        at = (out["config"] == f"only_L{LAYER}") & (out["lang"] == "en") & (out["sample"] == 0)
        assert at.sum() == 1
        out.loc[at, ["nll", "ppl"]] = np.nan
        return scores

    monkeypatch.setattr(ablation, "score_configs", score_configs)


PLANTS = {"divergence": (plant_in_activations, rf"divergence: model {{model}}, layer {LAYER}, metric ua, "
                                               r"pooling mean, category cat0 is nan"),
          "scaling": (plant_in_activations, rf"scaling: model {{model}}, layer {LAYER} category UA \(mean pooling\) "
                                            r"\(1 of 4 entries\) is nan"),
          "phases": (plant_in_activations, rf"phases: model {{model}}, layer {LAYER} centroid asymmetry \(mean "
                                           r"pooling\) \(20 of 20 entries\) is nan"),  # every leave-one-out centroid
          "anisotropy": (plant_in_token_states, rf"anisotropy: model {{model}}, layer {LAYER} token state of text 1 "
                                                r"at position 2 \(1 of 32 entries\) is nan"),
          "ablation": (plant_in_nll, rf"ablation: model {{model}}, layer {LAYER}, metric ppl, variant per-channel/"
                                     rf"linear, config only_L{LAYER}, lang en, sample 0 is nan")}


@pytest.mark.parametrize("study", STUDIES)
def test_a_nan_planted_in_one_layer_of_what_a_study_reads_is_an_error_naming_model_layer_and_metric(
        inputs, monkeypatch, study):
    plant, message = PLANTS[study]
    message = message.replace("{model}", re.escape(inputs[1]))
    plant(monkeypatch)
    with pytest.raises(NonFiniteError, match=message + ".*not a finite number.*--dtype float32"):
        run_study(config(inputs, study))


def first_row(table: pd.DataFrame, study: str) -> int:
    """The position of the first table row of a metric that must be finite, at layer ``LAYER`` where it has layers."""
    rows = table["metric"].isin(verdict_metrics(study)).to_numpy(dtype=bool)
    at_layer = rows & (table["layer"] == LAYER).fillna(False).to_numpy(dtype=bool)
    return int(np.flatnonzero(at_layer if at_layer.any() else rows)[0])


@pytest.mark.parametrize("study", [s for s in STUDIES if s != "scaling"])
def test_every_study_result_passes_the_guard_only_while_its_verdict_numbers_are_finite(inputs, clean, study):
    result, model = clean[study], re.escape(inputs[1])
    assert check_result(result) is result
    for bad in (float("nan"), float("inf")):
        table = result.table.copy()
        i = first_row(table, study)
        table.loc[table.index[i], "value"] = bad
        row = table.iloc[i]
        layer = "" if pd.isna(row["layer"]) else f"layer {row['layer']}, "
        assert study == "phases" or layer == f"layer {LAYER}, "
        with pytest.raises(NonFiniteError, match=rf"^{study}: model {model}, {layer}metric {row['metric']}"
                                                 rf".* is {bad}, not a finite number"):
            check_result(dataclasses.replace(result, table=table))


def test_an_undefined_r_in_a_table_is_not_an_error_but_a_nan_input_is(clean):
    """An r is undefined (NaN) where UA is the same in every category: the guard lets it through, the report says
    n/a; the UA it is computed from must be finite."""
    result = clean["scaling"]
    table = result.table.copy()
    table.loc[(table["metric"] == "r_ua_pref") & (table["layer"] == LAYER), "value"] = np.nan
    check_result(dataclasses.replace(result, table=table))
    divergence = clean["divergence"].table
    assert divergence[divergence["metric"] == "r_ua_pref"]["value"].isna().any()  # layer 0, last or first pooling
    assert divergence[divergence["metric"].isin(["ua", "pref"])]["value"].notna().all()


SUMMARY_FIELDS = {"divergence": (["pooling_comparison", 1, "r"], r"pooling_comparison\[pooling=last\]\.r"),
                  "scaling": (["max_pos_r"], r"max_pos_r"),
                  "phases": (["phases", "late", "mean"], r"phases\.late\.mean"),
                  "anisotropy": (["token_sets", "all", "bell", "max_value"], r"token_sets\.all\.bell\.max_value"),
                  "ablation": (["variants", "per-channel/linear", "per_config", 2, "d_lr"],
                               r"variants\.per-channel/linear\.per_config\[config=\w+\]\.d_lr")}


@pytest.mark.parametrize("study", STUDIES)
def test_a_nan_in_any_summary_number_is_an_error_naming_the_field(inputs, clean, study):
    result, model = clean[study], inputs[1]
    summary = json.loads(json.dumps(result.summary, default=float))  # a deep copy
    keys, where = SUMMARY_FIELDS[study]
    holder = summary["models"][model]
    for key in keys[:-1]:
        holder = holder[key]
    assert isinstance(holder[keys[-1]], float) and math.isfinite(holder[keys[-1]])
    holder[keys[-1]] = float("nan")
    with pytest.raises(NonFiniteError, match=rf"^{study}: model {re.escape(model)}, summary field {where} is nan"):
        check_result(dataclasses.replace(result, summary=summary))


def test_deliberate_absences_pass_and_computed_nan_does_not():
    check_summary("ablation", {"models": {"m": {"disparity_ratio": None, "disparity_note": "below 0.001"}},
                               "warnings": []})
    check_rows("phases", [{"model": "m", "metric": "phase_mean", "value": float("nan"), "n": 0, "phase": "early"},
                          {"model": "m", "metric": "r_centroid_pref", "value": 0.3, "n": 8, "layer": 1},
                          {"model": "m", "metric": "other", "value": float("nan"), "n": 8}], ("r_centroid_pref",
                                                                                             "phase_mean"))
    with pytest.raises(NonFiniteError, match=r"^phases: model m, metric phase_mean, phase mid is nan"):
        check_rows("phases", [{"model": "m", "metric": "phase_mean", "value": float("nan"), "n": 1, "phase": "mid"}])
    with pytest.raises(NonFiniteError, match=r"^scaling: summary field peak_stability\.std_peak_pct is inf"):
        check_summary("scaling", {"models": {}, "peak_stability": {"std_peak_pct": float("inf")}})


def test_seed_mode_without_intervals_and_an_empty_phase_are_not_errors(inputs):
    """Seed compat writes no CI columns and, with 2 tested layers, the early phase has none: both absences."""
    result = run_study(dataclasses.replace(config(inputs, "phases"), compat="notebooks", layers="0,3"))
    summary = result.summary["models"][inputs[1]]
    assert summary["phases"]["early"] == {"layers": [], "mean": None}
    assert summary["pattern"] == "UNDETERMINED"
    r = result.table[result.table["metric"] == "r_centroid_pref"]
    assert summary["phases"]["late"]["mean"] == pytest.approx(r[r["layer"] == 3]["value"].item())


def test_the_cli_prints_one_error_line_and_writes_nothing(inputs, monkeypatch, tmp_path):
    root, model = inputs
    plant_in_activations(monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "divergence", "--model", model, "--dataset", str(root / "pairs.json"),
                                      "--n-permutations", "200", "--out", "out"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("error: ")] == [lines[-1]]
    assert lines[-1].startswith(f"error: divergence: model {model}, layer {LAYER}, metric ua, pooling mean")
    assert "Traceback" not in result.output and list(tmp_path.iterdir()) == []
