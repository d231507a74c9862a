"""One state's causal numbers for one contrast, as table records, from the passes' per-text NLL changes.

    recs = state_records(s, deltas, texts, d, {"mass_mean": alphas}, test_alpha, 1000, 0.95, rng, r_s)  # [{...}]
    recs += drop_records(s, drops)                                 # the removal's probe accuracy drop downstream
    finish_q(records)                                              # BH q over the states, per test

Every record is a table row without the model's columns: ``state``, ``method`` (remove, remove_null,
interchange, steer, steer_null, skip), ``metric`` (effect, damage, sign_effect, slope, wrong_way_share, nie,
min_detectable, probe_drop), ``direction`` (mass_mean, logistic), ``alpha`` (in units of r_s; signed on an
``effect`` row of a push), ``value``, ``ci_lo``, ``ci_hi``, ``p``, ``n`` (units), ``at_state`` (probe drops).
For a null, ``value`` is the null directions' mean and the interval their central band; a null direction's
``sign_effect`` is oriented the way it moves the preference (its sign is arbitrary). The tests (one-sided, paired
over units, effect less the null's mean on the same unit, sign-flip p): removal on ``damage``, steering on
``sign_effect`` at the tested alpha; ``min_detectable`` beside each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...stats import bh_qvalues
from .causal_design import Directions
from .causal_stats import band, min_detectable, ratio_ci, sign_flip_p, sign_parts, slope, unit_ci, unit_effects

LEVEL = 0.05
TESTS = (("remove", "damage"), ("steer", "sign_effect"))
"""(method, metric) of the tested rows: q is BH over the states tested, per contrast, test and direction."""


@dataclass(frozen=True)
class Texts:
    """One contrast's held-out texts: class A or not, unit 0..U-1, the intact preference's per-text NLL."""

    is_a: np.ndarray
    unit: np.ndarray
    intact: np.ndarray


def rec(state, method, metric, value, ci=(None, None), p=None, n=None, **extra) -> dict:
    return {"state": state, "method": method, "metric": metric, "value": value, "ci_lo": ci[0], "ci_hi": ci[1],
            "p": p, "n": n, **extra}


def state_records(s: int, deltas: dict, texts: Texts, d: Directions, steer: dict, test_alpha: float,
                  n_bootstrap: int, level: float, rng: np.random.Generator, r_s: float) -> list:
    """``deltas`` {edit key: (n,) NLL change per text}, the keys :func:`.causal_run.measure_state` makes; ``steer``
    {direction: its alphas} (a slope where there are two or more)."""
    def eff(key):
        return unit_effects(deltas[key], texts.is_a, texts.unit)

    def ci(x):
        return unit_ci(x, n_bootstrap, level, rng)

    out = []
    n_null = len(d.nulls)
    pref, damage = eff(("remove",))
    nulls = [eff(("remove_null", k)) for k in range(n_null)]
    null_pref, null_damage = np.array([p for p, _ in nulls]), np.array([x for _, x in nulls])
    n = len(pref)
    excess = damage - null_damage.mean(axis=0)
    out += [rec(s, "remove", "effect", pref.mean(), ci(pref), n=n),
            rec(s, "remove", "damage", damage.mean(), ci(damage), p=sign_flip_p(excess, rng=rng), n=n,
                excess=float(excess.mean())),
            rec(s, "remove", "min_detectable", min_detectable(excess, LEVEL), n=n),
            rec(s, "remove_null", "effect", null_pref.mean(), band(null_pref.mean(axis=1), level), n=n),
            rec(s, "remove_null", "damage", null_damage.mean(), band(null_damage.mean(axis=1), level), n=n)]
    if ("interchange",) in deltas:
        pref_i, damage_i = eff(("interchange",))
        base = unit_effects(texts.intact, texts.is_a, texts.unit)[0]  # the intact preference per unit
        closed, gap = -np.sign(base) * pref_i, 2 * np.abs(base)
        out += [rec(s, "interchange", "effect", pref_i.mean(), ci(pref_i), n=n),
                rec(s, "interchange", "damage", damage_i.mean(), ci(damage_i), n=n),
                rec(s, "interchange", "nie", closed.mean() / gap.mean() if gap.mean() > 0 else None,
                    ratio_ci(closed, gap, n_bootstrap, level, rng), n=n)]
    null_s, null_d = [], []
    for k in range(n_null):
        s_k, d_k = sign_parts(eff(("steer_null", k, test_alpha))[0], eff(("steer_null", k, -test_alpha))[0])
        null_s.append(s_k)
        null_d.append(d_k)
    # a null direction's sign is arbitrary (a mean with random signs), so S of its negation is -S: each is
    # oriented the way it moves the preference (over the pairs), and u must beat them at their best
    null_s = np.array(null_s) * np.where(np.array(null_s).mean(axis=1) < 0, -1.0, 1.0)[:, None]
    null_d = np.array(null_d)
    out += [rec(s, "steer_null", "sign_effect", null_s.mean(), band(null_s.mean(axis=1), level), n=n,
                alpha=test_alpha),
            rec(s, "steer_null", "damage", null_d.mean(), band(null_d.mean(axis=1), level), n=n, alpha=test_alpha)]
    for name, alphas in steer.items():
        grid = []
        for alpha in alphas:
            e_plus, e_minus = eff(("steer", name, alpha))[0], eff(("steer", name, -alpha))[0]
            s_part, d_part = sign_parts(e_plus, e_minus)
            grid.append(s_part)
            common = {"direction": name, "alpha": alpha, "n": n}
            tested = np.isclose(alpha, test_alpha)
            x = s_part - null_s.mean(axis=0)
            out += [rec(s, "steer", "effect", e_plus.mean(), ci(e_plus), **common),
                    rec(s, "steer", "effect", e_minus.mean(), ci(e_minus), **{**common, "alpha": -alpha}),
                    rec(s, "steer", "sign_effect", s_part.mean(), ci(s_part),
                        p=sign_flip_p(x, rng=rng) if tested else None,
                        **common, **({"excess": float(x.mean())} if tested else {})),
                    rec(s, "steer", "damage", d_part.mean(), ci(d_part), **common),
                    rec(s, "steer", "wrong_way_share", float(np.mean(s_part < 0)), **common)]
            if tested:
                out.append(rec(s, "steer", "min_detectable", min_detectable(x, LEVEL), **common))
        if len(alphas) > 1:
            b = slope(alphas, np.stack(grid))
            out.append(rec(s, "steer", "slope", b.mean(), ci(b), direction=name, n=n))
    out += [rec(s, "direction", "norm_ratio", d.norm / r_s if r_s > 0 else None, direction="mass_mean"),
            rec(s, "direction", "variance_share", d.variance_share, direction="mass_mean",
                null=d.null_variance_share)]
    return out


def skip_records(s: int, delta: np.ndarray, texts: Texts, n_bootstrap: int, level: float, rng) -> list:
    """Block s - 1 skipped: the preference change and the damage on the same held-out texts."""
    pref, damage = unit_effects(delta, texts.is_a, texts.unit)
    return [rec(s, "skip", "effect", pref.mean(), unit_ci(pref, n_bootstrap, level, rng), n=len(pref), block=s - 1),
            rec(s, "skip", "damage", damage.mean(), unit_ci(damage, n_bootstrap, level, rng), n=len(pref),
                block=s - 1)]


def finish_q(records: list[dict]) -> None:
    """BH q over the states of each test (method, metric, direction) among ``records`` (one contrast's), in place."""
    for method, metric in TESTS:
        for direction in {r.get("direction") for r in records}:
            rows = [r for r in records if r["method"] == method and r["metric"] == metric and r["p"] is not None
                    and r.get("direction") == direction]
            if rows:
                for r, q in zip(rows, bh_qvalues(np.array([r["p"] for r in rows], dtype=float)), strict=True):
                    r["q"] = float(q)


def tested(records: list[dict], method: str, direction: str | None = None) -> list[dict]:
    """The tested rows of one test, in state order."""
    metric = dict(TESTS)[method]
    return sorted((r for r in records if r["method"] == method and r["metric"] == metric and r.get("q") is not None
                   and (direction is None or r.get("direction") == direction)), key=lambda r: r["state"])
