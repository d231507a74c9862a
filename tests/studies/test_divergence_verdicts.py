"""Divergence verdicts on runs built so that every category's UA and preference are known exactly: a label only
where its test is significant, leverage, sign flips within noise vs divergence points, the pooling comparison, the
sensitivity checks, tested layers only, and the `first` pooling when A and B share their first token."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from layerscope.data.pairs import Category, PairDataset
from layerscope.engine.forward.activations import Activations, ExtractSettings
from layerscope.models.info import ModelInfo
from layerscope.studies.divergence import Divergence
from layerscope.studies.divergence.analysis import analyse_model, interpret, pooling_effect
from layerscope.studies.shared.inputs import PairRun
from layerscope.study.result import StudyResult, make_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hand_flips import hand_p_fwer  # noqa: E402

E1, E2 = np.eye(4)[0], np.eye(4)[1]


def category_vectors(u: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Two A vectors with cosine ``u`` and two orthogonal B vectors: a category whose UA is exactly ``u``
    (uniformity of two vectors is their cosine)."""
    return [E1, u * E1 + math.sqrt(1 - u * u) * E2], [E1, E2]


def hand_run(ua, pref, names=None, post=None, last=None, no_pos0=None, no_massive=None, shared_first=False):
    """A run of len(pref) categories of 2 pairs whose mean-pooling UA is ``ua`` (n_cat, n_layers + 1; the last
    column before the final norm) and whose per-pair preference NLL(B) - NLL(A) is ``pref[c]`` in category c.

    ``post`` (n_cat,): UA after the final norm (default: as before it); ``last``, ``no_pos0``, ``no_massive``
    (n_cat, n_layers + 1): UA of those poolings (default: ``ua``); ``shared_first``: the A and B texts of every
    pair have identical first-token states."""
    ua, pref = np.asarray(ua, dtype=np.float64), np.asarray(pref, dtype=np.float64)
    n_cat, n_layers = ua.shape[0], ua.shape[1] - 1
    names = names or [f"c{c}" for c in range(n_cat)]
    post = ua[:, -1] if post is None else np.asarray(post)

    def arrays(target, final):
        """(2 n_pairs, n_layers + 1, 4) states with UA ``target`` and, for the pre-norm slot, (2 n_pairs, 4)."""
        states = np.zeros((4 * n_cat, n_layers + 1, 4))
        pre = np.zeros((4 * n_cat, 4))
        for c in range(n_cat):
            for layer in range(n_layers + 1):
                u = final[c] if layer == n_layers else target[c, layer]
                a, b = category_vectors(u)
                states[4 * c:4 * c + 4, layer] = [a[0], b[0], a[1], b[1]]
            a, b = category_vectors(target[c, -1])
            pre[4 * c:4 * c + 4] = [a[0], b[0], a[1], b[1]]
        return states.astype(np.float32), pre.astype(np.float32)

    sources = {"mean": ua, "last": ua if last is None else np.asarray(last), "first": ua,
               "mean_no_pos0": ua if no_pos0 is None else np.asarray(no_pos0),
               "mean_no_massive": ua if no_massive is None else np.asarray(no_massive)}
    pooled, pre_norm = {}, {}
    for pooling, target in sources.items():
        final = post if pooling == "mean" else target[:, -1]
        pooled[pooling], pre_norm[pooling] = arrays(target, final)
    if shared_first:
        pooled["first"][1::2], pre_norm["first"][1::2] = pooled["first"][0::2], pre_norm["first"][0::2]
    categories = tuple(Category(name=name, pairs=((f"a {name} 0", f"b {name} 0"), (f"a {name} 1", f"b {name} 1")))
                       for name in names)
    pairs = PairDataset(categories=categories, source="hand")
    nll_sum = np.ones(4 * n_cat)
    nll_sum[1::2] += np.repeat(pref, 2)  # B of each pair: NLL(A) + pref
    info = ModelInfo(name="hand", source="hand", revision=None, architecture="Hand", n_layers=n_layers, hidden_size=4,
                     vocab_size=10, bos_token_id=None, adds_bos=False, last_hidden_normed=True, weights_hash="0" * 64,
                     dtype="float32", device="cpu")
    acts = Activations(texts=pairs.texts(), pooled=pooled, nll_sum=nll_sum, n_scored=np.ones(4 * n_cat, dtype=int),
                       n_tokens=np.full(4 * n_cat, 2), settings=ExtractSettings(), model=info, fingerprint="h" * 64,
                       pre_norm=pre_norm)
    return PairRun(acts=acts, pairs=pairs, layers=list(range(n_layers + 1)))


