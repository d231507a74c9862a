"""The causal tests' statistics against hand computations: per-unit preference change and damage, the sign-reversing
and damage parts of a push, the slope through the origin, the one-sided sign-flip p (enumerated by hand), the
smallest detectable effect (its power simulated), and intervals that resample units, not texts."""

import itertools

import numpy as np
import pytest
from scipy import stats

from layerscope.stats import percentile_ci
from layerscope.studies.probe.causal_design import Directions
from layerscope.studies.probe.causal_record import Texts, finish_q, state_records
from layerscope.studies.probe.causal_stats import min_detectable, sign_flip_p, sign_parts, slope, unit_ci, unit_effects


def test_unit_effects_are_the_per_pair_log_odds_change_and_the_mean_cost_by_a_hand_loop():
    # texts: pair 0 (A, B), pair 1 (A, B), then a one-text group of class A and one of class B
    delta = np.array([0.5, -0.25, 1.0, 2.0, -0.75, 0.125])
    is_a = np.array([True, False, True, False, True, False])
    unit = np.array([0, 0, 1, 1, 2, 3])
    pref, damage = unit_effects(delta, is_a, unit)
    # pref = NLL change of B - NLL change of A (a missing class counts 0); damage = the mean over the unit's texts
    np.testing.assert_allclose(pref, [-0.25 - 0.5, 2.0 - 1.0, 0 - (-0.75), 0.125 - 0])
    np.testing.assert_allclose(damage, [(0.5 - 0.25) / 2, 1.5, -0.75, 0.125])
    batch = unit_effects(np.stack([delta, 2 * delta]), is_a, unit)[0]   # leading axes pass through
    np.testing.assert_allclose(batch[1], 2 * pref)


def test_sign_parts_and_the_slope_through_the_origin():
    s, d = sign_parts(np.array([3.0, 1.0]), np.array([-1.0, 1.0]))
    np.testing.assert_allclose(s, [2.0, 0.0])       # (3 - (-1)) / 2, (1 - 1) / 2
    np.testing.assert_allclose(d, [1.0, 1.0])       # (3 + (-1)) / 2, (1 + 1) / 2
    alphas = [0.1, 0.5, 1.0]
    per_alpha = np.array([[0.2, 0.0], [1.0, 1.0], [2.0, -1.0]])          # (A, U)
    expected = [(0.1 * 0.2 + 0.5 * 1 + 2) / 1.26, (0.5 * 1 - 1) / 1.26]  # sum(a s) / sum(a^2), sum(a^2) = 1.26
    np.testing.assert_allclose(slope(alphas, per_alpha), expected)


def test_sign_flip_p_enumerates_every_flip_one_sided():
    x = np.array([1.0, 2.0, 3.0])
    # 8 sign patterns; means >= 2 (the observed): only (+, +, +) -> 1/8
    assert sign_flip_p(x) == pytest.approx(1 / 8)
    x = np.array([0.5, -0.2, 1.0, 0.3])
    means = [np.mean(np.array(s) * x) for s in itertools.product((1, -1), repeat=4)]
    assert sign_flip_p(x) == pytest.approx(np.mean(np.array(means) >= x.mean() - 1e-12))
    assert sign_flip_p(-np.array([1.0, 2.0, 3.0])) == pytest.approx(1.0)   # the other direction is not evidence
    big = np.random.default_rng(0).normal(0.8, 1.0, 30)  # 2^30 flips: random ones, (1 + hits) / (1 + n)
    p = sign_flip_p(big, n_flips=20_000, rng=np.random.default_rng(1))
    assert p == pytest.approx(stats.ttest_1samp(big, 0, alternative="greater").pvalue, abs=0.002)


