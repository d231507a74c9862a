import dataclasses
import itertools
import json

import numpy as np
import pytest
from scipy import stats

import notebook_reference as notebook
import synthetic
from layerscope.studies.divergence.analysis import analyse_model, interpret, pooling_effect, sign_summary
from layerscope.study.result import make_table


def staged(run, seed=0):
    """The run with what the engine extracts by default beside it: pre-norm final states for every pooling and the
    check poolings mean_no_pos0 and mean_no_massive (each a perturbed copy of the mean)."""
    rng = np.random.default_rng(seed + 100)
    mean = run.acts.pooled["mean"]
    pooled = {**run.acts.pooled, **{p: (mean + rng.normal(scale=0.5, size=mean.shape)).astype(np.float32)
                                    for p in ("mean_no_pos0", "mean_no_massive")}}
    pre_norm = {p: (3 * x[:, -1] + rng.normal(size=x[:, -1].shape)).astype(np.float32) for p, x in pooled.items()}
    return dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled=pooled, pre_norm=pre_norm))


def pair_run(seed=0, **kwargs):
    return staged(synthetic.pair_run(seed=seed, **kwargs), seed)


def rebuilt_without(run, name):
    """synthetic.without, with the pre-norm rows of the kept pairs too."""
    keep = np.repeat([c.name != name for c in run.pairs.categories for _ in c.pairs], 2)
    rebuilt = synthetic.without(run, name)
    return dataclasses.replace(rebuilt, acts=dataclasses.replace(
        rebuilt.acts, pre_norm={p: x[keep] for p, x in run.acts.pre_norm.items()}))


def states(run, pooling, layer, side):
    """(n_pairs, d) states of the A (side 0) or B (side 1) texts at ``layer``, the final one before the final norm."""
    x = run.acts.pre_norm[pooling] if layer == run.info.n_layers else run.acts.pooled[pooling][:, layer]
    return x[side::2]


@pytest.mark.parametrize("r, label", [
    (-0.51, "INVERSE (strong negative)"), (-0.5, "Weak negative"), (-0.21, "Weak negative"),
    (-0.2, "DECOUPLED (near zero)"), (0.19, "DECOUPLED (near zero)"), (0.2, "Weak positive"),
    (0.49, "Weak positive"), (0.5, "ALIGNED (strong positive)"),
])
def test_interpretation_labels_at_their_thresholds(r, label):
    assert interpret(r) == label


def test_sign_summary_by_hand():
    points, sign = sign_summary([0, 4, 8, 12], [0.3, -0.1, -0.4, 0.2])
    assert sign is None
    assert [(p["layer_before"], p["layer_after"]) for p in points] == [(0, 4), (8, 12)]
    assert sign_summary([0, 4], [-0.3, -0.1]) == ([], "negative")
    assert sign_summary([0, 4], [0.3, 0.1]) == ([], "positive")
    assert sign_summary([0, 4], [0.3, 0.0]) == ([], "unclear")


def test_pooling_effect_thresholds():
    assert pooling_effect(0.1, 0.31).startswith("Last-token embeddings correlate MORE")
    assert pooling_effect(0.1, -0.11).startswith("Last-token embeddings correlate LESS")
    assert pooling_effect(0.1, 0.29) == "Pooling strategy has minimal effect on correlation."


def naive_r(run, pooling, layer):
    """The notebook's loop: per category, explicit cosine kernel, upper triangle, then Pearson (the final layer
    before the final norm)."""
    uniformity = notebook.uniformity
    a, b = states(run, pooling, layer, 0), states(run, pooling, layer, 1)
    pref, cats = run.pref, run.pairs.pair_categories()
    uas = [uniformity(a[cats == c]) - uniformity(b[cats == c]) for c in range(len(run.pairs.categories))]
    prefs = [pref[cats == c].mean() for c in range(len(run.pairs.categories))]
    return np.corrcoef(uas, prefs)[0, 1]


def test_analysis_matches_the_notebook_loop_at_every_layer_and_pooling():
    run = pair_run()
    summary, rows = analyse_model(run, [0, 4, 8])
    r_rows = [r for r in rows if r["metric"] == "r_ua_pref" and r["subset"] == "all"]
    assert len(r_rows) == 3 * 3
    for row in r_rows:
        assert row["value"] == pytest.approx(naive_r(run, row["pooling"], row["layer"]), abs=1e-6)  # float32 kernel
        assert row["n"] == 6 and row["depth"] == row["layer"] / 8
        assert row.get("stage") == ("pre_norm" if row["layer"] == 8 else None)
    for c in summary["pooling_comparison"]:
        assert c["layer"] == 8 and c["r"] == pytest.approx(naive_r(run, c["pooling"], 8), abs=1e-6)
        assert c["label"] == interpret(c["r"]) if c["q"] < 0.05 else c["label"].startswith("not significant")
    prefs = [r for r in rows if r["metric"] == "pref"]
    cats = run.pairs.pair_categories()
    assert [p["value"] for p in prefs] == pytest.approx([run.pref[cats == c].mean() for c in range(6)])


