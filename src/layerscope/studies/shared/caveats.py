"""Caveats a pair-study result carries: small-n warnings in its summary and report, and the legend of the numbers a
default-mode report shows.

    summary["warnings"] = small_n_warning("divergence", 7, "categories", "category-level")   # [] from n = 10 on
    summary["warnings"] = category_warnings("divergence", pairs, "numeric_vs_named")   # also without that category
    small_n_caveat(7, "categories")          # "n = 7 categories < 10", for a console verdict line
    lines = [*warning_lines(result.summary), *legend_lines(result.config, "categories", "Fisher-z")]
"""

from __future__ import annotations

from ...data import PairDataset
from ...modes import NOTEBOOKS
from ...report.markdown import md_text
from .inputs import without_category

MIN_N = 10
"""Below this many points a correlation gets a warning."""


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


def prequantized_warnings(models: list[dict], bits: int) -> list[str]:
    """A warning per manifest model entry whose weights already lie on a quantization grid (``prequantized``, e.g.
    a Q4_1 GGUF): fake-quantizing them again measures a second rounding relative to that model, not what
    quantizing the full-precision checkpoint would cost."""
    return [f"ablation, {m['name']}: its weights already lie on a {m['prequantized']} grid ({m.get('exact')}); "
            f"fake-quantizing them again to {bits} bits rounds a quantized model a second time, so each number is "
            f"the cost relative to that {m['prequantized']} model, not what quantizing the full-precision "
            "checkpoint would cost; compare layers with each other, not with published quantization results."
            for m in models if m.get("prequantized")]


def category_warnings(study: str, pairs: PairDataset, drop_category: str | None = None) -> list[str]:
    """Small-n warnings for category-level correlations on ``pairs`` and, given ``drop_category``, on the
    pairs without it (``ConfigError`` if that is not a category; check the minimum with
    :func:`~layerscope.studies.shared.categories.study_pairs`)."""
    warnings = small_n_warning(study, len(pairs.categories), "categories", "category-level")
    if drop_category is not None:
        without = without_category(pairs, drop_category)
        warnings += small_n_warning(f"{study} without {drop_category}", len(without.categories), "categories",
                                    "category-level")
    return warnings


def warning_lines(summary: dict) -> list[str]:
    """Markdown blockquotes for ``summary["warnings"]``, each followed by a blank line; a warning naming a
    category, language or model is text there (:func:`md_text`), never markup."""
    return [line for warning in summary.get("warnings", []) for line in (f"> **Warning:** {md_text(warning)}", "")]


def legend_lines(config: dict, unit: str, interval: str) -> list[str]:
    """One line on each number a default-mode report shows (none in notebooks mode): ``unit`` is what r runs
    over ("categories"), ``interval`` how its CI is made ("Fisher-z")."""
    if config.get("compat") == NOTEBOOKS:
        return []
    level, n = config.get("ci_level", 0.95), config.get("n_permutations", 10_000)
    return [f"- r: Pearson's correlation over the {unit}; p: its two-sided t-test p-value.",
            f"- p_perm: two-sided permutation p of r, the share of orderings of the preferences with |r| at least "
            f"as large (all n! of them when n! <= {n:,}, else {n:,} random ones).",
            f"- CI: {interval} {level:.0%} confidence interval of r.",
            "- q: Benjamini-Hochberg over the tested layers of the permutation p (per model, pooling, metric and "
            f"subset); significant: q < {1 - level:.2g}.",
            "- rho: Spearman's rank correlation beside r; its q is Benjamini-Hochberg of its own p.", ""]
