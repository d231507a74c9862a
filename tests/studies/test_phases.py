import dataclasses

import numpy as np
import pytest
from scipy import stats

import notebook_reference as notebook
import synthetic
from layerscope.studies.phases.analysis import analyse_model, late_inversion, pattern, phase_split
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
    summary, rows = analyse_model(run, layers, "mean", 400, 0.95, seed=42, compat="notebooks")
    np.random.seed(42)  # the notebook: global seed, then layer by layer, resample by resample
    a, b, pref = run.a("mean"), run.b("mean"), run.pref
    for layer, row in zip(layers, [r for r in rows if r["metric"] == "r_centroid_pref"], strict=False):
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


def loo_asymmetry(a, b):
    """Pair i against the mean of the other pairs, one pair at a time."""
    def cos(u, v):
        return u @ v / (np.linalg.norm(u) * np.linalg.norm(v))

    idx = range(len(a))
    return np.array([cos(a[i], np.delete(a, i, 0).mean(0)) - cos(b[i], np.delete(b, i, 0).mean(0)) for i in idx])


def metric_rows(rows, metric, subset="all"):
    return {r["layer"]: r for r in rows if r["metric"] == metric and r["subset"] == subset}


def test_default_rows_match_scipy_on_leave_one_out_centroids():
    run = pair_run(seed=6)
    layers = [0, 4, 8]
    summary, rows = analyse_model(run, layers, "mean", 300, 0.9, seed=5, compat=None, n_permutations=500)
    a, b = np.asarray(run.a("mean"), dtype=np.float64), np.asarray(run.b("mean"), dtype=np.float64)
    nll = run.acts.nll_sum / run.acts.n_scored
    pref, pref_sum = nll[1::2] - nll[0::2], run.acts.nll_sum[1::2] - run.acts.nll_sum[0::2]
    r_rows, rho_rows, self_rows, sum_rows = (metric_rows(rows, m) for m in (
        "r_centroid_pref", "rho_centroid_pref", "r_centroid_pref_self", "r_centroid_pref_sum"))
    for layer in layers:
        x = loo_asymmetry(a[:, layer], b[:, layer])
        row = r_rows[layer]
        assert row["centroids"] == "loo" and row["value"] == pytest.approx(stats.pearsonr(x, pref)[0], abs=1e-9)
        ci = stats.bootstrap((x, pref), lambda u, v: np.corrcoef(u, v)[0, 1], paired=True, vectorized=False,
                             n_resamples=300, confidence_level=0.9, method="BCa", rng=np.random.default_rng(5))
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx(tuple(ci.confidence_interval), abs=1e-8)
        perm = stats.permutation_test((pref,), lambda y, x=x: abs(np.corrcoef(x, y)[0, 1]), permutation_type="pairings",
                                      vectorized=False, n_resamples=500, alternative="greater",
                                      rng=np.random.default_rng(5))
        assert row["p_perm"] == pytest.approx(perm.pvalue, abs=1e-12)
        assert rho_rows[layer]["value"] == pytest.approx(stats.spearmanr(x, pref)[0], abs=1e-9)
        self_x = notebook.centroid_asymmetry(a[:, layer], b[:, layer])
        assert self_rows[layer]["centroids"] == "self"
        assert self_rows[layer]["value"] == pytest.approx(stats.pearsonr(self_x, pref)[0], abs=1e-9)
        assert sum_rows[layer]["value"] == pytest.approx(stats.pearsonr(x, pref_sum)[0], abs=1e-9)
    diffs = {layer: r_rows[layer]["value"] - self_rows[layer]["value"] for layer in layers}
    largest = max(diffs, key=lambda layer: abs(diffs[layer]))
    expected = {"layer": largest, "r_loo": r_rows[largest]["value"], "r_self": self_rows[largest]["value"],
                "difference": diffs[largest]}
    assert summary["loo_vs_self"] == pytest.approx(expected)
    assert summary["final_q"] == r_rows[8]["q"]


