"""What the pair studies add to each correlation by default: permutation p, Benjamini-Hochberg q,
Spearman rho, small-n warnings and a length control.

    tests = pearson_tests(x, y, n_permutations=10_000, seed=42, level=0.95)   # x: (n, k) -> k dicts
    add_q(tests, "p_perm", level=0.95)       # each gains q (BH over the k) and significant (q < 0.05)
    rows = [layer_row(model, layer, n_layers, "r_ua_pref", **t) for layer, t in zip(layers, tests)]
    small_n_warning("divergence", 7, "categories", "category-level")   # [] from n = 10 on
    small_n_caveat(7, "categories")          # "n = 7 categories < 10", for a console verdict line
    length_control(run)   # pair-level r of the token-length difference with each preference
    pairs = study_pairs(config.dataset, config.drop_category)   # >= 4 categories, also without the dropped one
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..data import PairDataset, load_pairs
from ..data.pairs import CATEGORY_RULE, MIN_CATEGORIES, check_categories
from ..report.markdown import number, signed
from ..stats import bh_qvalues, fisher_z_ci, pearson, permutation_pvalues, spearman
from .config import ConfigError
from .inputs import PairRun, without_category

MIN_N = 10
"""Below this many points a correlation gets a warning."""


def pearson_tests(x, y, n_permutations: int, seed: int, level: float | None = None) -> list[dict]:
    """Per column of ``x`` (n, k): Pearson r with ``y`` (n,) as ``value``, its ``p`` and the permutation
    ``p_perm`` (exact when n! <= n_permutations, else that many orderings seeded from ``seed``); with
    ``level`` also the Fisher-z interval ``ci_lo``, ``ci_hi``."""
    x = np.asarray(x, dtype=np.float64)
    p_perm = permutation_pvalues(x, y, n_permutations, np.random.default_rng(seed))
    tests = []
    for column, pp in zip(x.T, p_perm):
        r, p = pearson(column, y)
        test = {"value": r, "p": p, "p_perm": float(pp)}
        if level is not None:
            test["ci_lo"], test["ci_hi"] = fisher_z_ci(r, len(column), level)
        tests.append(test)
    return tests


def spearman_tests(x, y) -> list[dict]:
    """Per column of ``x`` (n, k): Spearman rho with ``y`` (n,) as ``value`` and its ``p``."""
    return [dict(zip(("value", "p"), spearman(column, y))) for column in np.asarray(x).T]


def add_q(tests: list[dict], key: str, level: float) -> list[dict]:
    """Add ``q``, Benjamini-Hochberg over ``tests`` of ``test[key]``, and ``significant`` = q < 1 - level."""
    for test, q in zip(tests, bh_qvalues([test[key] for test in tests])):
        test["q"] = float(q)
        test["significant"] = bool(q < 1 - level)
    return tests


def in_subset(rows: list[dict], subset: str) -> list[dict]:
    """The rows, each with column ``subset`` set."""
    return [{**row, "subset": subset} for row in rows]


def subset_name(category: str | None) -> str:
    """``"all"``, or ``"without NAME"`` for the analysis without category NAME."""
    return "all" if category is None else f"without {category}"


def with_stage(rows: list[dict], n_layers: int, stage: str) -> list[dict]:
    """The rows, those at layer ``n_layers`` with column ``stage`` set (``"pre_norm"``: the last block's output
    before the final norm; ``"post_norm"``: after it); other rows unchanged."""
    return [{**row, "stage": stage} if row.get("layer") == n_layers else row for row in rows]


def on_subset(table: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """The rows of one ``subset`` (all of them for a table written before the column existed)."""
    return table[table["subset"] == subset] if "subset" in table else table


def small_n_warning(label: str, n: int, unit: str, kind: str) -> list[str]:
    """[the warning] when ``n`` < 10, else []: ``small_n_warning("phases", 8, "pairs", "pair-level")``."""
    if n >= MIN_N:
        return []
    return [f"{label}: {kind} correlations use n = {n} {unit} (< {MIN_N}): r, p and intervals are very unstable; "
            "treat them as descriptive."]


def small_n_caveat(n: int, unit: str) -> str | None:
    """The short caveat a console verdict line carries when :func:`small_n_warning` applies:
    ``small_n_caveat(6, "categories")`` -> ``"n = 6 categories < 10"``; None from n = 10 on."""
    return f"n = {n} {unit} < {MIN_N}" if n < MIN_N else None


def bell_warnings(model: str, l_star: int, n_layers: int) -> list[str]:
    """Warnings for the anisotropy bell test when a segment it fits a line to has fewer than 10 layers."""
    segments = (("before L*", l_star), ("from L* on", n_layers + 1 - l_star))
    return [f"anisotropy, {model}: the bell test fits a line to {n} layers {where} (< {MIN_N}): its slope, r and p "
            "are very unstable; read the profile figure rather than the p-value." for where, n in segments
            if 2 <= n < MIN_N]


def group_warnings(n_high: int, n_low: int) -> list[str]:
    """A warning when the disparity ratio compares fewer than 10 high- or low-resource languages."""
    if min(n_high, n_low) >= MIN_N:
        return []
    return [f"ablation: the disparity ratio compares the mean degradation of {n_high} high- with {n_low} "
            f"low-resource languages (< {MIN_N} each): one language can swing it; treat H5 as descriptive."]


def study_pairs(dataset: str | None, drop_category: str | None = None) -> PairDataset:
    """``pairs = study_pairs(config.dataset, config.drop_category)``: the dataset every pair study (and a suite's
    input check) reads, with at least ``MIN_CATEGORIES`` categories, also once ``drop_category`` is left out.

    ``DatasetError`` for a bad file or too few categories; ``ConfigError`` for an unknown ``drop_category`` or one
    that leaves too few.
    """
    pairs = check_categories(load_pairs(dataset))
    if drop_category is not None:
        kept = len(without_category(pairs, drop_category).categories)
        if kept < MIN_CATEGORIES:
            raise ConfigError(f"--drop-category {drop_category!r} leaves {kept} categories of {pairs.source}; "
                              f"{CATEGORY_RULE}, so drop none or add categories to the dataset")
    return pairs


def category_warnings(study: str, pairs: PairDataset, drop_category: str | None = None) -> list[str]:
    """Small-n warnings for category-level correlations on ``pairs`` and, given ``drop_category``, on the
    pairs without it (``ConfigError`` if that is not a category; check the minimum with :func:`study_pairs`)."""
    warnings = small_n_warning(study, len(pairs.categories), "categories", "category-level")
    if drop_category is not None:
        without = without_category(pairs, drop_category)
        warnings += small_n_warning(f"{study} without {drop_category}", len(without.categories), "categories",
                                    "category-level")
    return warnings


def warning_lines(summary: dict) -> list[str]:
    """Markdown blockquotes for ``summary["warnings"]``, each followed by a blank line."""
    return [line for warning in summary.get("warnings", []) for line in (f"> **Warning:** {warning}", "")]


def legend_lines(config: dict, unit: str, interval: str) -> list[str]:
    """One line on each number a default-mode report shows (none in seed compat): ``unit`` is what r runs
    over ("categories"), ``interval`` how its CI is made ("Fisher-z")."""
    if config.get("compat") == "seed":
        return []
    level, n = config.get("ci_level", 0.95), config.get("n_permutations", 10_000)
    return [f"- r: Pearson's correlation over the {unit}; p: its two-sided t-test p-value.",
            f"- p_perm: two-sided permutation p of r, the share of orderings of the preferences with |r| at least "
            f"as large (all n! of them when n! <= {n:,}, else {n:,} random ones).",
            f"- CI: {interval} {level:.0%} confidence interval of r.",
            "- q: Benjamini-Hochberg over the tested layers of the permutation p (per model, pooling, metric and "
            f"subset); significant: q < {1 - level:.2g}.",
            "- rho: Spearman's rank correlation beside r; its q is Benjamini-Hochberg of its own p.", ""]


def length_control(run: PairRun) -> dict:
    """Pair-level Pearson r of the token-length difference B - A with the mean and the summed preference.

    When every pair has the same length difference, r and p are None (length cannot explain anything: absent by
    design, not a failed computation)."""
    if np.ptp(run.len_diff) == 0:
        r_mean = p_mean = r_sum = p_sum = None
    else:
        r_mean, p_mean = pearson(run.len_diff, run.pref)
        r_sum, p_sum = pearson(run.len_diff, run.pref_sum)
    return {"mean_len_diff": float(np.mean(run.len_diff)), "r_len_pref": r_mean, "p_len_pref": p_mean,
            "r_len_pref_sum": r_sum, "p_len_pref_sum": p_sum, "n": len(run.len_diff)}


def length_paragraph(control: dict, metric: str) -> str:
    """What :func:`length_control` says about the preferences, for a report; ``metric`` names the rows
    that use the summed preference (e.g. ``r_ua_pref_sum``)."""
    r_mean, r_sum = _finite(control["r_len_pref"]), _finite(control["r_len_pref_sum"])
    text = (f"Length control: the token-length difference B - A averages {control['mean_len_diff']:+.2f} tokens "
            f"(n = {control['n']} pairs). It correlates with the per-token preference at "
            f"r = {signed(r_mean)} (p = {number(control['p_len_pref'])}) and with the summed preference "
            f"NLL_sum(B) - NLL_sum(A) at r = {signed(r_sum)} (p = {number(control['p_len_pref_sum'])}). ")
    if r_sum is None:
        return text + "Every pair has the same length difference, so length cannot explain either preference."
    if abs(r_sum) >= 0.5:
        text += (f"The summed preference mostly measures length, so read `{metric}` as a length control, not as "
                 "a second measure of preference.")
    elif abs(r_sum) >= 0.3:
        text += f"Length explains part of the summed preference; compare `{metric}` with the per-token rows."
    else:
        text += "Length explains little of the summed preference."
    if r_mean is not None and abs(r_mean) >= 0.3:
        text += " Even the per-token preference tracks length, so part of its correlations may be a length effect."
    return text


def _finite(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