def exact_permutation_p(x, y):
    r = np.corrcoef(x, y)[0, 1]
    return np.mean([abs(np.corrcoef(x, np.asarray(y)[list(perm)])[0, 1]) >= abs(r) - 1e-12
                    for perm in itertools.permutations(range(len(y)))])


def williams_p(r_xy, r_zy, r_xz, n):
    """Steiger (1980) eq. 7, the textbook formula: two-sided p of Williams' t for rho(x, y) = rho(z, y)."""
    det = 1 - r_xy**2 - r_zy**2 - r_xz**2 + 2 * r_xy * r_zy * r_xz
    rbar = (r_xy + r_zy) / 2
    t = (r_xy - r_zy) * math.sqrt((n - 1) * (1 + r_xz) / (2 * (n - 1) / (n - 3) * det + rbar**2 * (1 - r_xz) ** 3))
    return 2 * stats.t.sf(abs(t), n - 3)


def headline(summary):
    result = StudyResult(study="divergence", config={}, manifest={}, summary={"models": {"hand": summary}},
                         table=make_table([{}]))
    return Divergence().headline(result)[0]


def report(summary, rows):
    result = StudyResult(study="divergence", config={"ci_level": 0.95, "n_permutations": 1000}, manifest={},
                         summary={"models": {"hand": summary}, "warnings": []}, table=make_table(rows))
    return Divergence().report(result)


LEVERAGE_UA = np.array([0.1, -0.2, 0.15, -0.1, 0.05, 0.9])
LEVERAGE_PREF = np.array([0.3, 0.1, -0.2, 0.2, -0.1, 5.0])
LEVERAGE_NAMES = ["a", "b", "c", "d", "e", "numeric"]


def test_one_category_with_leverage_earns_no_label_and_its_interval_is_the_leave_one_out_range():
    """r = +0.93 (ALIGNED by the notebook's thresholds) comes from one category far out on both axes: most orderings
    that keep it with the largest preference reach that |r| (exact permutation p 0.126), so the label is not earned,
    and the Fisher-z interval is not valid."""
    ua = np.repeat(LEVERAGE_UA[:, None], 3, axis=1)  # the same at layers 0, 1, 2
    summary, rows = analyse_model(hand_run(ua, LEVERAGE_PREF, LEVERAGE_NAMES), [0, 1, 2], n_permutations=1000)
    head = summary["pooling_comparison"][0]
    r = np.corrcoef(LEVERAGE_UA, LEVERAGE_PREF)[0, 1]
    assert interpret(r) == "ALIGNED (strong positive)"  # what the notebook would print
    seen = [row["value"] for row in rows if row["metric"] == "ua" and row["pooling"] == "mean" and row["layer"] == 2
            and row["subset"] == "all"]
    np.testing.assert_allclose(seen, LEVERAGE_UA, atol=1e-6)  # float32 states; the values have tied orderings,
    p_perm = exact_permutation_p(seen, LEVERAGE_PREF)          # so the loop runs on the UA the analysis saw
    assert p_perm > 0.05
    assert head["r"] == pytest.approx(r, abs=1e-6) and head["p_perm"] == pytest.approx(p_perm, abs=1e-9)
    assert head["q"] == pytest.approx(p_perm, abs=1e-9)  # BH over three equal p
    assert head["significant"] is False and "ALIGNED" not in head["label"]
    assert head["label"] == f"not significant (n = 6, p_perm = {p_perm:.3f}, q = {p_perm:.3f})"
    loo = [np.corrcoef(np.delete(LEVERAGE_UA, i), np.delete(LEVERAGE_PREF, i))[0, 1] for i in range(6)]
    assert head["leverage"] == ["numeric"] and summary["influence"]["flagged"] == ["numeric"]
    assert head["interval"] == "leave-one-out range"
    assert (head["ci_lo"], head["ci_hi"]) == pytest.approx((min(loo), max(loo)), abs=1e-6)
    z = stats.norm.ppf(0.975) / math.sqrt(3)
    assert head["fisher_z"] == pytest.approx([math.tanh(math.atanh(r) - z), math.tanh(math.atanh(r) + z)], abs=1e-6)
    without = np.corrcoef(LEVERAGE_UA[:5], LEVERAGE_PREF[:5])[0, 1]
    assert summary["influence"]["loo_r"]["numeric"] == pytest.approx(without, abs=1e-6)
    # leave-one-category-out r at every tested layer and pooling, with its t-test p
    for name, i in zip(LEVERAGE_NAMES, range(6), strict=False):
        mine = [row for row in rows if row["subset"] == f"without {name}" and row["metric"] == "r_ua_pref"]
        assert sorted((row["layer"], row["pooling"]) for row in mine) == sorted(
            itertools.product([0, 1, 2], ["mean", "last", "first"]))
        r_i, p_i = stats.pearsonr(np.delete(LEVERAGE_UA, i), np.delete(LEVERAGE_PREF, i))
        assert all(row["value"] == pytest.approx(r_i, abs=1e-6) and row["p"] == pytest.approx(p_i, abs=1e-5)
                   and row["n"] == 5 for row in mine)
    check = next(c for c in summary["checks"] if c["check"] == "without numeric")
    assert check["value"] == pytest.approx(without, abs=1e-6) and without < 0 < r
    assert check["flips"] is False  # the sign of r flips, but neither is significant: the verdict stays
    assert summary["robustness"].startswith("robust to all ")
    line = headline(summary)
    assert line.startswith("hand: last tested layer 2 (pre-norm): r(UA, pref) = +0.927, not significant (n = 6, ")
    assert line.endswith(" sensitivity checks; n = 6 categories < 10")
    text = report(summary, rows)
    assert "not valid (leverage: numeric)" in text and "### Leave-one-category-out r (mean pooling)" in text


