"""Phases verdicts (issue 12) on constructed data whose answer is known: the pattern follows from bootstrap
intervals over pairs, the late-layer label needs q, every phase needs two tested layers, and the sensitivity
checks recompute both verdicts (pre-norm main analysis, post-norm check, token and category checks).

The runs are built so that at each hidden state the leave-one-out centroid asymmetry tracks the preference with a
chosen sample correlation: A states e1 + rho_i v_i (v_i orthonormal, orthogonal to e1), B states all e1, so
cos(b, centroid B) = 1 and cos(a_i, centroid of the others) is close to 1 / sqrt(1 + rho_i^2).
"""

import dataclasses

import numpy as np
import pytest
from scipy import stats

import synthetic
from layerscope.studies.phases import Phases, comparison, headline_line
from layerscope.studies.phases.analysis import analyse_model, interval_pattern, late_verdict, pattern
from layerscope.studies.phases.bootstrap import index_batches, phase_bootstrap

PHASE_COLUMNS = {"early": [0, 1, 2], "mid": [3, 4, 5], "late": [6, 7, 8]}


def signal(pref, r, rng):
    """(n,) a column whose sample Pearson r with ``pref`` is exactly ``r``."""
    z = (pref - pref.mean()) / pref.std()
    e = rng.normal(size=len(pref))
    e -= e.mean()
    e -= (e @ z) / (z @ z) * z
    return r * z + np.sqrt(1 - r * r) * e / e.std()


def a_states(column):
    """(n, n + 1) A states whose leave-one-out centroid cosine increases with ``column`` (nearly linearly)."""
    n = len(column)
    target = -0.5 + 0.1 * column / np.abs(column).max()  # cos - 1, in [-0.6, -0.4]
    a = np.zeros((n, n + 1))
    a[:, 0] = 1
    a[np.arange(n), np.arange(n) + 1] = np.sqrt(1 / (1 + target) ** 2 - 1)
    return a


def designed_run(rs, sizes=(50,) * 6, seed=0, post_norm_r=None, no_pos0=None, no_massive=None):
    """A run whose r(centroid asymmetry, preference) at hidden state l is about ``rs[l]`` (the last one before the
    final norm; after it ``post_norm_r``), and whose check poolings follow ``no_pos0`` / ``no_massive`` (default:
    the same design, other noise)."""
    base = synthetic.pair_run(seed=seed, sizes=sizes, n_layers=len(rs) - 1, d=2)
    n = base.pairs.n_pairs
    rng = np.random.default_rng(seed)
    pref = rng.normal(size=n)

    def texts(profile):
        a = np.stack([a_states(signal(pref, r, rng)) for r in profile], axis=1)  # (n, L + 1, n + 1)
        out = np.zeros((2 * n, len(profile), n + 1), dtype=np.float32)
        out[0::2], out[1::2, :, 0] = a, 1.0
        return out

    pooled, pre_norm = {}, {}
    for pooling, profile in (("mean", rs), ("mean_no_pos0", no_pos0 or rs), ("mean_no_massive", no_massive or rs)):
        pre = texts(profile)
        post = texts([*profile[:-1], post_norm_r if post_norm_r is not None else profile[-1]])
        pooled[pooling], pre_norm[pooling] = post, pre[:, -1]
        pooled[pooling][:, :-1] = pre[:, :-1]
    nll_sum = np.full(2 * n, 5.0)
    nll_sum[1::2] += pref
    run = synthetic.with_scores(base, nll_sum, np.ones(2 * n, dtype=int), np.full(2 * n, 2))
    return dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled=pooled, pre_norm=pre_norm))


def naive_x(run, layer, stage="pre_norm", pooling="mean"):
    """Leave-one-out centroid asymmetry at ``layer`` (pre- or post-norm at the last), one pair at a time."""
    x = run.acts.pre_norm[pooling] if stage == "pre_norm" and layer == run.info.n_layers else \
        run.acts.pooled[pooling][:, layer]
    a, b = x[0::2].astype(np.float64), x[1::2].astype(np.float64)

    def cos(u, v):
        return u @ v / (np.linalg.norm(u) * np.linalg.norm(v))

    def others(m, i):
        return np.delete(m, i, 0).mean(0)

    return np.array([cos(a[i], others(a, i)) - cos(b[i], others(b, i)) for i in range(len(a))])


