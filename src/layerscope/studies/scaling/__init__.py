"""Scaling study (seed 001): r(UA, preference) layer profiles of several models on a depth
axis, and whether the peak moves with size.

    result = Scaling().run(StudyConfig(study="scaling", models=("smollm2-135m", "gemma3-270m")))
    Scaling().headline(result)   # the verdict with its reason, robustness and small-n caveat; the peaks with q
"""

from __future__ import annotations

from ..base import Study
from ..config import StudyConfig
from ..controls import MIN_N, category_warnings, study_pairs
from ..inputs import analyse_pairs
from ..result import StudyResult, make_table
from ..sensitivity import robustness
from .analysis import EMBEDDING_LAYER, analyse_model, peak_stability, peak_verdict
from .figures import figures as draw_figures
from .report import report as write_report

PEAK_SEARCH = f"the tested layers except the embedding layer (layer {EMBEDDING_LAYER})"
STAGE_NOTE = "the final layer is taken before the final norm; after it, see checks"


class Scaling(Study):
    name = "scaling"
    title = "Scaling"
    question = "Does the layer profile of r(UA, output preference), and its peak, shift with model size?"
    default_models = ("smollm2-135m", "gemma3-270m")

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = study_pairs(config.dataset)  # too few categories fail here, before any model loads
        models, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_model(
            run, run.layers, config.pooling, config.compat, config.ci_level, config.seed, config.n_permutations))
        seed = config.compat == "seed"  # the notebooks' rule: population std of the peak depths < 10 points
        summary = {"pooling": config.pooling, "models": models,
                   "peak_stability": peak_stability([m["max_pos_pct"] for m in models.values()]) if seed
                   else peak_verdict(models), "warnings": category_warnings(self.name, pairs)}
        if not seed:
            summary.update({"n_categories": len(pairs.categories), "stage": "pre_norm", "peak_search": PEAK_SEARCH})
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The peak r, its depth (% of the layers) and the r of the last tested layer."""
        m = result.summary["models"][model]
        return {"peak_r": m["max_pos_r"], "peak_depth_pct": m["max_pos_pct"], "final_r": m["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        """The verdict with its reason, robustness and caveats; then each model's peak with its q."""
        s = result.summary
        stability = s["peak_stability"]
        if "verdict" not in stability:  # seed compat (the notebooks' rule), or a result written before verdicts
            peaks = ", ".join(f"{model} {m['max_pos_pct']:.0f}%" for model, m in s["models"].items())
            return [f"{stability['answer']} Peak depth: {peaks}."]
        notes = [robustness(stability["checks"]), *caveats(s)]
        peaks = "; ".join(f"{model} ({m['family']}): {m['peak']}" + robust_note(m) for model, m in s["models"].items())
        return [f"Peak depth across model sizes: {stability['answer']} [{'; '.join(n for n in notes if n)}]",
                f"Peaks (embedding layer {EMBEDDING_LAYER} excluded; final layer before the final norm): {peaks}."]


def caveats(summary: dict) -> list[str]:
    """Short caveats for the console line: few categories, a layer grid coarser than the stability rule."""
    n = summary.get("n_categories")
    out = [f"n = {n} categories < {MIN_N}"] if n is not None and n < MIN_N else []
    return out + summary["peak_stability"].get("caveats", [])


def robust_note(m: dict) -> str:
    """`` [not robust: flips without X]`` for a model whose peak flips under a check, else ""."""
    note = robustness(m.get("checks", []))
    return f" [{note}]" if note.startswith("not robust") else ""
