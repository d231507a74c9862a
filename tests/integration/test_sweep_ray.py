"""The scaling sweep over the two zoo models as Ray tasks on a local instance, against the in-process study."""

import json

import pandas as pd
import pytest

from layerscope.studies import StudyConfig, run_study
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
        mine = direct.table[(direct.table["model"] == model) & (direct.table["metric"] == "r_ua_pref")]
        theirs = gathered[(gathered["model"] == model) & (gathered["metric"] == "r_ua_pref")]
        assert list(theirs["layer"]) == list(mine["layer"])
        for column in ("value", "p", "p_perm", "q", "ci_lo", "ci_hi"):
            assert theirs[column].to_numpy() == pytest.approx(mine[column].to_numpy(dtype=float), abs=1e-9), column
    assert summary["peak_stability"] == pytest.approx(direct.summary["peak_stability"])
    saved = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert saved["peak_stability"]["answer"] == direct.summary["peak_stability"]["answer"]
    assert (tmp_path / "sweep" / "r_ua_pref.png").stat().st_size > 10_000