def naive_intervals(xs, pref, idx, level=0.95):
    """Percentile intervals of the phase means and late - early from one np.corrcoef per layer and resample."""
    draws = {name: [] for name in (*PHASE_COLUMNS, "late - early")}
    for rows in idx:
        r = [np.corrcoef(x[rows], pref[rows])[0, 1] for x in xs]
        means = {name: np.mean([r[c] for c in cols]) for name, cols in PHASE_COLUMNS.items()}
        for name, value in means.items():
            draws[name].append(value)
        draws["late - early"].append(means["late"] - means["early"])
    alpha = 1 - level
    return {name: tuple(np.percentile(v, [50 * alpha, 100 - 50 * alpha])) for name, v in draws.items()}


def analyse(run, layers=None, n_bootstrap=400, seed=3, compat=None, **kwargs):
    return analyse_model(run, layers or run.layers, "mean", n_bootstrap, 0.95, seed, compat, n_permutations=200,
                         **kwargs)


@pytest.fixture(scope="module")
def pythia():
    """300 pairs, r +0.6 early, +0.2 mid, -0.6 late (before the final norm), +0.4 after it; without the
    massive-activation tokens r is 0 throughout."""
    run = designed_run([0.6, 0.6, 0.6, 0.2, 0.2, 0.2, -0.6, -0.6, -0.6], post_norm_r=0.4, no_massive=[0.0] * 9)
    return run, *analyse(run, n_bootstrap=500)


def test_a_clear_pythia_pattern_with_many_pairs_has_intervals_equal_to_a_naive_bootstrap(pythia):
    run, summary, rows = pythia
    xs = [naive_x(run, layer) for layer in run.layers]
    pref = run.pref
    r = [stats.pearsonr(x, pref)[0] for x in xs]
    profile = {row["layer"]: row for row in rows if row["metric"] == "r_centroid_pref" and row["subset"] == "all"}
    np.testing.assert_allclose([profile[layer]["value"] for layer in run.layers], r, atol=1e-6)
    idx = np.concatenate(list(index_batches(len(pref), 500, 3, len(run.layers))))
    assert len(list(index_batches(len(pref), 500, 3, 9))) == 1  # one batch here: numpy's own draw, seeded
    np.testing.assert_array_equal(idx, np.random.default_rng(3).integers(0, len(pref), size=(500, len(pref))))
    expected = naive_intervals(xs, pref, idx)
    for phase, cols in PHASE_COLUMNS.items():
        p = summary["phases"][phase]
        assert p["mean"] == pytest.approx(np.mean([r[c] for c in cols]), abs=1e-6) and p["n"] == 3
        assert (p["ci_lo"], p["ci_hi"]) == pytest.approx(expected[phase], abs=1e-6)
    d = summary["phase_difference"]
    assert (d["ci_lo"], d["ci_hi"]) == pytest.approx(expected["late - early"], abs=1e-6)
    assert expected["early"][0] > 0.1 and expected["late"][1] < -0.1  # the naive intervals clear the thresholds
    assert summary["pattern"] == "PYTHIA_PATTERN" and summary["stage"] == "pre_norm"
    assert profile[8]["stage"] == "pre_norm" and all("stage" not in profile[layer] for layer in range(8))
    means = {row["phase"]: row for row in rows if row["metric"] in ("phase_mean", "phase_difference")
             and row["subset"] == "all"}
    assert (means["late - early"]["ci_lo"], means["early"]["ci_hi"]) == (
        d["ci_lo"], summary["phases"]["early"]["ci_hi"])