def test_a_sign_change_within_noise_is_not_a_divergence_point():
    pref = np.array([0.4, -0.3, 0.2, -0.5, 0.1, 0.3])
    x0 = np.array([0.2, 0.1, -0.1, -0.2, 0.3, -0.1])
    x1 = np.array([-0.1, 0.2, 0.1, -0.1, 0.3, -0.2])
    r0, r1, r01 = np.corrcoef(x0, pref)[0, 1], np.corrcoef(x1, pref)[0, 1], np.corrcoef(x0, x1)[0, 1]
    assert r0 > 0 > r1  # the notebook lists this as a sign change
    summary, rows = analyse_model(hand_run(np.stack([x0, x1, x1], axis=1), pref), [0, 1, 2], n_permutations=1000)
    assert summary["divergence_points"]["mean"] == []
    [flip] = summary["sign_flips_within_noise"]["mean"]
    p = williams_p(r1, r0, r01, 6)
    assert p > 0.05
    assert (flip["layer_before"], flip["layer_after"]) == (0, 1) and flip["p"] == pytest.approx(p, rel=1e-6)
    p_fwer = hand_p_fwer(np.stack([x0, x1, x1], axis=1), pref, flip["t"])  # 6! = 720 <= 1000: every ordering
    assert flip["p_fwer"] == pytest.approx(p_fwer) and p_fwer > 0.05
    assert "divergence points: none (1 sign flip within noise)" in headline(summary)
    assert f"sign flips within noise: L0 (+{r0:.3f}) to L1 ({r1:+.3f}), p_fwer = {p_fwer:.3f}" in report(summary, rows)


def strong_profile(n_cat=40, seed=0):
    """Preferences and a UA that tracks them closely (r about +0.99) over ``n_cat`` categories."""
    rng = np.random.default_rng(seed)
    pref = rng.normal(size=n_cat)
    ua = 0.8 * pref / np.abs(pref).max() + rng.normal(scale=0.02, size=n_cat)
    return pref, ua


