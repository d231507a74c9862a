"""Divergence study (seed 002): r(UA, output preference) per layer and pooling, and where it
changes sign.

    result = Divergence().run(StudyConfig(study="divergence", drop_category="numeric_vs_named"))
    s: DivergenceModel = result.summary["models"]["smollm2-135m"]     # what each key holds: .summary
    Divergence().headline(result)   # per model: the mean-pooling verdict, divergence points, robustness, caveat
"""

from __future__ import annotations

from dataclasses import dataclass

from ...report.markdown import number, signed
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.sensitivity import flip_p_text
from ...study.settings import PAIR_NOTES, PairSettings, setting
from ..shared.categories import study_pairs
from ..shared.caveats import category_warnings, small_n_caveat
from ..shared.inputs import analyse_pairs
from .analysis import VERDICT_METRICS, analyse_run
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .report import report as write_report
from .summary import DivergenceModel, DivergenceSummary, by_pooling, headline_entry


@dataclass(frozen=True)
class DivergenceSettings(PairSettings):
    drop_category: str | None = setting("Also analyse the pairs without this category, beside the full results "
                                        "(e.g. numeric_vs_named, which can flip a 6-point r).")


@register_study
class Divergence(Study):
    name = "divergence"
    title = "Divergence"
    question = ("Per layer and pooling, does the uniformity asymmetry of paired statements correlate with the "
                "model's output preference, and where does r change sign?")
    Settings = DivergenceSettings
    order = 10
    compat_notes = (*PAIR_NOTES, ("no interval for category-level r", "Fisher-z interval for category-level r"))
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        study_pairs(config.dataset, config.drop_category)  # too few categories, or a bad --drop-category

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "pooling": "mean"}

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = study_pairs(config.dataset, config.drop_category)  # too few categories or a bad drop fail here
        warnings = category_warnings(self.name, pairs, config.drop_category)
        summaries, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_run(run, config))
        summary: DivergenceSummary = {"models": summaries, "warnings": warnings}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """r(UA, preference) per pooling at the headline layer (the last tested one; notebooks mode: the final one)."""
        s: DivergenceModel = result.summary["models"][model]
        return {f"final_r_{c['pooling']}": c["r"] for c in s["pooling_comparison"]}

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model: the mean-pooling verdict at the last tested layer, the divergence points, the
        robustness to the sensitivity checks and the small-n caveat (notebooks mode: the notebook's line)."""
        summary: DivergenceSummary = result.summary
        return [headline_line(model, s) if "checks" in s else seed_line(model, s)
                for model, s in summary["models"].items()]


def headline_line(model: str, s: DivergenceModel) -> str:
    """``smollm2-135m: last tested layer 30 (pre-norm): r(UA, pref) = +0.669, not significant (...); divergence
    points: none (2 sign flips within noise); not robust: flips without numeric_vs_named; n = 6 categories < 10``."""
    head = headline_entry(s)
    stage = " (pre-norm)" if head.get("stage") == "pre_norm" else ""
    label = head["label"] + (f" (q = {number(head['q'])})" if head["significant"] else "")
    parts = [f"{model}: last tested layer {head['layer']}{stage}: r(UA, pref) = {signed(head['r'])}, {label}",
             f"divergence points: {points_text(s, 'mean')}", s["robustness"],
             small_n_caveat(s["n_categories"], "categories")]
    return "; ".join(part for part in parts if part)


def points_text(s: DivergenceModel, pooling: str) -> str:
    """``"L11-L12 (p_fwer = 0.01)"``, ``"none (2 sign flips within noise)"`` or ``"none (positive throughout)"``."""
    points, noise = s["divergence_points"][pooling], s["sign_flips_within_noise"][pooling]
    if points:
        return ", ".join(f"L{p['layer_before']}-L{p['layer_after']} ({flip_p_text(p)})" for p in points)
    if noise:
        return f"none ({len(noise)} sign flip{'s' if len(noise) > 1 else ''} within noise)"
    return f"none ({s['sign_throughout'][pooling]} throughout)"


def seed_line(model: str, s: DivergenceModel) -> str:
    """The notebook's verdict line, its label marked as the notebook's rule."""
    final = by_pooling(s, "mean")
    points = s["divergence_points"]["mean"]
    where = (", ".join(f"L{p['layer_before']}-L{p['layer_after']}" for p in points) if points
             else f"none ({s['sign_throughout']['mean']} throughout)")
    return (f"{model}: final-layer r(UA, pref) = {signed(final['r'])} with mean pooling ({final['label']}, the "
            f"notebook's rule); sign changes: {where}")