def test_the_last_tested_layer_verdict_needs_r_below_minus_0_1_with_q(pythia):
    run, summary, _ = pythia
    x = naive_x(run, 8)
    r = stats.pearsonr(x, run.pref)[0]
    assert r < -0.5 and summary["final_layer"] == 8 and summary["final_stage"] == "pre_norm"
    assert summary["final_q"] < 0.05 and summary["late_inversion"] == "LATE-LAYER INVERSION CONFIRMED"
    assert late_verdict({"value": -0.11, "q": 0.01, "p_perm": 0.002}, 48, 0.95) == (
        "CONFIRMED", "LATE-LAYER INVERSION CONFIRMED")
    key, text = late_verdict({"value": -0.10, "q": 0.30, "p_perm": 0.1, "ci_lo": -0.45, "ci_hi": 0.2}, 48, 0.95)
    assert key == "NOT_SIGNIFICANT" and "trend" not in text.lower()
    assert text == "not significant (n = 48, p_perm = 0.100, q = 0.300, 95% CI [-0.450, +0.200])"
    assert late_verdict({"value": -0.05, "q": 0.01}, 48, 0.95)[0] == "NO_INVERSION"
    assert late_verdict({"value": float("nan"), "q": float("nan")}, 48, 0.95)[0] == "NOT_ASSESSABLE"


def test_checks_recompute_both_verdicts_and_name_what_flips(pythia):
    run, summary, rows = pythia
    checks = {c["check"]: c for c in summary["checks"]}
    assert list(checks) == ["without position 0", "without massive-activation tokens", "after the final norm",
                            *(f"without c{i}" for i in range(6))]
    after = checks["after the final norm"]
    post_r = stats.pearsonr(naive_x(run, 8, "post_norm"), run.pref)[0]
    assert post_r > 0.3 and after["value"] == pytest.approx(post_r, abs=1e-6)
    assert after["late_flips"] and not after["pattern_flips"]  # late still averages two layers below -0.6
    norm_rows = [r for r in rows if r["subset"] == "after the final norm"]
    assert [(r["layer"], r["stage"], r["metric"]) for r in norm_rows] == [(8, "post_norm", "r_centroid_pref")]
    massive = checks["without massive-activation tokens"]
    assert massive["pattern_flips"] and massive["pattern"] != "PYTHIA_PATTERN"
    assert not checks["without position 0"]["flips"]
    # leaving out one category of 50: the same verdicts, r recomputed on the other 250 pairs
    keep = run.pairs.pair_categories() != 2
    kept = synthetic.without(run, "c2")  # the leave-one-out centroids change too: recompute on the kept pairs
    kept = dataclasses.replace(kept, acts=dataclasses.replace(kept.acts, pre_norm={
        p: v[np.repeat(keep, 2)] for p, v in run.acts.pre_norm.items()}))
    assert checks["without c2"]["value"] == pytest.approx(stats.pearsonr(naive_x(kept, 8), run.pref[keep])[0],
                                                          abs=1e-6)
    assert not checks["without c2"]["flips"] and checks["without c2"]["n_pairs"] == 250
    assert summary["robustness"] == ("not robust: flips without massive-activation tokens, after the final norm")
    check_rows = [r for r in rows if r["subset"] == "without c2"]
    assert {r["metric"] for r in check_rows} == {"r_centroid_pref", "phase_mean", "phase_difference"}


def test_the_headline_carries_pattern_intervals_late_verdict_and_robustness(pythia):
    _, summary, _ = pythia
    line = headline_line("m", summary)
    p = summary["phases"]["early"]
    assert line.startswith(f"m: PYTHIA_PATTERN (phase means, 95% CI: early {p['mean']:+.2f} [{p['ci_lo']:+.2f}, "
                           f"{p['ci_hi']:+.2f}]")
    assert "last tested layer (8, before the final norm): LATE-LAYER INVERSION CONFIRMED" in line
    assert line.endswith("[not robust: flips without massive-activation tokens, after the final norm]")


