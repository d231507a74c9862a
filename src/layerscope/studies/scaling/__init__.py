"""Scaling study (seed 001): r(UA, preference) layer profiles of several models on a depth
axis, and whether the peak moves with size.

    result = Scaling().run(StudyConfig(study="scaling", models=("smollm2-135m", "gemma3-270m")))
    Scaling().headline(result)   # the verdict with its reason, robustness and small-n caveat; the peaks with q
    s: ScalingSummary = result.summary     # what each key holds: .summary
"""

from __future__ import annotations

from dataclasses import dataclass

from ...modes import NOTEBOOKS
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.sensitivity import robustness
from ...study.settings import PAIR_NOTES, POOLING_HELP, PairSettings, check_pooling, setting
from ..shared.categories import study_pairs
from ..shared.caveats import MIN_N, category_warnings
from ..shared.inputs import analyse_pairs
from .analysis import EMBEDDING_LAYER, VERDICT_METRICS, analyse_run, peak_stability, peak_verdict
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .report import report as write_report
from .summary import ScalingModel, ScalingSummary

PEAK_SEARCH = f"the tested layers except the embedding layer (layer {EMBEDDING_LAYER})"
STAGE_NOTE = "the final layer is taken before the final norm; after it, see checks"


@dataclass(frozen=True)
class ScalingSettings(PairSettings):
    pooling: str = setting(POOLING_HELP, default="mean")

    def __post_init__(self):
        super().__post_init__()
        check_pooling(self.pooling)


@register_study
class Scaling(Study):
    name = "scaling"
    title = "Scaling"
    question = "Does the layer profile of r(UA, output preference), and its peak, shift with model size?"
    default_models = ("smollm2-135m", "gemma3-270m")
    Settings = ScalingSettings
    order = 20
    compat_notes = (*PAIR_NOTES[:3], ("no interval for category-level r", "Fisher-z interval for category-level r"))
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        study_pairs(config.dataset)  # too few categories

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "pooling": config.pooling}

    def sweep_summary(self, config: StudyConfig, numbers: list[dict[str, float]]) -> dict | None:
        """Whether the peak depth moves across the swept models: the notebooks' rule in notebooks mode, else
        descriptive only (a sweep's numbers carry no peak significance; each task's report has the verdict)."""
        peaks = [n["peak_depth_pct"] for n in numbers]
        if not peaks:
            return {"peak_stability": None}
        stability = peak_stability(peaks)
        if config.compat != NOTEBOOKS and stability["std_peak_pct"] is not None:
            stability["peaks_stable"] = None
            stability["answer"] = (f"Descriptive only: the {len(peaks)} peak depths have mean "
                                   f"{stability['mean_peak_pct']:.0f}% and standard deviation "
                                   f"{stability['std_peak_pct']:.1f} points; whether a peak is significant, and the "
                                   "STABLE/SHIFTS verdict, are in each task's scaling report.")
        return {"peak_stability": stability, "sections": [["Does the peak move with size?", stability["answer"]]]}

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = study_pairs(config.dataset)  # too few categories fail here, before any model loads
        models, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_run(run, config))
        seed = config.compat == NOTEBOOKS  # the notebooks' rule: population std of the peak depths < 10 points
        stability = peak_stability([m["max_pos_pct"] for m in models.values()]) if seed else peak_verdict(models)
        summary: ScalingSummary = {"pooling": config.pooling, "models": models, "peak_stability": stability,
                                   "warnings": category_warnings(self.name, pairs)}
        if not seed:
            summary.update({"n_categories": len(pairs.categories), "stage": "pre_norm", "peak_search": PEAK_SEARCH})
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The peak r, its depth (% of the layers) and the r of the last tested layer."""
        m: ScalingModel = result.summary["models"][model]
        return {"peak_r": m["max_pos_r"], "peak_depth_pct": m["max_pos_pct"], "final_r": m["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        """The verdict with its reason, robustness and caveats; then each model's peak with its q."""
        s: ScalingSummary = result.summary
        stability = s["peak_stability"]
        if "verdict" not in stability:  # notebooks mode (the notebooks' rule), or a result written before verdicts
            peaks = ", ".join(f"{model} {m['max_pos_pct']:.0f}%" for model, m in s["models"].items())
            return [f"{stability['answer']} Peak depth: {peaks}."]
        notes = [robustness(stability["checks"]), *caveats(s)]
        peaks = "; ".join(f"{model} ({m['family']}): {m['peak']}" + robust_note(m) for model, m in s["models"].items())
        return [f"Peak depth across model sizes: {stability['answer']} [{'; '.join(n for n in notes if n)}]",
                f"Peaks (embedding layer {EMBEDDING_LAYER} excluded; final layer before the final norm): {peaks}."]


def caveats(summary: ScalingSummary) -> list[str]:
    """Short caveats for the console line: few categories, a layer grid coarser than the stability rule."""
    n = summary.get("n_categories")
    out = [f"n = {n} categories < {MIN_N}"] if n is not None and n < MIN_N else []
    return out + summary["peak_stability"].get("caveats", [])


def robust_note(m: ScalingModel) -> str:
    """`` [not robust: flips without X]`` for a model whose peak flips under a check, else ""."""
    note = robustness(m.get("checks", []))
    return f" [{note}]" if note.startswith("not robust") else ""
