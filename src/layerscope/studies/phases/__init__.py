"""Phases study (seed 000): pair-level r(centroid asymmetry, preference) per layer with
bootstrap CIs, early/mid/late phase means, pattern label, cross-model comparison."""

from __future__ import annotations

from ...data.reference import load_phase_reference
from ...report.markdown import signed
from ..base import Study
from ..config import StudyConfig
from ..inputs import analyse_pairs
from ..result import StudyResult, make_table
from .analysis import analyse_model
from .figures import figures as draw_figures
from .report import report as write_report


class Phases(Study):
    name = "phases"
    title = "Phases"
    question = ("Pair by pair, does centroid asymmetry track output preference, layer by layer, and does the "
                "relation fall into early/mid/late phases with a late-layer inversion?")

    def run(self, config: StudyConfig) -> StudyResult:
        reference = load_phase_reference(config.reference)  # a bad file fails before any model loads
        summaries, rows, manifest = analyse_pairs(config, lambda run: analyse_model(
            run, run.layers, config.pooling, config.n_bootstrap, config.ci_level, config.seed, config.compat))
        comparison = reference + [
            {"model": model, "source": "this run", **{ph: s["phases"][ph]["mean"] for ph in ("early", "mid", "late")}}
            for model, s in summaries.items()]
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest,
                           summary={"models": summaries, "comparison": comparison}, table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def headline(self, result: StudyResult) -> list[str]:
        return [f"{model}: {s['pattern']} (early {signed(s['phases']['early']['mean'], 2)}, mid "
                f"{signed(s['phases']['mid']['mean'], 2)}, late {signed(s['phases']['late']['mean'], 2)}); "
                f"{s['late_inversion']}" for model, s in result.summary["models"].items()]