def test_min_detectable_has_80_percent_power_in_a_simulation():
    rng = np.random.default_rng(3)
    n, sd = 20, 1.5
    mde = min_detectable(rng.normal(0, sd, 2000)[:n] * 0 + rng.normal(0, sd, n))  # an sd estimate from one sample
    found = []
    for _ in range(3000):
        sample = rng.normal(mde, sd, n)
        found.append(stats.ttest_1samp(sample, 0, alternative="greater").pvalue < 0.05)
    sample_sd_ratio = 1.0  # mde used the sample sd; allow for its error
    assert 0.6 < np.mean(found) < 0.95, (mde, np.mean(found), sample_sd_ratio)
    exact = (stats.t.ppf(0.95, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / np.sqrt(n)
    power = np.mean([stats.ttest_1samp(rng.normal(exact, sd, n), 0, alternative="greater").pvalue < 0.05
                     for _ in range(3000)])
    assert power == pytest.approx(0.8, abs=0.04)


def test_unit_ci_resamples_units_as_a_hand_bootstrap_does():
    x = np.array([0.3, -0.1, 0.8, 0.05, 0.4])
    lo, hi = unit_ci(x, 500, 0.9, np.random.default_rng(11))
    idx = np.random.default_rng(11).integers(0, 5, size=(500, 5))
    assert (lo, hi) == pytest.approx(percentile_ci(x[idx].mean(axis=1), 0.9))


def records_for(texts: Texts, deltas: dict, seed: int) -> list[dict]:
    d = 4
    dirs = Directions(u=np.eye(d)[0], w=np.eye(d)[1], nulls=np.eye(d)[2:4], norm=1.0, target_a=1.0, target_b=-1.0,
                      variance_share=0.1, null_variance_share=0.05)
    out = state_records(3, deltas, texts, dirs, {"mass_mean": (0.1, 0.5), "logistic": (0.5,)}, 0.5, 400, 0.95,
                        np.random.default_rng(seed), 2.0)
    finish_q(out)
    return out


def synthetic(n_pairs: int, seed: int):
    rng = np.random.default_rng(seed)
    is_a = np.tile([True, False], n_pairs)
    unit = np.repeat(np.arange(n_pairs), 2)
    keys = [("remove",), ("remove_null", 0), ("remove_null", 1), ("interchange",)]
    keys += [("steer", n, a) for n in ("mass_mean", "logistic") for a in (0.1, -0.1, 0.5, -0.5)]
    keys += [("steer_null", k, a) for k in (0, 1) for a in (0.5, -0.5)]
    deltas = {k: rng.normal(0.2 if k[0] == "remove" else 0.0, 1.0, 2 * n_pairs) for k in keys}
    deltas[("steer", "mass_mean", 0.5)] += np.where(is_a, -2.0, 2.0)   # A likelier when pushed towards A
    return Texts(is_a, unit, rng.normal(3.0, 1.0, 2 * n_pairs)), deltas


def test_every_interval_resamples_pairs_so_duplicating_each_pairs_texts_changes_nothing():
    """Each pair's two texts written twice (same pair): per-pair effects are class means, so a bootstrap over pairs
    gives the same intervals; one over texts would see twice the rows and narrow them."""
    texts, deltas = synthetic(12, 0)
    twice = Texts(np.repeat(texts.is_a.reshape(-1, 2), 2, axis=0).ravel(),
                  np.repeat(texts.unit.reshape(-1, 2), 2, axis=0).ravel(),
                  np.repeat(texts.intact.reshape(-1, 2), 2, axis=0).ravel())
    doubled = {k: np.repeat(v.reshape(-1, 2), 2, axis=0).ravel() for k, v in deltas.items()}
    one, two = records_for(texts, deltas, 5), records_for(twice, doubled, 5)
    assert len(one) == len(two)
    for a, b in zip(one, two, strict=True):
        assert (a["method"], a["metric"], a.get("alpha")) == (b["method"], b["metric"], b.get("alpha"))
        for key in ("value", "ci_lo", "ci_hi", "p", "q"):
            if a.get(key) is None:
                assert b.get(key) is None
            else:
                assert b[key] == pytest.approx(a[key], rel=1e-9, abs=1e-12), (a["method"], a["metric"], key)


def test_removal_is_tested_on_damage_beyond_the_null_and_steering_on_s_at_the_tested_alpha_by_hand():
    texts, deltas = synthetic(10, 1)
    recs = records_for(texts, deltas, 2)

    def one(method, metric, **match):
        (r,) = [r for r in recs if r["method"] == method and r["metric"] == metric
                and all(r.get(k) == v for k, v in match.items())]
        return r

    pair = texts.unit
    ab = lambda v: (v[~texts.is_a], v[texts.is_a])  # noqa: E731 - (B texts, A texts), in pair order
    damage = {k: (v[0::2] + v[1::2]) / 2 for k, v in deltas.items()}
    excess = damage[("remove",)] - (damage[("remove_null", 0)] + damage[("remove_null", 1)]) / 2
    r = one("remove", "damage")
    assert r["value"] == pytest.approx(damage[("remove",)].mean())
    assert r["p"] == pytest.approx(sign_flip_p(excess, rng=np.random.default_rng(0)), abs=0.02)
    assert r["excess"] == pytest.approx(excess.mean())
    pref = {k: ab(v)[0] - ab(v)[1] for k, v in deltas.items()}
    s = (pref[("steer", "mass_mean", 0.5)] - pref[("steer", "mass_mean", -0.5)]) / 2
    s_null = [(pref[("steer_null", k, 0.5)] - pref[("steer_null", k, -0.5)]) / 2 for k in (0, 1)]
    s_null = [x if x.mean() >= 0 else -x for x in s_null]  # each null oriented its favourable way
    r = one("steer", "sign_effect", direction="mass_mean", alpha=0.5)
    assert r["value"] == pytest.approx(s.mean()) and r["value"] > 0.5
    assert r["excess"] == pytest.approx((s - np.mean(s_null, axis=0)).mean())
    assert r["p"] < 0.05 and r["q"] == pytest.approx(r["p"])  # one state: BH leaves p as it is
    assert one("steer", "sign_effect", direction="mass_mean", alpha=0.1)["p"] is None  # only the tested alpha
    d = (pref[("steer", "mass_mean", 0.5)] + pref[("steer", "mass_mean", -0.5)]) / 2
    assert one("steer", "damage", direction="mass_mean", alpha=0.5)["value"] == pytest.approx(d.mean())
    assert one("steer", "wrong_way_share", direction="mass_mean", alpha=0.5)["value"] == pytest.approx(
        np.mean(s < 0))
    assert len(np.unique(pair)) == one("remove", "effect")["n"] == 10


def test_a_check_flips_a_holding_verdict_when_its_rerun_finds_nothing():
    from layerscope.studies.probe.causal_summary import causal_checks

    summary = {"needed_states": [10], "steerable_states": [],
               "steer_best": {"state": 20, "logistic_q": 0.01, "slope": 1.0, "slope_ci": [0.5, 1.5]}}
    reruns = [{"check": "with position 0", "test": "remove", "state": 10, "p": 0.20, "excess": 0.4},
              {"check": "without massive-activation tokens", "test": "remove", "state": 10, "p": 0.01,
               "excess": 0.4},
              {"check": "with position 0", "test": "steer", "state": 20, "p": 0.01, "excess": 0.5}]
    out = {(c["check"], c["test"]): c["flips"] for c in causal_checks(summary, reruns)}
    assert out[("with position 0", "remove")] is True            # holds, the rerun finds nothing: fragile
    assert out[("without massive-activation tokens", "remove")] is False
    assert out[("with position 0", "steer")] is True              # not significant, but the rerun finds it
    assert out[("with the logistic direction", "steer")] is True  # the logistic direction is significant there
    assert out[("dose-response (slope of S over alpha above 0)", "steer")] is False  # nothing holds to flip


def test_null_steering_is_oriented_so_u_must_beat_each_null_at_its_best():
    """A null direction that moves the preference against A (S < 0) counts as if pushed the other way: flipping
    the sign of one null's pushes changes nothing in the test."""
    texts, deltas = synthetic(10, 4)
    flipped = dict(deltas)
    flipped[("steer_null", 1, 0.5)], flipped[("steer_null", 1, -0.5)] = deltas[("steer_null", 1, -0.5)], \
        deltas[("steer_null", 1, 0.5)]
    one, two = records_for(texts, deltas, 3), records_for(texts, flipped, 3)
    pick = lambda recs: next(r for r in recs if r["method"] == "steer" and r["metric"] == "sign_effect"  # noqa: E731
                             and r["direction"] == "mass_mean" and r["alpha"] == 0.5)
    assert pick(one)["excess"] == pytest.approx(pick(two)["excess"]) and pick(one)["p"] == pick(two)["p"]
    ab = lambda v: v[~texts.is_a] - v[texts.is_a]  # noqa: E731 - per pair, B minus A
    s_null = [(ab(deltas[("steer_null", k, 0.5)]) - ab(deltas[("steer_null", k, -0.5)])) / 2 for k in (0, 1)]
    oriented = [x if x.mean() >= 0 else -x for x in s_null]
    s = (ab(deltas[("steer", "mass_mean", 0.5)]) - ab(deltas[("steer", "mass_mean", -0.5)])) / 2
    assert pick(one)["excess"] == pytest.approx((s - np.mean(oriented, axis=0)).mean())
