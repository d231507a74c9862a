import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import stats

import notebook_reference as notebook
from layerscope.studies.scaling.analysis import analyse_model, peak_stability, profile_summary
from synthetic import pair_run


def staged(run, seed=0):
    """``run`` with what default-mode extraction adds: pre-norm states of the last block (the post-norm last layer
    rescaled plus noise) and the "mean_no_pos0" / "mean_no_massive" poolings (the mean plus noise)."""
    rng = np.random.default_rng(seed)
    pooled = dict(run.acts.pooled)
    for key in ("mean_no_pos0", "mean_no_massive"):
        pooled[key] = (pooled["mean"] + rng.normal(scale=0.2, size=pooled["mean"].shape)).astype(np.float32)
    pre_norm = {p: (3 * x[:, -1] + rng.normal(size=x[:, -1].shape)).astype(np.float32) for p, x in pooled.items()}
    return dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled=pooled, pre_norm=pre_norm))


def test_profile_summary_by_hand():
    s = profile_summary([0, 4, 8, 12, 16], [0.2, 0.6, -0.1, -0.5, 0.3], n_layers=16)
    assert (s["max_pos_r"], s["max_pos_layer"], s["max_pos_pct"]) == (0.6, 4, 25.0)
    assert (s["max_neg_r"], s["max_neg_layer"], s["max_neg_pct"]) == (-0.5, 12, 75.0)
    assert s["final_r"] == 0.3
    assert s["sign_changes"] == [{"layer_before": 4, "layer_after": 8, "midpoint_pct": 37.5},
                                 {"layer_before": 12, "layer_after": 16, "midpoint_pct": 87.5}]


def test_peak_stability_by_hand():
    stable = peak_stability([25.0, 30.0, 35.0])  # population std = sqrt(50 / 3) = 4.08
    assert stable["std_peak_pct"] == pytest.approx(math.sqrt(50 / 3))
    assert stable["mean_peak_pct"] == 30.0 and stable["peaks_stable"] is True
    assert "STABLE" in stable["answer"] and "~30%" in stable["answer"]
    shifts = peak_stability([10.0, 50.0])  # std = 20
    assert shifts["std_peak_pct"] == 20.0 and shifts["peaks_stable"] is False and "SHIFTS" in shifts["answer"]
    edge = peak_stability([0.0, 20.0])  # std = 10 is not below 10
    assert edge["peaks_stable"] is False
    single = peak_stability([40.0])
    assert single["peaks_stable"] is None and "at least two models" in single["answer"]


def test_default_profile_rows_match_scipy_and_q_decides_significance():
    run = staged(pair_run(seed=9))
    layers = [0, 2, 4, 6, 8]
    summary, rows = analyse_model(run, layers, "last", n_permutations=1000, level=0.95)  # 6! = 720: exact
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    pref = np.array([run.pref[cats == c].mean() for c in range(n_cat)])
    main = [r for r in rows if r["subset"] == "all"]
    r_rows = {r["layer"]: r for r in main if r["metric"] == "r_ua_pref"}
    rho_rows = {r["layer"]: r for r in main if r["metric"] == "rho_ua_pref"}
    assert [r.get("stage") for r in r_rows.values()] == [None] * 4 + ["pre_norm"]  # layer 8 = n_layers
    for layer in layers:  # layer 8 is the last block's output before the final norm
        states = run.acts.pooled["last"][:, layer] if layer < 8 else run.acts.pre_norm["last"]
        a, b = states[0::2], states[1::2]
        ua = np.array([notebook.uniformity(a[cats == c]) - notebook.uniformity(b[cats == c]) for c in range(n_cat)])
        r = stats.pearsonr(ua, pref)[0]
        assert r_rows[layer]["value"] == pytest.approx(r, abs=1e-6)
        exact = np.mean([abs(np.corrcoef(ua, pref[list(perm)])[0, 1]) >= abs(r) - 1e-12
                         for perm in itertools.permutations(range(n_cat))])
        assert r_rows[layer]["p_perm"] == pytest.approx(exact, abs=1e-9)
        half = stats.norm.ppf(0.975) / np.sqrt(n_cat - 3)
        assert (r_rows[layer]["ci_lo"], r_rows[layer]["ci_hi"]) == pytest.approx(
            (np.tanh(np.arctanh(r) - half), np.tanh(np.arctanh(r) + half)), abs=1e-6)
        assert rho_rows[layer]["value"] == pytest.approx(stats.spearmanr(ua, pref)[0], abs=1e-9)
    for family, key in ((r_rows, "p_perm"), (rho_rows, "p")):
        q = stats.false_discovery_control([family[layer][key] for layer in layers], method="bh")
        np.testing.assert_allclose([family[layer]["q"] for layer in layers], q, rtol=1e-12)
        assert [family[layer]["significant"] for layer in layers] == list(q < 0.05)
    peak = r_rows[summary["max_pos_layer"]]
    assert summary["max_pos_layer"] == max((layer for layer in layers if layer != 0),
                                           key=lambda layer: r_rows[layer]["value"])
    assert summary["max_pos_ci"] == [peak["ci_lo"], peak["ci_hi"]] and summary["max_pos_q"] == peak["q"]
    assert summary["significant_layers"] == [layer for layer in layers if r_rows[layer]["significant"]]


def test_seed_mode_profile_is_r_and_p_only():
    run = pair_run(seed=9)
    summary, rows = analyse_model(run, [0, 4, 8], "mean", compat="notebooks")
    assert {r["metric"] for r in rows} == {"r_ua_pref"}
    assert all(set(r) == {"model", "layer", "n_layers", "depth", "metric", "value", "pooling", "p", "n"} for r in rows)
    assert {"max_pos_ci", "max_pos_q", "significant_layers"}.isdisjoint(summary)


def test_scaling_warns_about_few_categories(monkeypatch):
    from layerscope.studies.scaling import Scaling
    from layerscope.studies.shared import inputs
    from layerscope.study.config import StudyConfig

    monkeypatch.setattr(inputs, "pair_runs", lambda config, pairs, timings: iter([staged(pair_run(seed=9))]))
    summary = Scaling().run(StudyConfig(study="scaling", models=("synthetic",))).summary
    assert list(summary["models"]) == ["synthetic"] and "max_pos_q" in summary["models"]["synthetic"]
    assert summary["warnings"] == [  # from the bundled dataset's 7 categories
        "scaling: category-level correlations use n = 7 categories (< 10): r, p and intervals are very unstable; "
        "treat them as descriptive."]
