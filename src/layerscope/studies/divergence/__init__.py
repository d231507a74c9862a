"""Divergence study (seed 002): r(UA, output preference) per layer and pooling, and where it
changes sign."""

from __future__ import annotations

from ...report.markdown import signed
from ..base import Study
from ..config import StudyConfig
from ..controls import category_warnings, study_pairs
from ..inputs import analyse_pairs
from ..result import StudyResult, make_table
from .analysis import analyse_model
from .figures import figures as draw_figures
from .report import report as write_report


class Divergence(Study):
    name = "divergence"
    title = "Divergence"
    question = ("Per layer and pooling, does the uniformity asymmetry of paired statements correlate with the "
                "model's output preference, and where does r change sign?")

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = study_pairs(config.dataset, config.drop_category)  # too few categories or a bad drop fail here
        warnings = category_warnings(self.name, pairs, config.drop_category)
        summaries, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_model(
            run, run.layers, config.compat, config.ci_level, config.seed, config.n_permutations, config.drop_category))
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest,
                           summary={"models": summaries, "warnings": warnings}, table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """Final-layer r(UA, preference) per pooling."""
        return {f"final_r_{c['pooling']}": c["r"] for c in result.summary["models"][model]["pooling_comparison"]}

    def headline(self, result: StudyResult) -> list[str]:
        lines = []
        for model, s in result.summary["models"].items():
            final = s["pooling_comparison"][0]
            points = s["divergence_points"]["mean"]
            where = (", ".join(f"L{p['layer_before']}-L{p['layer_after']}" for p in points) if points
                     else f"none ({s['sign_throughout']['mean']} throughout)")
            lines.append(f"{model}: final-layer r(UA, pref) = {signed(final['r'])} with mean pooling "
                         f"({final['label']}); sign changes: {where}")
        return lines

