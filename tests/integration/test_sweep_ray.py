"""The scaling sweep over the two zoo models as Ray tasks on a local instance, against the in-process study."""

import json

import pandas as pd
import pytest

from layerscope.run import run_study
from layerscope.study import StudyConfig
from layerscope.sweep import SweepPlan, run_sweep

pytestmark = pytest.mark.integration


def test_scaling_sweep_over_smollm2_and_gemma3_on_ray(tmp_path):
    config = StudyConfig(study="scaling", models=("smollm2-135m", "gemma3-270m"), n_permutations=2000)
    summary = run_sweep(SweepPlan(config, executor="ray", workers=2), tmp_path / "sweep")
    assert [(t["spec"], t["status"], t["n_layers"]) for t in summary["tasks"]] == [
        ("smollm2-135m", "done", 30), ("gemma3-270m", "done", 18)]
    gathered = pd.read_csv(tmp_path / "sweep" / "table.csv")

    # the same study in this process, on both models at once (extraction comes from the cache the Ray
    # workers filled; every statistic is computed again here)
    direct = run_study(config)
    for model in config.models:
        mine = direct.table[(direct.table["model"] == model) & (direct.table["metric"] == "r_ua_pref")
                            & (direct.table["subset"] == "all")]
        theirs = gathered[(gathered["model"] == model) & (gathered["metric"] == "r_ua_pref")
                          & (gathered["subset"] == "all")]
        assert list(theirs["layer"]) == list(mine["layer"])
        for column in ("value", "p", "p_perm", "q", "ci_lo", "ci_hi"):
            assert theirs[column].to_numpy() == pytest.approx(mine[column].to_numpy(dtype=float), abs=1e-9), column
    # the sweep describes the peak depths (its numbers carry no significance); the study gives the verdict
    peaks = [m["max_pos_pct"] for m in direct.summary["models"].values()]
    stability = summary["peak_stability"]
    assert stability["mean_peak_pct"] == pytest.approx(sum(peaks) / 2)
    assert stability["std_peak_pct"] == pytest.approx(abs(peaks[0] - peaks[1]) / 2)  # population sd of two
    assert stability["peaks_stable"] is None and stability["answer"].startswith("Descriptive only")
    assert direct.summary["peak_stability"]["verdict"] == "not assessable"
    saved = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert saved["peak_stability"]["answer"] == stability["answer"]
    assert (tmp_path / "sweep" / "r_ua_pref.png").stat().st_size > 10_000
