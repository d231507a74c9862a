"""Each study end to end on the real models, through the CLI."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from layerscope.cli import app

pytestmark = pytest.mark.integration
runner = CliRunner()


def run(tmp_path, *args):
    out = tmp_path / args[0]
    result = runner.invoke(app, ["run", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "result.json").read_text()), pd.read_csv(out / "table.csv"), out


def test_divergence_on_smollm2(tmp_path):
    data, table, out = run(tmp_path, "divergence")
    s = data["summary"]["models"]["smollm2-135m"]
    assert s["layers"] == list(range(31)) and s["n_categories"] == 7
    main = table[(table["metric"] == "r_ua_pref") & (table["subset"] == "all")]  # not the checks' rows
    assert len(main) == 31 * 3 and set(main[main["layer"] == 30]["stage"]) == {"pre_norm"}
    checks = [c["check"] for c in s["checks"]]
    assert checks[:3] == ["without position 0", "without massive-activation tokens", "after the final norm"]
    assert len(checks) == 3 + 7 and s["robustness"]
    assert [c["pooling"] for c in s["pooling_comparison"]] == ["mean", "last", "first"]
    assert (out / "divergence.png").stat().st_size > 10_000


def test_phases_on_smollm2_all_layers_10000_resamples(tmp_path):
    data, table, out = run(tmp_path, "phases")
    s = data["summary"]["models"]["smollm2-135m"]
    assert s["n_bootstrap"] == 10_000 and s["layers"] == list(range(31)) and s["n_pairs"] == 154
    rows = table[(table["metric"] == "r_centroid_pref") & (table["subset"] == "all")]
    assert len(rows) == 31 and (rows["ci_lo"] <= rows["value"]).all() and (rows["value"] <= rows["ci_hi"]).all()
    assert data["manifest"]["timings"]["after_extraction_s"] > 0
    assert [row["source"].startswith("published") for row in data["summary"]["comparison"]] == [True] * 3 + [False]
    assert (out / "phases.png").exists()


def test_scaling_on_smollm2_and_gemma3(tmp_path):
    data, table, _ = run(tmp_path, "scaling", "--model", "smollm2-135m", "--model", "gemma3-270m")
    models = {m["name"]: m for m in data["manifest"]["models"]}
    assert models["smollm2-135m"]["n_layers"] == 30 and models["gemma3-270m"]["n_layers"] == 18
    assert models["smollm2-135m"]["adds_bos"] is False and models["gemma3-270m"]["adds_bos"] is True
    profile = table[(table["metric"] == "r_ua_pref") & (table["subset"] == "all")]
    assert profile.groupby("model").size().to_dict() == {"gemma3-270m": 19, "smollm2-135m": 31}
    assert profile["depth"].between(0, 1).all()
    stability = data["summary"]["peak_stability"]  # two models of two families: no stability label
    assert stability["verdict"] == "not assessable"
    assert stability["reason"].startswith("2 models of 2 families; needs >= 3 of one family")