def test_a_pattern_at_the_threshold_with_wide_intervals_gets_no_label():
    """24 pairs, r +0.13 early and -0.13 late: the notebook's rule says PYTHIA_PATTERN, the intervals do not."""
    run = designed_run([0.13] * 3 + [0.0] * 3 + [-0.13] * 3, sizes=(6, 6, 6, 6))
    summary, _ = analyse(run)
    r = [stats.pearsonr(naive_x(run, layer), run.pref)[0] for layer in run.layers]
    means = [np.mean([r[c] for c in cols]) for cols in PHASE_COLUMNS.values()]
    assert pattern(*means) == "PYTHIA_PATTERN"  # the notebook's rule on the bare means
    assert summary["pattern"] == "NO_PATTERN"
    early, late = summary["phases"]["early"], summary["phases"]["late"]
    assert early["ci_lo"] < 0.1 < early["ci_hi"] and late["ci_lo"] < -0.1 < late["ci_hi"]
    assert summary["pattern_text"].startswith("no pattern (intervals cross the thresholds: early 95% CI [")
    clauses = dict(clause.split(" 95% CI ") for clause in summary["pattern_text"].removeprefix(
        "no pattern (intervals cross the thresholds: ").removesuffix(")").split("; "))
    assert set(clauses) <= {"early", "mid", "late", "late - early"}
    assert "+0.10" in clauses["early"].split("contains")[1] and "-0.10" in clauses["late"].split("contains")[1]
    lo, hi = clauses["early"].split("]")[0][1:].split(", ")
    assert (float(lo), float(hi)) == pytest.approx((early["ci_lo"], early["ci_hi"]), abs=0.006)
    assert "n = 24 pairs" not in headline_line("m", summary)  # 24 >= 10: no small-n caveat
    assert headline_line("m", summary).startswith("m: no pattern (intervals cross the thresholds")


def test_negative_from_layer_0_with_early_more_negative_than_late_is_not_a_late_inversion():
    run = designed_run([-0.5] * 3 + [-0.4] * 3 + [-0.3] * 3, sizes=(50,) * 6)
    summary, _ = analyse(run)
    assert summary["phases"]["late"]["ci_hi"] < -0.1  # late is negative ...
    assert summary["phase_difference"]["ci_lo"] > 0  # ... but less negative than early
    assert summary["pattern"] == "NO_PATTERN"
    seed_summary, _ = analyse(run, compat="notebooks")
    assert seed_summary["pattern"] == "LATE_INVERSION"  # what the notebook's rule printed


def test_a_late_inversion_needs_late_below_minus_0_1_and_below_early():
    run = designed_run([0.0] * 3 + [-0.2] * 3 + [-0.5] * 3, sizes=(50,) * 6)
    summary, _ = analyse(run)
    assert summary["phase_difference"]["ci_hi"] < 0 and summary["pattern"] == "LATE_INVERSION"


@pytest.mark.parametrize("layers, counts", [([0, 4, 8], "early has 1 (0); mid has 1 (4); late has 1 (8)"),
                                            ([0, 1, 2, 3], "early has 1 (0); mid has 1 (1)")])
def test_phases_with_one_tested_layer_are_not_assessable(layers, counts):
    run = designed_run([0.6] * 3 + [0.2] * 3 + [-0.6] * 3, sizes=(6, 6, 6, 6))
    summary, _ = analyse(run, layers=layers)
    assert summary["pattern"] == "NOT_ASSESSABLE"
    assert summary["pattern_text"] == ("not assessable: each phase needs at least 2 tested layers with a defined r "
                                       f"({counts})")
    assert summary["final_layer"] == layers[-1]
    assert headline_line("m", summary).split(" (phase means")[0] == f"m: {summary['pattern_text']}"
    if 8 not in layers:  # the final layer is not tested: no check of it after the final norm
        assert "after the final norm" not in [c["check"] for c in summary["checks"]]


@pytest.mark.parametrize("intervals, label", [
    ({"early": (0.11, 0.6), "mid": (-1, 1), "late": (-0.6, -0.11), "late - early": (-1, -0.3)}, "PYTHIA_PATTERN"),
    ({"early": (0.09, 0.6), "mid": (-1, 1), "late": (-0.6, -0.11), "late - early": (-1, -0.3)}, "LATE_INVERSION"),
    ({"early": (-0.6, -0.3), "mid": (-1, 1), "late": (-0.6, -0.11), "late - early": (-0.2, 0.01)}, "NO_PATTERN"),
    ({"early": (0.11, 0.6), "mid": (-1, 1), "late": (-0.6, -0.09), "late - early": (-1, -0.3)}, "NO_PATTERN"),
    ({"early": (-0.14, 0.14), "mid": (-0.14, 0.14), "late": (-0.14, 0.149), "late - early": (-0.2, 0.2)},
     "DECOUPLED"),
    ({"early": (-0.14, 0.15), "mid": (-0.14, 0.14), "late": (-0.14, 0.14), "late - early": (-0.2, 0.2)},
     "NO_PATTERN"),
])
def test_interval_rule_at_its_thresholds(intervals, label):
    assert interval_pattern(intervals)[0] == label


