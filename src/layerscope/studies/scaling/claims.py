"""The scaling study's rows of a run's summary table: whether the peak depth of r(UA, output preference) is stable
across model sizes (one row for the run), and each model's peak with its interval and q.

    claims(result)   # [Verdict("scaling", "a, b", "peak depth across model sizes: STABLE", ...), peak rows...]
"""

from __future__ import annotations

from ...modes import NOTEBOOKS
from ...study.result import StudyResult
from ...study.validated import with_card
from ...study.verdicts import NOT_ASSESSABLE, Verdict, flipped, key_text, seed_claim, status_of
from .summary import PeakVerdict, ScalingModel, ScalingSummary, SeedStability

STABILITY = "peak depth across model sizes"
LABELS = ("STABLE", "SHIFTS")


def claims(result: StudyResult) -> list[Verdict]:
    """The stability verdict, then one peak per model; notebooks mode (or a result written before the tests): every
    row "not assessable", the notebook's answer kept in the claim."""
    summary: ScalingSummary = result.summary
    seed = result.config.get("compat") == NOTEBOOKS
    stability = summary["peak_stability"]
    models = ", ".join(summary["models"])
    if seed or "verdict" not in stability:
        out = [seed_stability(result.study, models, stability, seed)]
        return out + [Verdict(result.study, model, seed_claim("peak of r(UA, pref)", peak_where(m), seed),
                              NOT_ASSESSABLE, key_text("r", m.get("max_pos_r")))
                      for model, m in summary["models"].items()]
    return [stability_claim(result.study, models, stability, summary["models"])] + [
        peak_claim(result.study, model, m) for model, m in summary["models"].items()]


def stability_claim(study: str, models: str, v: PeakVerdict, peaks: dict[str, ScalingModel]) -> Verdict:
    """STABLE or SHIFTS holds (robust unless a check changes the verdict); not assessable without enough peaks."""
    flips = flipped(v.get("checks"))
    significant = sum(bool(m.get("max_pos_significant")) for m in peaks.values())
    key = f"{significant} of {len(peaks)} peaks significant"
    if v["verdict"] not in LABELS:
        return Verdict(study, models, f"{STABILITY}: STABLE or SHIFTS", NOT_ASSESSABLE, key)
    if v.get("range_peak_pct") is not None:
        key += f"; range = {v['range_peak_pct']:.1f} points of depth"
    return Verdict(study, models, f"{STABILITY}: {v['verdict']}", status_of(True, flips), key, flips)


CARD_PEAK = "peak of r(UA, pref) (positive and significant)"
"""A model's peak verdict's name on the validation card (its rate under shuffled preferences)."""


def peak_claim(study: str, model: str, m: ScalingModel) -> Verdict:
    """A peak counts when its r is positive with q < 1 - level; fragile when a check moves it or its significance."""
    key = key_text("r", m.get("max_pos_r"), m.get("max_pos_ci"), q=m.get("max_pos_q"))
    if "max_pos_significant" not in m:
        return Verdict(study, model, seed_claim("peak of r(UA, pref)", peak_where(m), False), NOT_ASSESSABLE, key)
    flips = flipped(m.get("checks"))
    significant = None if m.get("max_pos_r") is None else bool(m["max_pos_significant"])
    key = with_card(key, f"{study}: {CARD_PEAK}", model)
    return Verdict(study, model, f"peak of r(UA, pref) at {peak_where(m)}", status_of(significant, flips), key,
                   flips if significant is not None else ())


def peak_where(m: ScalingModel) -> str:
    """``"layer 12 (40% depth)"``."""
    return f"layer {m['max_pos_layer']} ({m['max_pos_pct']:.0f}% depth)"


def seed_stability(study: str, models: str, s: SeedStability | PeakVerdict, seed: bool) -> Verdict:
    """The notebooks' rule: population std of the peak depths < 10 points, no test behind it."""
    label = {True: "STABLE", False: "SHIFTS"}.get(s.get("peaks_stable"), "no verdict")
    std = s.get("std_peak_pct")
    key = f"sd = {std:.1f} points of depth" if std is not None else ""
    return Verdict(study, models, seed_claim(STABILITY, label, seed), NOT_ASSESSABLE, key)