def test_a_clear_sign_change_over_many_categories_is_a_divergence_point_and_earns_its_label():
    pref, ua = strong_profile()
    flipped = -ua + np.random.default_rng(1).normal(scale=0.02, size=40)
    summary, _ = analyse_model(hand_run(np.stack([ua, flipped, flipped], axis=1), pref), [0, 1, 2],
                                  n_permutations=200)
    r0, r1, r01 = np.corrcoef(ua, pref)[0, 1], np.corrcoef(flipped, pref)[0, 1], np.corrcoef(ua, flipped)[0, 1]
    [point] = summary["divergence_points"]["mean"]
    assert (point["layer_before"], point["layer_after"]) == (0, 1)
    p = williams_p(r1, r0, r01, 40)
    assert p < 1e-6 and point["p"] == pytest.approx(p, rel=1e-4)
    assert point["p_fwer"] == pytest.approx(1 / 201)  # no permutation of the preferences reverses r this far
    assert summary["sign_flips_within_noise"]["mean"] == []
    head = summary["pooling_comparison"][0]
    assert head["p_perm"] == pytest.approx(1 / 201) and head["significant"] is True  # no ordering reaches |r|
    assert head["label"] == "INVERSE (strong negative)"
    line = headline(summary)
    assert line.startswith(f"hand: last tested layer 2 (pre-norm): r(UA, pref) = {r1:+.3f}, INVERSE (strong "
                           "negative) (q = ")
    assert "divergence points: L0-L1 (p_fwer = " in line and "categories < 10" not in line


def test_a_pooling_difference_within_noise_is_no_more_or_less_claim():
    pref = LEVERAGE_PREF[:5].tolist() + [-0.3]
    mean = np.array([0.3, 0.1, -0.1, 0.2, -0.2, 0.1])
    last = np.array([0.1, 0.3, -0.1, -0.1, 0.0, 0.2])
    r_mean, r_last, r_xz = (np.corrcoef(*pair)[0, 1] for pair in ((mean, pref), (last, pref), (mean, last)))
    assert pooling_effect(r_mean, r_last).startswith("Last-token embeddings correlate")  # the notebook's 0.2 rule
    run = hand_run(np.repeat(mean[:, None], 2, axis=1), pref, last=np.repeat(last[:, None], 2, axis=1))
    summary, _ = analyse_model(run, [0, 1], n_permutations=1000)
    p = williams_p(r_last, r_mean, r_xz, 6)
    assert p > 0.05 and summary["pooling_test"]["p"] == pytest.approx(p, rel=1e-6)
    assert summary["pooling_test"]["r_xz"] == pytest.approx(r_xz, abs=1e-6)
    text = summary["pooling_effect"]
    assert text.startswith(f"No difference between poolings can be claimed at layer 1 (r {r_last:+.3f} last vs "
                           f"{r_mean:+.3f} mean, Williams p = {p:.3f}).")
    assert "MORE" not in text and "LESS" not in text


def test_a_clear_pooling_difference_over_many_categories_is_claimed():
    pref, ua = strong_profile()
    noise = np.random.default_rng(9).uniform(-0.5, 0.5, size=40)
    run = hand_run(np.repeat(ua[:, None], 2, axis=1), pref, last=np.repeat(noise[:, None], 2, axis=1))
    summary, _ = analyse_model(run, [0, 1], n_permutations=200)
    r_mean, r_last, r_xz = (np.corrcoef(*pair)[0, 1] for pair in ((ua, pref), (noise, pref), (ua, noise)))
    p = williams_p(r_last, r_mean, r_xz, 40)
    assert p < 1e-6 and summary["pooling_test"]["p"] == pytest.approx(p, rel=1e-6)
    assert summary["pooling_effect"].startswith("Last-token embeddings correlate LESS with output than mean-pooled "
                                                "at layer 1")