def category_arrays(run, pooling, layer):
    """Category UA (the notebook's kernel loop) and category mean preferences, mean and summed."""
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    a, b = states(run, pooling, layer, 0), states(run, pooling, layer, 1)
    ua = np.array([notebook.uniformity(a[cats == c]) - notebook.uniformity(b[cats == c]) for c in range(n_cat)])
    nll = run.acts.nll_sum / run.acts.n_scored
    pref = np.array([(nll[1::2] - nll[0::2])[cats == c].mean() for c in range(n_cat)])
    pref_sum = np.array([(run.acts.nll_sum[1::2] - run.acts.nll_sum[0::2])[cats == c].mean() for c in range(n_cat)])
    return ua, pref, pref_sum


def exact_permutation_p(x, y):
    r = np.corrcoef(x, y)[0, 1]
    return np.mean([abs(np.corrcoef(x, y[list(perm)])[0, 1]) >= abs(r) - 1e-12
                    for perm in itertools.permutations(range(len(y)))])


def by_metric(rows, metric, pooling="mean", subset="all"):
    return {r["layer"]: r for r in rows if r["metric"] == metric and r.get("pooling") == pooling
            and r["subset"] == subset}


def test_default_rows_match_scipy_and_an_exact_permutation_loop():
    run = pair_run(seed=2)
    layers = [0, 4, 8]
    summary, rows = analyse_model(run, layers, n_permutations=1000, level=0.9)  # 6! = 720 <= 1000: exact
    r_rows, rho_rows, sum_rows = (by_metric(rows, m) for m in ("r_ua_pref", "rho_ua_pref", "r_ua_pref_sum"))
    z = stats.norm.ppf(0.95)
    for layer in layers:
        ua, pref, pref_sum = category_arrays(run, "mean", layer)
        row = r_rows[layer]
        assert row["p_perm"] == pytest.approx(exact_permutation_p(ua, pref), abs=1e-9)
        r = stats.pearsonr(ua, pref)[0]
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((np.tanh(np.arctanh(r) - z / np.sqrt(3)),
                                                               np.tanh(np.arctanh(r) + z / np.sqrt(3))), abs=1e-6)
        rho, p_rho = stats.spearmanr(ua, pref)
        assert (rho_rows[layer]["value"], rho_rows[layer]["p"]) == pytest.approx((rho, p_rho), abs=1e-6)
        assert sum_rows[layer]["value"] == pytest.approx(stats.pearsonr(ua, pref_sum)[0], abs=1e-6)
        assert sum_rows[layer]["p_perm"] == pytest.approx(exact_permutation_p(ua, pref_sum), abs=1e-9)
    assert summary["pooling_comparison"][0]["p_perm"] == r_rows[8]["p_perm"]


def test_q_is_benjamini_hochberg_over_the_layers_and_decides_significance():
    run = pair_run(seed=5)
    summary, rows = analyse_model(run, run.layers, n_permutations=1000)
    for pooling in ("mean", "last", "first"):
        for metric, p_key in (("r_ua_pref", "p_perm"), ("rho_ua_pref", "p"), ("r_ua_pref_sum", "p_perm")):
            family = by_metric(rows, metric, pooling)
            assert sorted(family) == run.layers
            q = stats.false_discovery_control([family[layer][p_key] for layer in run.layers], method="bh")
            np.testing.assert_allclose([family[layer]["q"] for layer in run.layers], q, rtol=1e-12)
            assert [family[layer]["significant"] for layer in run.layers] == list(q < 0.05)
        r_rows = by_metric(rows, "r_ua_pref", pooling)
        assert summary["significant_layers"][pooling] == [layer for layer in run.layers if r_rows[layer]["q"] < 0.05]


def test_seed_mode_writes_only_the_notebook_numbers():
    run = pair_run()
    summary, rows = analyse_model(run, [0, 4, 8], compat="notebooks")
    assert {r["metric"] for r in rows} == {"pref", "r_ua_pref", "ua"}
    r_rows = [r for r in rows if r["metric"] == "r_ua_pref"]
    assert all({"p_perm", "q", "ci_lo", "significant"}.isdisjoint(r) and r["subset"] == "all" for r in r_rows)
    assert {"length_control", "significant_layers", "without_category"}.isdisjoint(summary)
    assert set(summary["pooling_comparison"][0]) == {"pooling", "layer", "r", "p", "label"}


