"""The ablation verdicts of the default (corrected) mode: a bootstrap over texts, a leave-one-language-out
range, the broken-model rule, and labels only where an interval earns them.

    per_config, v = variant_verdicts(scored, names, compat=None, level=0.95, n_resamples=10_000, seed=42)
    per_config = disparity_table(scored, names, BROKEN_PPL_RATIO)   # the same in steps: broken rows marked,
    texts = text_matrix(scored, names)                               # degradation (configs, texts),
    v = earned_verdicts(per_config, texts, level=0.95, n_resamples=10_000, seed=42)   # intervals and labels
    v["h5"]["result"]   # SUPPORTED / NOT_SUPPORTED / INCONCLUSIVE / NOT_APPLICABLE / UNDETERMINED

Every statistic is a function of per-group mean degradations, and every mean is a weighted mean over texts:
the point estimate weighs each text 1, a bootstrap resample by how often it was drawn (texts resampled with
replacement within each language), a leave-one-language-out fit by 0 for the left-out language. So one
matrix product per kind gives every configuration's d_hr and d_lr for every resample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from ...modes import NOTEBOOKS
from ...stats import percentile_ci, resample_indices
from ...study.sensitivity import check_entry, robustness
from .analysis import BROKEN_PPL_RATIO, H5_THRESHOLD, MIN_HR_DEGRADATION, disparity_table, verdicts
from .summary import ConfigRow, H5Verdict, Halves, LanguageCheck, Synergy, Verdicts

MIN_TEXTS = 2
"""Texts per language a bootstrap over texts needs (one text has no spread to resample)."""


def variant_verdicts(scored: pd.DataFrame, names: list[str], compat: str | None, level: float, n_resamples: int,
                     seed: int) -> tuple[list[ConfigRow], Verdicts]:
    """``per_config, verdicts = variant_verdicts(scored, names, config.compat, config.ci_level, config.n_bootstrap,
    config.seed)``: with ``compat == NOTEBOOKS`` the notebook's table and rule (point estimates, no intervals);
    otherwise broken configurations marked and every label earned by its bootstrap interval."""
    if compat == NOTEBOOKS:
        per_config = disparity_table(scored, names)
        return per_config, verdicts(per_config)
    per_config = disparity_table(scored, names, BROKEN_PPL_RATIO)
    return per_config, earned_verdicts(per_config, text_matrix(scored, names), level, n_resamples, seed)


@dataclass(frozen=True)
class TextMatrix:
    """Per-text degradations of one quantization variant.

    ``configs`` (C,) names, ``langs`` (N,) the language of each text (languages in file order),
    ``high`` (N,) bool: a high-resource text, ``degradation`` (C, N).
    """

    configs: list[str]
    langs: np.ndarray
    high: np.ndarray
    degradation: np.ndarray


def text_matrix(scored: pd.DataFrame, configs: list[str]) -> TextMatrix:
    """``text_matrix(scored, names)``: the degradation of every text (rows of ``scored`` from
    ``add_degradation``, one per config, lang and sample) under each of ``configs``, texts in file order."""
    keys = scored.drop_duplicates(["lang", "sample"])[["lang", "sample", "resource"]]
    index = pd.MultiIndex.from_frame(keys[["lang", "sample"]])
    per_config = scored.set_index(["config", "lang", "sample"])["degradation"]
    degradation = np.stack([per_config.loc[name].reindex(index).to_numpy(dtype=np.float64) for name in configs])
    return TextMatrix(list(configs), keys["lang"].to_numpy(), (keys["resource"] == "high").to_numpy(), degradation)


def bootstrap_weights(langs: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, N) how often each text is drawn in each resample: for each language in order of first appearance,
    ``resample_indices(n_l, B, rng)`` picks (B, n_l) of its n_l texts with replacement (stratified)."""
    langs = np.asarray(langs)
    counts = np.zeros((n_resamples, len(langs)))
    for lang in dict.fromkeys(langs.tolist()):
        cols = np.flatnonzero(langs == lang)
        idx = resample_indices(len(cols), n_resamples, rng) + np.arange(n_resamples)[:, None] * len(cols)
        counts[:, cols] = np.bincount(idx.ravel(), minlength=n_resamples * len(cols)).reshape(n_resamples, len(cols))
    return counts


