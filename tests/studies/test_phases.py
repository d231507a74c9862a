import numpy as np
import pytest
from scipy import stats

from layerscope.studies.phases.analysis import analyse_model, late_inversion, pattern, phase_split
import notebook_reference as notebook
from synthetic import pair_run


def test_phase_split_uses_the_notebook_thirds():
    seed_layers = [0, 4, 8, 12, 16, 20, 24, 28, 30]
    assert phase_split(seed_layers) == {"early": [0, 4, 8], "mid": [12, 16, 20], "late": [24, 28, 30]}
    split = phase_split(list(range(31)))
    assert (len(split["early"]), len(split["mid"]), len(split["late"])) == (10, 10, 11)
    assert phase_split([0, 1]) == {"early": [], "mid": [0], "late": [1]}


@pytest.mark.parametrize("early, mid, late, label", [
    (0.11, 0.5, -0.11, "PYTHIA_PATTERN"),
    (0.10, 0.0, -0.11, "LATE_INVERSION"),     # early must exceed 0.1
    (-0.5, 0.0, -0.11, "LATE_INVERSION"),
    (0.11, 0.5, -0.10, "OTHER"),              # late must be below -0.1
    (0.14, -0.14, -0.10, "DECOUPLED"),
    (0.15, 0.0, 0.0, "OTHER"),                # |mean| must stay below 0.15
    (0.0, 0.0, 0.149, "DECOUPLED"),
])
def test_pattern_labels_at_their_thresholds(early, mid, late, label):
    assert pattern(early, mid, late) == label


def test_late_inversion_verdicts():
    assert late_inversion(-0.11, True) == "LATE-LAYER INVERSION CONFIRMED"
    assert late_inversion(-0.11, False) == "Negative trend in late layer"
    assert late_inversion(-0.05, True) == "Negative trend in late layer"
    assert late_inversion(0.0, True) == "NO late-layer inversion"


def test_seed_mode_reproduces_the_notebook_loop_exactly():
    run = pair_run(seed=3)
    layers = [0, 4, 8]
    summary, rows = analyse_model(run, layers, "mean", 400, 0.95, seed=42, compat="seed")
    np.random.seed(42)  # the notebook: global seed, then layer by layer, resample by resample
    a, b, pref = run.a("mean"), run.b("mean"), run.pref
    for layer, row in zip(layers, [r for r in rows if r["metric"] == "r_centroid_pref"]):
        metric = notebook.centroid_asymmetry(a[:, layer], b[:, layer])
        r_obs, p = stats.pearsonr(metric, pref)
        lo, hi = notebook.bootstrap_ci(metric, pref, 400)
        assert row["value"] == pytest.approx(r_obs, abs=1e-6) and row["p"] == pytest.approx(p, rel=1e-4)
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((lo, hi), abs=1e-5)
        assert row["significant"] == (not lo <= 0 <= hi)
    means = [np.mean([r["value"] for r in rows if r["metric"] == "r_centroid_pref" and r["layer"] == layer])
             for layer in layers]
    assert summary["phases"]["early"]["mean"] == pytest.approx(means[0])
    assert summary["pattern"] == pattern(*means)


def test_default_mode_is_reproducible_from_its_seed():
    run = pair_run(seed=4)
    def cis(seed):
        rows = analyse_model(run, [0, 4, 8], "last", 300, 0.9, seed=seed, compat=None)[1]
        return [(r["ci_lo"], r["ci_hi"]) for r in rows if r["metric"] == "r_centroid_pref"]

    assert cis(7) == cis(7) and cis(7) != cis(8)