def test_significance_is_judged_on_q_in_default_mode():
    run = pair_run(seed=7, sizes=(12, 12, 12, 12))
    # make late layers track the preference, so some layers are significant and some are not
    pooled = np.array(run.acts.pooled["mean"])
    pref = run.pref
    pooled[0::2, 5:, 0] += 3 * pref[:, None].astype(np.float32)
    run = dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled={**run.acts.pooled, "mean": pooled}))
    summary, rows = analyse_model(run, run.layers, "mean", 200, 0.95, seed=1, compat=None, n_permutations=400)
    r_rows = metric_rows(rows, "r_centroid_pref")
    q = stats.false_discovery_control([r_rows[layer]["p_perm"] for layer in run.layers], method="bh")
    np.testing.assert_allclose([r_rows[layer]["q"] for layer in run.layers], q, rtol=1e-12)
    assert [r_rows[layer]["significant"] for layer in run.layers] == list(q < 0.05)
    assert summary["significant_layers"] == [layer for layer, qi in zip(run.layers, q, strict=False) if qi < 0.05]
    assert 0 < len(summary["significant_layers"]) < len(run.layers)
    assert summary["final_significant"] == (q[-1] < 0.05) and summary["significance"] == "q"
    # default mode: a label only when q < 1 - level (here q ~ 0.3 with r < 0: the notebook said "Negative trend")
    assert q[-1] >= 0.05 and summary["final_r"] < 0
    assert summary["late_inversion"].startswith("not significant (n = 48, p_perm = ")
    assert f"q = {q[-1]:.3f}" in summary["late_inversion"] and summary["late_label"] == "NOT_SIGNIFICANT"


def test_seed_mode_keeps_self_centroids_and_no_extra_rows():
    run = pair_run(seed=3)
    summary, rows = analyse_model(run, [0, 4, 8], "mean", 200, 0.95, seed=42, compat="notebooks")
    assert {r["metric"] for r in rows} == {"r_centroid_pref", "phase_mean"}
    assert all(r["centroids"] == "self" for r in rows if r["metric"] == "r_centroid_pref")
    assert all("p_perm" not in r and "q" not in r for r in rows)
    assert {"length_control", "loo_vs_self", "without_category"}.isdisjoint(summary)


@pytest.mark.parametrize("compat", [None, "notebooks"])
def test_dropped_category_rows_equal_an_analysis_of_the_dataset_without_it(compat):
    run = pair_run(seed=8)
    layers = [0, 4, 8]
    summary, rows = analyse_model(run, layers, "mean", 200, 0.95, 3, compat, n_permutations=300, drop_category="c1")
    expected_summary, expected = analyse_model(synthetic.without(run, "c1"), layers, "mean", 200, 0.95, 3, compat,
                                               n_permutations=300)
    dropped = [r for r in rows if r["subset"] == "without c1"]
    # by default the table also holds the sensitivity checks (other subsets); "without c1" is written once
    expected = [r for r in expected if r["subset"] == "all"]
    assert len(dropped) == len(expected) and len([r for r in rows if r["subset"] == "all"]) == len(expected)
    for got, want in zip(dropped, expected, strict=False):
        assert {**got, "subset": "all"} == pytest.approx(want, nan_ok=True)
    w = summary["without_category"]
    assert w["category"] == "c1" and w["n_pairs"] == 27
    for key in ("phases", "pattern", "late_inversion", "final_r", "significant_layers"):
        assert w[key] == expected_summary[key]


def test_unknown_drop_category_and_small_n_warnings(monkeypatch):
    from layerscope.studies.phases import Phases, pair_warnings
    from layerscope.study import per_model as runner
    from layerscope.study.config import ConfigError, StudyConfig

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match="'nope' is not a category.*choose one of"):
        Phases().run(StudyConfig(study="phases", models=("smollm2-135m",), drop_category="nope"))
    assert Phases().run(StudyConfig(study="phases", models=())).summary["warnings"] == []  # 154 bundled pairs
    small = pair_run(sizes=(3, 4, 2))
    assert pair_warnings(small.pairs, "c0") == [
        "phases: pair-level correlations use n = 9 pairs (< 10): r, p and intervals are very unstable; "
        "treat them as descriptive.",
        "phases without c0: pair-level correlations use n = 6 pairs (< 10): r, p and intervals are very unstable; "
        "treat them as descriptive."]


def test_report_and_figure_of_a_default_run():
    from layerscope.studies.phases import Phases
    from layerscope.study import StudyResult
    from layerscope.study.result import make_table

    run = pair_run(seed=2, sizes=(3, 4, 2))
    summary, rows = analyse_model(run, run.layers, "mean", 200, 0.95, 42, None, n_permutations=300,
                                  drop_category="c2")
    result = StudyResult(study="phases", config={"compat": None, "ci_level": 0.95, "n_permutations": 300},
                         manifest={}, table=make_table(rows), summary={
                             "models": {"synthetic": summary}, "comparison": [],
                             "warnings": ["phases: pair-level correlations use n = 9 pairs (< 10): ..."]})
    text = Phases().report(result)
    assert text.split("## synthetic")[0].count("> **Warning:** phases") == 1
    for section in ("### Leave-one-out vs self-including centroids", "### Without c2 (7 pairs)", "### Length control",
                    "| layer | depth | r | 95% CI | p | p_perm | q | rho | significant |"):
        assert section in text
    assert set(Phases().figures(result)) == {"phases"}