def layer_values(obj):
    """Every value under a key named layer, layer_before or layer_after, anywhere in a nested summary."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("layer", "layer_before", "layer_after", "headline_layer"):
                yield value
            yield from layer_values(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from layer_values(value)


def test_untested_layers_never_appear():
    """Layers 0 and 1 of a 4-layer model: nothing about layer 4 (nor its final norm) in rows or summary."""
    rng = np.random.default_rng(4)
    ua, pref = rng.uniform(-0.5, 0.5, size=(6, 5)), rng.normal(size=6)
    run = hand_run(ua, pref, post=rng.uniform(-0.5, 0.5, size=6))
    run.layers = [0, 1]
    summary, rows = analyse_model(run, [0, 1], n_permutations=1000)
    assert {row["layer"] for row in rows if "layer" in row} == {0, 1}
    assert all("stage" not in row for row in rows)
    assert set(layer_values(summary)) == {0, 1}
    assert summary["pooling_comparison"][0]["r"] == pytest.approx(np.corrcoef(ua[:, 1], pref)[0, 1], abs=1e-6)
    assert "after the final norm" not in [c["check"] for c in summary["checks"]]
    assert headline(summary).startswith("hand: last tested layer 1: r(UA, pref) = ")
    seed_summary, _ = analyse_model(run, [0, 1], compat="notebooks")
    assert seed_summary["pooling_comparison"][0]["layer"] == 4  # the notebook's final layer, as it was


def test_first_pooling_is_not_applicable_when_a_and_b_share_their_first_token():
    rng = np.random.default_rng(5)
    ua, pref = rng.uniform(-0.5, 0.5, size=(6, 3)), rng.normal(size=6)
    summary, rows = analyse_model(hand_run(ua, pref, shared_first=True), [0, 1, 2], n_permutations=1000)
    first = summary["pooling_comparison"][2]
    assert first["pooling"] == "first" and first["label"] == "n/a: A and B share their first token"
    assert first["r"] is None
    assert summary["not_applicable"] == {"first": "every pair's A and B statements share their first token, so in a "
                                                  "causal model their first-token states are identical and UA is 0 "
                                                  "by construction"}
    assert all(row["value"] == 0 for row in rows if row["metric"] == "ua" and row["pooling"] == "first")
    assert "- **first**: n/a: every pair's A and B statements share their first token" in report(summary, rows)
    other, _ = analyse_model(hand_run(ua, pref), [0, 1, 2], n_permutations=1000)
    assert other["not_applicable"] == {} and not other["pooling_comparison"][2]["label"].startswith("n/a")


def test_each_sensitivity_check_recomputes_the_verdict_and_a_flip_makes_it_not_robust():
    """A significant r at the last layer (10 categories) that reverses without position 0 and vanishes after the
    final norm; the massive-token view and every category left out keep it."""
    pref, ua = strong_profile(n_cat=10, seed=1)
    profile = np.repeat(ua[:, None], 3, axis=1)
    after = np.random.default_rng(2).uniform(-0.5, 0.5, size=10)
    run = hand_run(profile, pref, post=after, no_pos0=-profile)
    summary, rows = analyse_model(run, [0, 1, 2], n_permutations=1000)
    checks = {c["check"]: c for c in summary["checks"]}
    assert list(checks) == ["without position 0", "without massive-activation tokens", "after the final norm",
                            *(f"without c{c}" for c in range(10))]
    expected = {"without position 0": np.corrcoef(-ua, pref)[0, 1],
                "without massive-activation tokens": np.corrcoef(ua, pref)[0, 1],
                "after the final norm": np.corrcoef(after, pref)[0, 1],
                **{f"without c{c}": np.corrcoef(np.delete(ua, c), np.delete(pref, c))[0, 1] for c in range(10)}}
    for name, r in expected.items():
        assert checks[name]["value"] == pytest.approx(r, abs=1e-6)
    assert summary["pooling_comparison"][0]["significant"] and checks["without position 0"]["significant"]
    assert [name for name, c in checks.items() if c["flips"]] == ["without position 0", "after the final norm"]
    assert summary["robustness"] == "not robust: flips without position 0, after the final norm"
    assert headline(summary).endswith("; not robust: flips without position 0, after the final norm")
    post = [row for row in rows if row["subset"] == "after the final norm"]
    assert sorted((row["layer"], row["pooling"], row["stage"]) for row in post) == [
        (2, p, "post_norm") for p in ("first", "last", "mean")]
    assert next(row for row in post if row["pooling"] == "mean")["value"] == pytest.approx(expected["after the final "
                                                                                                   "norm"], abs=1e-6)
    pos0 = [row for row in rows if row["subset"] == "without position 0"]
    assert sorted((row["layer"], row["pooling"]) for row in pos0) == [(0, "mean"), (1, "mean"), (2, "mean")]
    text = report(summary, rows)
    assert text.index("### Verdict") < text.index("### Sensitivity checks") < text.index("### Length control") \
        < text.index("### Pooling comparison")
    assert "| without position 0 | " in text and "| yes |" in text
