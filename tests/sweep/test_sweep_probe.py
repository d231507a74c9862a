"""The probe study in a sweep, from a sweep file: every task's headline numbers are read back from its own
table.csv by hand, and the sweep's layer profiles are its main view (the side, the logistic probe)."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tiny
from layerscope.cli import app
from layerscope.study import StudyConfig
from layerscope.sweep.gather import profile_rows


def test_a_probe_sweep_from_a_file_tracks_decodability_over_models(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path / "cache"))
    models = [str(tiny.save(tmp_path / f"depth{n}", "llama", adds_bos=False, n_layers=n)) for n in (2, 3)]
    (tmp_path / "pairs.json").write_text(json.dumps(tiny.pairs(2, 12)))
    file = tmp_path / "sweep.yaml"
    file.write_text(f"study: probe\nmodels: [{', '.join(models)}]\ndataset: {tmp_path / 'pairs.json'}\n"
                    "label_sets: side\nfolds: 3\nn_bootstrap: 200\nn_permutations: 20\nsteer: false\n")
    result = CliRunner().invoke(app, ["sweep", "--config", str(file), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert summary["n_done"] == 2
    profiles = profile_rows(pd.read_csv(tmp_path / "out" / "table.csv"), StudyConfig(study="probe"))
    for row in summary["tasks"]:
        own = pd.read_csv(tmp_path / "out" / row["folder"] / "table.csv")
        acc = own[(own["label_set"] == "side") & (own["method"] == "logreg") & (own["metric"] == "accuracy")]
        acc = acc.sort_values("state")
        assert list(acc["state"]) == list(range(len(acc)))  # states 0 .. L
        assert row["numbers"]["side_best_accuracy"] == pytest.approx(acc["value"].max())
        profile = profiles[(profiles["model"] == row["model"]) & (profiles["metric"] == "accuracy")]
        assert np.allclose(profile.sort_values("layer")["value"], acc["value"])  # the main view: side, logreg