@pytest.mark.parametrize("compat", [None, "notebooks"])
def test_dropped_category_rows_equal_an_analysis_of_the_dataset_without_it(compat):
    run = pair_run(seed=1)
    layers = [0, 4, 8]
    summary, rows = analyse_model(run, layers, compat=compat, n_permutations=1000, drop_category="c2")
    expected_summary, expected = analyse_model(rebuilt_without(run, "c2"), layers, compat=compat,
                                               n_permutations=1000)
    expected = [r for r in expected if r["subset"] == "all"]  # by default also its own checks' rows
    rebuilt, selected = rebuilt_without(run, "c2"), run.without("c2")
    assert selected.pairs == rebuilt.pairs and selected.acts.texts == rebuilt.acts.texts
    np.testing.assert_array_equal(selected.a("last"), rebuilt.a("last"))
    np.testing.assert_array_equal(selected.pref_sum, rebuilt.pref_sum)
    dropped = [r for r in rows if r["subset"] == "without c2"]
    main = [r for r in rows if r["subset"] == "all"]
    assert len(dropped) == len(expected) and len(main) == len(expected) + 1 + len(layers) * 3  # c2's pref, ua
    for got, want in zip(dropped, expected, strict=False):
        assert {**got, "subset": "all"} == pytest.approx(want, nan_ok=True)
    w = summary["without_category"]
    assert w["category"] == "c2" and w["n_categories"] == 5
    assert w["final_r"] == {c["pooling"]: c["r"] for c in expected_summary["pooling_comparison"]}
    assert w["divergence_points"] == expected_summary["divergence_points"]["mean"]
    if compat is None:  # the leave-one-out check of c2 is that analysis, with no rows of its own beside it
        check = next(c for c in summary["checks"] if c["check"] == "without c2")
        assert check["value"] == expected_summary["pooling_comparison"][0]["r"]
        assert check["label"] == expected_summary["pooling_comparison"][0]["label"]


def test_an_unknown_or_too_large_drop_is_a_config_error_before_any_model_loads(monkeypatch, tmp_path):
    from layerscope.studies.divergence import Divergence
    from layerscope.study import per_model as runner
    from layerscope.study.config import ConfigError, StudyConfig

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match="'nope' is not a category.*choose one of .*numeric_vs_named"):
        Divergence().run(StudyConfig(study="divergence", models=("smollm2-135m",), drop_category="nope"))
    four = {name: {"pairs": [[f"{name} a{i}", f"{name} b{i}"] for i in range(3)]} for name in ("w", "x", "y", "z")}
    (tmp_path / "three.json").write_text(json.dumps(four))
    with pytest.raises(ConfigError, match="leaves 3 categories.*at least 4"):
        Divergence().run(StudyConfig(study="divergence", models=("smollm2-135m",), dataset=str(tmp_path / "three.json"),
                                     drop_category="x"))


def test_length_control_matches_pearsonr_on_hand_built_arrays():
    run = pair_run(sizes=(2, 2, 2))
    n_tokens = np.array([5, 7, 6, 6, 4, 9, 8, 8, 3, 5, 10, 9])  # B - A: 2, 0, 5, 0, 2, -1
    n_scored = n_tokens - 1
    nll_sum = np.array([8.0, 13.0, 10.0, 9.5, 6.0, 17.0, 12.0, 12.5, 5.0, 8.0, 20.0, 16.0])
    summary, _ = analyse_model(synthetic.with_scores(run, nll_sum, n_scored, n_tokens), [0, 8], n_permutations=720)
    len_diff = np.array([2, 0, 5, 0, 2, -1])
    pref = nll_sum[1::2] / n_scored[1::2] - nll_sum[0::2] / n_scored[0::2]
    pref_sum = np.array([5.0, -0.5, 11.0, 0.5, 3.0, -4.0])
    r_mean, p_mean = stats.pearsonr(len_diff, pref)
    r_sum, p_sum = stats.pearsonr(len_diff, pref_sum)
    assert summary["length_control"] == pytest.approx({"mean_len_diff": 8 / 6, "r_len_pref": r_mean,
                                                       "p_len_pref": p_mean, "r_len_pref_sum": r_sum,
                                                       "p_len_pref_sum": p_sum, "n": 6})


def test_small_n_warning_in_the_summary_and_at_the_top_of_the_report(monkeypatch):
    from layerscope.studies.divergence import Divergence
    from layerscope.study import per_model as runner
    from layerscope.study.config import StudyConfig

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    result = Divergence().run(StudyConfig(study="divergence", models=(), drop_category="numeric_vs_named"))
    assert result.summary["warnings"] == [
        "divergence: category-level correlations use n = 7 categories (< 10): r, p and intervals are very unstable; "
        "treat them as descriptive.",
        "divergence without numeric_vs_named: category-level correlations use n = 6 categories (< 10): r, p and "
        "intervals are very unstable; treat them as descriptive."]
    run = pair_run()
    summary, rows = analyse_model(run, [0, 4, 8], n_permutations=1000, drop_category="c0")
    result.summary["models"] = {"synthetic": summary}
    result.table = make_table(rows)
    text = Divergence().report(result)
    head = text.split("## synthetic")[0]
    assert head.count("> **Warning:** divergence") == 2 and "- q: Benjamini-Hochberg" in head
    assert "### Without c0 (5 categories)" in text and "### Length control" in text
    assert set(Divergence().figures(result)) == {"divergence"}
