"""Scaling study (seed 001): r(UA, preference) layer profiles of several models on a depth
axis, and whether the peak moves with size."""

from __future__ import annotations

from ..base import Study
from ..config import StudyConfig
from ..controls import category_warnings, study_pairs
from ..inputs import analyse_pairs
from ..result import StudyResult, make_table
from .analysis import analyse_model, peak_stability
from .figures import figures as draw_figures
from .report import report as write_report


class Scaling(Study):
    name = "scaling"
    title = "Scaling"
    question = "Does the layer profile of r(UA, output preference), and its peak, shift with model size?"
    default_models = ("smollm2-135m", "gemma3-270m")

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = study_pairs(config.dataset)  # too few categories fail here, before any model loads
        models, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_model(
            run, run.layers, config.pooling, config.compat, config.ci_level, config.seed, config.n_permutations))
        summary = {"pooling": config.pooling, "models": models,
                   "peak_stability": peak_stability([m["max_pos_pct"] for m in models.values()]),
                   "warnings": category_warnings(self.name, pairs)}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The peak r, its depth (% of the layers) and the final-layer r."""
        m = result.summary["models"][model]
        return {"peak_r": m["max_pos_r"], "peak_depth_pct": m["max_pos_pct"], "final_r": m["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        peaks = ", ".join(f"{model} {m['max_pos_pct']:.0f}%" for model, m in result.summary["models"].items())
        return [f"{result.summary['peak_stability']['answer']} Peak depth: {peaks}."]