def leave_one_out_weights(langs: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(names (L,), weights (L, N)): row l weighs every text 1 except those of language l (0)."""
    langs = np.asarray(langs)
    names = list(dict.fromkeys(langs.tolist()))
    return names, np.stack([(langs != name).astype(np.float64) for name in names])


def group_means(texts: TextMatrix, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Weighted mean degradations (R, C) per row of ``weights`` (R, N): ``d_hr``, ``d_lr`` and ``mean`` (all
    texts); NaN where a row weighs a group's texts 0."""
    weights = np.asarray(weights, dtype=np.float64)
    out = {}
    for key, mask in (("d_hr", texts.high), ("d_lr", ~texts.high), ("mean", np.ones_like(texts.high))):
        w = weights * mask
        with np.errstate(invalid="ignore", divide="ignore"):
            out[key] = (w @ texts.degradation.T) / w.sum(axis=1, keepdims=True)
    return out


def disparity_ratios(means: dict[str, np.ndarray], broken: np.ndarray) -> np.ndarray:
    """D_LR / D_HR (R, C) from :func:`group_means`; NaN where D_HR <= ``MIN_HR_DEGRADATION`` or the
    configuration is broken (``broken`` (C,) bool)."""
    d_hr, d_lr = means["d_hr"], means["d_lr"]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(d_hr > MIN_HR_DEGRADATION, d_lr / d_hr, np.nan)
    ratio[:, np.asarray(broken, dtype=bool)] = np.nan
    return ratio


def reductions(all_quantized: np.ndarray, gateway: np.ndarray) -> np.ndarray:
    """(ratio_all - ratio_gateway) / ratio_all in percent (R,), NaN where ratio_all is not positive."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(all_quantized > 0, (all_quantized - gateway) / all_quantized * 100, np.nan)


def expanded_level(level: float, n: int) -> float:
    """The percentile level of the expanded percentile interval for a bootstrap over strata of ``n`` texts
    (Hesterberg 2015): ``1 - 2 Phi(-sqrt(n / (n - 1)) t_{n-1}(1 - (1 - level) / 2))``. A percentile interval of
    a mean over n resampled items is too narrow for small n (its spread is that of sqrt((n - 1) / n) times the
    data's, and normal where Student's t holds); 0.95 over 6 texts per language reads the 99.5 % percentile
    interval. ``level`` itself for n < 2."""
    if n < 2:
        return level
    tail = norm.cdf(-np.sqrt(n / (n - 1)) * student_t.ppf(1 - (1 - level) / 2, n - 1))
    return float(1 - 2 * tail)


def interval(samples: np.ndarray, level: float) -> tuple[list[float] | None, int]:
    """(percentile interval of the finite ``samples`` (B,), or None when fewer than ``level`` of them are
    finite; the number that are not)."""
    ok = np.isfinite(samples)
    if ok.sum() < level * len(samples):
        return None, int((~ok).sum())
    return list(percentile_ci(samples[ok], level)), int((~ok).sum())


@dataclass(frozen=True)
class Fits:
    """Statistics (R, C) of three weightings: ``point`` (R = 1), ``boot`` (B resamples), ``lolo`` (one row per
    left-out language, ``left_out`` names them)."""

    configs: list[str]
    point: dict[str, np.ndarray]
    boot: dict[str, np.ndarray]
    lolo: dict[str, np.ndarray]
    left_out: list[str]
    no_interval: str | None = None
    """Why no bootstrap interval can be had (a language with fewer than ``MIN_TEXTS`` texts), else None."""
    fewest: int = 0
    """The fewest texts of any language: the stratum size the intervals are expanded for."""

    def interval(self, samples: np.ndarray, level: float) -> tuple[list[float] | None, int]:
        """:func:`interval` at the :func:`expanded_level` of ``level`` for :attr:`fewest` texts, or (None, 0)
        when ``no_interval`` says why there is none."""
        return (None, 0) if self.no_interval else interval(samples, expanded_level(level, self.fewest))

    def column(self, fit: str, key: str, config: str) -> np.ndarray:
        """(R,) statistic ``key`` (d_hr, d_lr, mean, ratio) of ``config`` in ``fit`` (point, boot, lolo)."""
        return getattr(self, fit)[key][:, self.configs.index(config)]


def fit(texts: TextMatrix, broken: np.ndarray, n_resamples: int, seed: int) -> Fits:
    """Point, bootstrap (``n_resamples`` draws from ``np.random.default_rng(seed)``, see
    :func:`bootstrap_weights`) and leave-one-language-out statistics of every configuration."""
    def stats(weights):
        means = group_means(texts, weights)
        return {**means, "ratio": disparity_ratios(means, broken)}

    left_out, lolo = leave_one_out_weights(texts.langs)
    boot = bootstrap_weights(texts.langs, n_resamples, np.random.default_rng(seed))
    names, counts = np.unique(texts.langs, return_counts=True)
    few = [f"language {lang} has {n} text" for lang, n in zip(names, counts, strict=False) if n < MIN_TEXTS]
    why = f"{few[0]}: a bootstrap over texts needs at least {MIN_TEXTS} per language" if few else None
    return Fits(texts.configs, stats(np.ones((1, len(texts.langs)))), stats(boot), stats(lolo), left_out, why,
                int(counts.min()) if len(counts) else 0)


def earned_verdicts(per_config: list[ConfigRow], texts: TextMatrix, level: float, n_resamples: int, seed: int
                    ) -> Verdicts:
    """H5, the halves and synergy with bootstrap intervals; adds ``d_hr_ci``, ``d_lr_ci`` and
    ``disparity_ci`` to each row of ``per_config`` (rows carry ``broken`` from ``disparity_table``)."""
    by = {r["config"]: r for r in per_config}
    fits = fit(texts, np.array([by[c]["broken"] for c in texts.configs]), n_resamples, seed)
    for row in per_config:
        for key, name in (("d_hr", "d_hr_ci"), ("d_lr", "d_lr_ci"), ("ratio", "disparity_ci")):
            row[name] = fits.interval(fits.column("boot", key, row["config"]), level)[0]
    out: Verdicts = {"h5": h5_verdict(by, fits, level)}
    if "first_half_protected" in by and "second_half_protected" in by:
        out["halves"] = halves_verdict(by, fits, level)
    if all(n in by for n in ("first_protected", "last_protected", "all_quantized", "gateway_protected")):
        out["synergy"] = synergy_verdict(by, fits, level)
    return out


def h5_verdict(by: dict[str, ConfigRow], fits: Fits, level: float) -> H5Verdict:
    """SUPPORTED only when the bootstrap interval of the gateway reduction lies above 30%, NOT_SUPPORTED when
    below, else INCONCLUSIVE; NOT_APPLICABLE when low-resource languages do not degrade more with every layer
    quantized; UNDETERMINED for a broken model or an undefined ratio."""
    allq, gate = by.get("all_quantized"), by.get("gateway_protected")
    if allq is None or gate is None:
        return undetermined(f"no {'all_quantized' if allq is None else 'gateway_protected'} configuration")
    if broken := [r for r in (allq, gate) if r["broken"]]:
        return {**undetermined("model broken, undetermined: " + "; ".join(
            f"{r['config']} multiplies the median text's perplexity by {r['median_ppl_ratio']:.4g}" for r in broken)),
            "broken": [r["config"] for r in broken]}
    r_all = allq["disparity_ratio"]
    if r_all is None:
        return undetermined(allq["disparity_note"])
    if r_all <= 1:
        return {"result": "NOT_APPLICABLE", "all_quantized_ratio": r_all,
                "all_quantized_ratio_ci": allq["disparity_ci"],
                "reason": (f"low-resource languages do not degrade more than high-resource ones with every layer "
                           f"quantized: D_LR / D_HR = {r_all:.2f} <= 1 (D_HR = {allq['d_hr']:.3g}, D_LR = "
                           f"{allq['d_lr']:.3g}), so there is no disparity for the gateway layers to reduce")}
    if gate["disparity_ratio"] is None:
        return undetermined(gate["disparity_note"])
    if fits.no_interval:
        return undetermined(fits.no_interval)
    point = gate["reduction_pct"]
    ci, n_undefined = fits.interval(reductions(fits.column("boot", "ratio", "all_quantized"),
                                          fits.column("boot", "ratio", "gateway_protected")), level)
    if ci is None:
        return undetermined(f"the disparity ratio is undefined in {n_undefined} of {fits.boot['ratio'].shape[0]} "
                            f"resamples (high-resource degradation below {MIN_HR_DEGRADATION})")
    lolo = reductions(fits.column("lolo", "ratio", "all_quantized"), fits.column("lolo", "ratio", "gateway_protected"))
    without = {lang: None if not math.isfinite(x) else float(x) for lang, x in zip(fits.left_out, lolo, strict=False)}
    defined = [x for x in without.values() if x is not None]
    checks = language_checks(without, point)
    result = "SUPPORTED" if ci[0] > H5_THRESHOLD else "NOT_SUPPORTED" if ci[1] < H5_THRESHOLD else "INCONCLUSIVE"
    return {"result": result, "reduction_pct": point, "ci": ci, "level": level, "threshold": H5_THRESHOLD,
            "n_resamples": int(fits.boot["ratio"].shape[0]), "n_undefined": n_undefined,
            "all_quantized_ratio": r_all, "gateway_ratio": gate["disparity_ratio"],
            "without_language": without, "lolo_range": [min(defined), max(defined)] if defined else None,
            "checks": checks, "robustness": robustness(checks), "short_robustness": short_robustness(checks)}


def language_checks(without: dict[str, float | None], point: float) -> list[LanguageCheck]:
    """One sensitivity check per left-out language: the reduction without it, which side of the 30% threshold
    that is, and whether it ``flips`` against the reduction with every language."""
    def where(x: float | None) -> str:
        return "undefined" if x is None else f"{'above' if x > H5_THRESHOLD else 'at or below'} {H5_THRESHOLD:g}%"

    return [check_entry(f"without {lang}", x, where(x), flips=x is not None and where(x) != where(point))
            for lang, x in without.items()]


def short_robustness(checks: list[LanguageCheck]) -> str:
    """``"not robust: flips without sw"``, or ``"robust to leaving out any one of 8 languages"``."""
    flipped = [c["check"] for c in checks if c["flips"]]
    if flipped:
        return "not robust: flips " + ", ".join(flipped)
    return f"robust to leaving out any one of {len(checks)} languages"


def undetermined(reason: str) -> H5Verdict:
    return {"result": "UNDETERMINED", "reason": reason}


def side(ci: list[float] | None) -> str | None:
    """"below" / "above" when the interval ``ci`` lies below / above 0, "not significant" when it holds 0,
    None without an interval."""
    if ci is None:
        return None
    return "below" if ci[1] < 0 else "above" if ci[0] > 0 else "not significant"


def more_critical(ci: list[float] | None) -> str | None:
    """From the interval of (first-half-protected - second-half-protected): "early" when it lies below 0
    (protecting the early layers leaves less), "late" when above, else "not significant" (None without one)."""
    return {"below": "early", "above": "late"}.get(side(ci), side(ci))


def halves_verdict(by: dict[str, ConfigRow], fits: Fits, level: float) -> Halves:
    """Which half matters more, for the disparity and for the degradation, from the bootstrap interval of the
    difference (first-half-protected - second-half-protected) on the same resamples."""
    first, second = by["first_half_protected"], by["second_half_protected"]
    f, s = first["disparity_ratio"], second["disparity_ratio"]
    out = {"first_half_protected_ratio": f, "second_half_protected_ratio": s,
           "disparity_diff": None if None in (f, s) else f - s,
           "first_half_protected_degradation": first["mean_degradation"],
           "second_half_protected_degradation": second["mean_degradation"],
           "degradation_diff": first["mean_degradation"] - second["mean_degradation"], "level": level}
    undefined = "; ".join(f"{r['config']}: {r['disparity_note']}" for r in (first, second)
                          if r["disparity_ratio"] is None)
    both_broken = first.get("broken") and second.get("broken")  # two broken models: nothing to compare
    for what, key, why in (("disparity", "ratio", undefined),
                           ("degradation", "mean", both_broken and "both halves broken")):
        diff = fits.column("boot", key, first["config"]) - fits.column("boot", key, second["config"])
        ci = None if why else fits.interval(diff, level)[0]
        out[f"{what}_diff_ci"], out[f"more_critical_for_{what}"] = ci, more_critical(ci)
        if ci is None:
            out[f"{what}_reason"] = why or fits.no_interval
    return out


def synergy_verdict(by: dict[str, ConfigRow], fits: Fits, level: float) -> Synergy:
    """Gateway ratio against the additive expectation first + last - all, with the bootstrap interval of
    (gateway - expected): "synergistic" only when it lies below 0."""
    names = ("first_protected", "last_protected", "all_quantized", "gateway_protected")
    undefined = [by[n] for n in names if by[n]["disparity_ratio"] is None]
    if undefined:
        return {"synergistic": None, "label": "undetermined",
                "reason": "; ".join(f"{r['config']}: {r['disparity_note']}" for r in undefined)}
    first, last, allq, gate = (by[n]["disparity_ratio"] for n in names)
    boot = {n: fits.column("boot", "ratio", n) for n in names}  # (B,) ratios per resample, by configuration
    expected = boot["first_protected"] + boot["last_protected"] - boot["all_quantized"]
    ci = fits.interval(boot["gateway_protected"] - expected, level)[0]
    where = side(ci)
    reason = {} if ci is not None else {"reason": fits.no_interval or "the disparity ratio is undefined in too many "
                                                                      "resamples"}
    return {**reason, "expected_additive": first + last - allq, "gateway": gate,
            "difference": gate - (first + last - allq),
            "difference_ci": ci, "level": level, "synergistic": {"below": True, "above": False}.get(where),
            "label": {"below": "synergistic", "above": "no synergy (above the additive expectation)",
                      "not significant": "not significant"}.get(where, "undetermined")}
