"""Divergence sensitivity checks: the headline verdict (mean pooling, last tested layer) recomputed without
position 0, without the massive-activation tokens, after the final norm and without each category.

    sig = Significance(level=0.95, seed=42, n_permutations=10_000)
    summary, rows, arrays = analyse_subset(run.at_stage("pre_norm"), layers, sig)
    rows += add_checks(summary, run, layers, arrays, sig)
    summary["checks"]       # [check_entry(...)] in the order below
    summary["robustness"]   # "robust to all 9 sensitivity checks" or "not robust: flips without numeric_vs_named, ..."

Rows of a check carry ``subset`` = its name. Token checks: r_ua_pref of mean pooling at every tested layer (with
p_perm, CI and q, the family its verdict needs). "after the final norm": the layer n_layers rows of each pooling,
``stage`` "post_norm", and only when layer n_layers is tested (it changes nothing else). "without CAT": r_ua_pref at
every tested layer and pooling, with p (mean pooling also p_perm, CI and q over the tested layers, again the family
its verdict needs); computed from the category arrays, which equals an analysis of ``run.without(CAT)`` (a
category's UA and mean preference depend on its own pairs only). With ``--drop-category X`` the check without X
reuses that full analysis and writes no rows of its own.
"""

from __future__ import annotations

import numpy as np

from ...engine.forward.pooling import POOLINGS
from ...stats import pearson
from ...study.finite import check_values
from ...study.result import layer_row
from ...study.sensitivity import check_entry, influence, robustness, sign_flips
from ..shared.categories import category_ua
from ..shared.correlation import Significance
from ..shared.inputs import NORM_CHECK, PairRun, check_runs
from ..shared.subsets import subset_name, with_stage
from .summary import Check, DivergenceModel, PoolingVerdict, SignChange, headline_entry
from .verdicts import tested_profile, verdict, verdict_key


def add_checks(summary: DivergenceModel, run: PairRun, layers: list[int],
               arrays: tuple[dict[str, np.ndarray], np.ndarray], sig: Significance, drop_category: str | None = None,
               without: DivergenceModel | None = None) -> list[dict]:
    """Add ``influence``, ``checks`` and ``robustness`` to ``summary`` (of ``run``, at the stage analysed) and
    return the checks' rows. ``arrays``: ``({pooling: UA (n_cat, len(layers))}, pref (n_cat,))`` from
    ``analyse_subset``; ``without``: the summary of the full analysis without ``drop_category``."""
    uas, pref = arrays
    head = headline_entry(summary)
    summary["influence"] = {"pooling": "mean", "layer": head["layer"],
                            **influence(uas["mean"][:, -1], pref, summary["categories"])}
    checks, rows = token_checks(run, layers, pref, head, sig)
    for c, name in enumerate(summary["categories"]):
        if name == drop_category:
            checks.append(entry_of(subset_name(name), headline_entry(without), without["n_categories"],
                                   without["divergence_points"]["mean"], without["sign_flips_within_noise"]["mean"],
                                   head))
            continue
        check, check_rows = category_check(run, layers, uas, pref, c, head, sig)
        checks.append(check)
        rows += check_rows
    summary["checks"], summary["robustness"] = checks, robustness(checks)
    return rows


def token_checks(run: PairRun, layers: list[int], pref: np.ndarray, head: PoolingVerdict, sig: Significance
                 ) -> tuple[list[Check], list[dict]]:
    """The checks of :func:`check_runs` other than the categories: (check entries, rows)."""
    info, final = run.info, run.info.n_layers
    cats, names = run.pairs.pair_categories(), [c.name for c in run.pairs.categories]
    checks, rows = [], []
    for name, check in check_runs(run, "mean", categories=False):
        if name == NORM_CHECK and final not in layers:
            continue  # the final norm changes layer n_layers only, which is not tested
        for pooling in POOLINGS if name == NORM_CHECK else ("mean",):
            ua = category_ua(check.a(pooling), check.b(pooling), cats, len(names), layers)
            check_values("divergence", info.name, f"{name}: category UA ({pooling} pooling)", ua)
            tests = tested_profile(ua, pref, sig)
            if pooling == "mean":
                checks.append(check_of(name, ua, pref, tests, layers, names, head, sig.level, final, check.stage))
            kept = [(layer, test) for layer, test in zip(layers, tests, strict=False)
                    if name != NORM_CHECK or layer == final]
            rows += with_stage([layer_row(info.name, layer, final, "r_ua_pref", pooling=pooling, n=len(names),
                                          subset=name, **test) for layer, test in kept], final, check.stage)
    return checks, rows


def category_check(run: PairRun, layers: list[int], uas: dict[str, np.ndarray], pref: np.ndarray, c: int,
                   head: PoolingVerdict, sig: Significance) -> tuple[Check, list[dict]]:
    """The check without category ``c`` (its index): (check entry, rows at every tested layer and pooling)."""
    info, final = run.info, run.info.n_layers
    names = [cat.name for cat in run.pairs.categories]
    keep = np.arange(len(names)) != c
    others, subset, rows = [n for n, k in zip(names, keep, strict=False) if k], subset_name(names[c]), []
    for pooling in POOLINGS:
        ua = uas[pooling][keep]
        if pooling == "mean":
            tests = tested_profile(ua, pref[keep], sig)
            check = check_of(subset, ua, pref[keep], tests, layers, others, head, sig.level, final, run.stage)
        else:
            tests = [dict(zip(("value", "p"), pearson(column, pref[keep]), strict=False)) for column in ua.T]
        rows += [layer_row(info.name, layer, final, "r_ua_pref", pooling=pooling, n=len(others), subset=subset,
                           **test) for layer, test in zip(layers, tests, strict=False)]
    return check, with_stage(rows, final, run.stage)


def check_of(name: str, ua: np.ndarray, pref: np.ndarray, tests: list[dict], layers: list[int], names: list[str],
             head: PoolingVerdict, level: float, final: int, stage: str) -> Check:
    """The check entry of one changed dataset: its mean-pooling ``ua`` (n, len(layers)), ``pref`` (n,) and
    :func:`tested_profile` ``tests`` against the headline verdict ``head``."""
    v = verdict("mean", layers[-1], tests[-1], ua[:, -1], pref, names, level, stage if layers[-1] == final else None)
    points, noise = sign_flips(layers, ua, pref, level)
    return entry_of(name, v, len(pref), points, noise, head)


def entry_of(name: str, v: PoolingVerdict, n: int, points: list[SignChange], noise: list[SignChange],
             head: PoolingVerdict) -> Check:
    """:func:`check_entry` from a :func:`verdict` entry ``v`` on ``n`` categories and its sign flips; the label
    flips when significance or the sign of r differs from the headline's."""
    return check_entry(name, v["r"], v["label"], verdict_key(v) != verdict_key(head), n=n, layer=v["layer"],
                       p_perm=v["p_perm"], q=v["q"], significant=v["significant"], interval=v["interval"],
                       ci_lo=v["ci_lo"], ci_hi=v["ci_hi"], leverage=v["leverage"],
                       divergence_points=[[p["layer_before"], p["layer_after"]] for p in points],
                       flips_within_noise=len(noise))
