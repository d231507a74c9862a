"""Phases study (seed 000): pair-level r(centroid asymmetry, preference) per layer with
bootstrap CIs, early/mid/late phase means, pattern label, cross-model comparison."""

from __future__ import annotations

from ...data import PairDataset
from ...data.reference import load_phase_reference
from ...report.markdown import signed
from ..base import Study
from ..config import StudyConfig
from ..controls import small_n_warning, study_pairs
from ..inputs import analyse_pairs, without_category
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
        pairs = study_pairs(config.dataset, config.drop_category)  # too few categories fail here
        warnings = pair_warnings(pairs, config.drop_category)  # and so does a bad --drop-category
        summaries, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_model(
            run, run.layers, config.pooling, config.n_bootstrap, config.ci_level, config.seed, config.compat,
            config.centroid_mode, config.n_permutations, config.drop_category))
        comparison = reference + [
            {"model": model, "source": "this run", **{ph: s["phases"][ph]["mean"] for ph in ("early", "mid", "late")}}
            for model, s in summaries.items()]
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest,
                           summary={"models": summaries, "comparison": comparison, "warnings": warnings},
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The early, mid and late phase means of r, and the final-layer r."""
        s = result.summary["models"][model]
        return {**{phase: s["phases"][phase]["mean"] for phase in ("early", "mid", "late")}, "final_r": s["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        return [f"{model}: {s['pattern']} (early {signed(s['phases']['early']['mean'], 2)}, mid "
                f"{signed(s['phases']['mid']['mean'], 2)}, late {signed(s['phases']['late']['mean'], 2)}); "
                f"{s['late_inversion']}" for model, s in result.summary["models"].items()]


def pair_warnings(pairs: PairDataset, drop_category: str | None = None) -> list[str]:
    """Small-n warnings for the pair-level correlations, on all pairs and without ``drop_category``
    (``ConfigError`` if that is not a category or no pairs remain)."""
    warnings = small_n_warning("phases", pairs.n_pairs, "pairs", "pair-level")
    if drop_category is not None:
        without = without_category(pairs, drop_category)
        warnings += small_n_warning(f"phases without {drop_category}", without.n_pairs, "pairs", "pair-level")
    return warnings