def test_batched_phase_bootstrap_equals_a_loop_over_the_same_resamples():
    rng = np.random.default_rng(5)
    y = rng.normal(size=40)
    x = np.column_stack([signal(y, r, rng) for r in (0.5, 0.4, 0.3, 0.0, 0.1, -0.2, -0.4, -0.5, -0.3)])
    idx = rng.integers(0, 40, size=(300, 40))
    samples = phase_bootstrap(x, y, PHASE_COLUMNS, [idx[:7], idx[7:200], idx[200:]])
    for b in (0, 150, 299):
        r = [np.corrcoef(x[idx[b], c], y[idx[b]])[0, 1] for c in range(9)]
        for name, cols in PHASE_COLUMNS.items():
            assert samples[name][b] == pytest.approx(np.mean([r[c] for c in cols]), abs=1e-12)
        assert samples["late - early"][b] == pytest.approx(np.mean(r[6:]) - np.mean(r[:3]), abs=1e-12)
    assert all(len(v) == 300 for v in samples.values())


def test_comparison_rows_carry_their_method_and_the_report_marks_them(tmp_path, pythia):
    from layerscope.data.reference import load_phase_reference
    from layerscope.study import StudyResult
    from layerscope.study.result import make_table

    run, summary, rows = pythia
    reference = load_phase_reference()
    compared = comparison(reference, {"m": summary}, run.pairs)
    this = compared[-1]
    assert this["source"] == "this run" and this["comparable"] is None
    assert this["data"] == f"synthetic (300 pairs, sha256 {run.pairs.hash[:12]})"
    assert this["layers"] == "0-8 of 8 (8 before the final norm)"
    assert this["token_rule"] == "mean over the tokens, a BOS token dropped by its id"
    assert [row["comparable"] for row in compared[:-1]] == [False] * 3
    assert all(row["comparability"].startswith("not directly comparable (data, layers, token rule")
               for row in compared[1:-1])
    seed_rows = comparison(reference, {"m": summary}, run.pairs, compat="notebooks")
    assert [set(row) for row in seed_rows] == [{"model", "source", "early", "mid", "late"}] * 4
    result = StudyResult(study="phases", config={"compat": None, "ci_level": 0.95, "n_permutations": 200},
                         manifest={}, table=make_table(rows),
                         summary={"models": {"synthetic": summary}, "comparison": compared, "warnings": []})
    text = Phases().report(result)
    for part in ("### Sensitivity checks", "**Robustness:** not robust: flips without massive-activation tokens",
                 "| late - early |", "**Pattern: PYTHIA_PATTERN**", "not directly comparable (data, layers",
                 "The final layer (8) is taken before the final norm", "| 8 (before the final norm) |",
                 "Last tested layer (8, before the final norm)"):
        assert part in text, part
    assert Phases().headline(result) == [headline_line("synthetic", summary)]
    assert set(Phases().figures(result)) == {"phases"}


def test_the_dropped_category_check_reuses_its_full_analysis_without_duplicate_rows():
    run = designed_run([0.6] * 3 + [0.2] * 3 + [-0.6] * 3, sizes=(6, 6, 6, 6))
    summary, rows = analyse(run, drop_category="c1")
    check = {c["check"]: c for c in summary["checks"]}["without c1"]
    keep = run.pairs.pair_categories() != 1
    kept = synthetic.without(run, "c1")
    kept = dataclasses.replace(kept, acts=dataclasses.replace(kept.acts, pre_norm={
        p: v[np.repeat(keep, 2)] for p, v in run.acts.pre_norm.items()}))
    assert check["value"] == pytest.approx(stats.pearsonr(naive_x(kept, 8), run.pref[keep])[0], abs=1e-6)
    assert check["value"] == summary["without_category"]["final_r"] and check["n_pairs"] == 18
    assert check["pattern"] == summary["without_category"]["pattern"]
    without = [r for r in rows if r["subset"] == "without c1"]
    full = [r for r in rows if r["subset"] == "all"]
    assert len(without) == len(full)  # the full analysis once (controls included), no second copy for the check
    assert len({(r["metric"], r.get("layer"), r.get("phase")) for r in without}) == len(without)
