"""Phases study (seed 000): pair-level r(centroid asymmetry, preference) per layer with bootstrap CIs,
early/mid/late phase means with bootstrap intervals over pairs, the pattern they support, the late-layer verdict,
sensitivity checks and a cross-model comparison that says which rows were computed the same way.

    result = Phases().run(StudyConfig(study="phases", drop_category="numeric_vs_named"))
    s: PhasesModel = result.summary["models"]["smollm2-135m"]     # what each key holds: .summary
    Phases().headline(result)   # per model: the pattern with the phase intervals, the late-layer verdict, robustness
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...data import PairDataset
from ...data.reference import THIS_RUN, load_phase_reference, mark_comparable
from ...errors import short
from ...modes import NOTEBOOKS
from ...report.markdown import signed
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import (
    PAIR_NOTES,
    POOLING_HELP,
    ConfigError,
    PairSettings,
    by_compat,
    check_n_bootstrap,
    check_pooling,
    setting,
)
from ..shared.categories import study_pairs
from ..shared.caveats import MIN_N, small_n_warning
from ..shared.inputs import analyse_pairs, without_category
from .analysis import VERDICT_METRICS, analyse_run
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .report import report as write_report
from .summary import ComparisonRow, PhaseMean, PhasesCheck, PhasesModel, PhasesSummary, PhaseValues

PHASES = ("early", "mid", "late")
NAMED = ("PYTHIA_PATTERN", "LATE_INVERSION", "DECOUPLED")
"""The default mode's pattern labels; any other verdict is printed as its text (the reason)."""


@dataclass(frozen=True)
class PhasesSettings(PairSettings):
    pooling: str = setting(POOLING_HELP, default="mean")
    n_bootstrap: int = setting("Bootstrap resamples for confidence intervals.", default=10_000)
    reference: str | None = setting("CSV of reference phase means (model,early,mid,late); default: the published "
                                    "figures the phases notebook quotes.", file=True)
    centroids: str | None = setting("'loo' (each pair is compared with centroids of the other pairs) or 'self' (the "
                                    "notebooks' centroids, which include the pair itself). The report shows both. "
                                    "Default: loo (notebooks mode: self).")
    drop_category: str | None = setting("Also analyse the pairs without this category, beside the full results "
                                        "(e.g. numeric_vs_named, which can flip a 6-point r).")

    def __post_init__(self):
        super().__post_init__()
        check_pooling(self.pooling)
        check_n_bootstrap(self.n_bootstrap)
        if self.centroids not in (None, "loo", "self"):
            raise ConfigError(f"unknown centroids {short(self.centroids)}; use loo or self")

    @by_compat
    def centroid_mode(self, compat: str | None) -> str:
        return self.centroids or ("self" if compat == NOTEBOOKS else "loo")


@register_study
class Phases(Study):
    name = "phases"
    title = "Phases"
    question = ("Pair by pair, does centroid asymmetry track output preference, layer by layer, and does the "
                "relation fall into early/mid/late phases with a late-layer inversion?")
    Settings = PhasesSettings
    order = 30
    compat_notes = (*PAIR_NOTES,
                    ("percentile bootstrap, fresh resamples per layer from np.random.seed",
                     "BCa bootstrap (scipy.stats.bootstrap) seeded from a numpy Generator"),
                    ("significant when the bootstrap interval excludes 0", "significant when q < 1 - CI level"),
                    ("each pair's centroid includes the pair itself",
                     "leave-one-out centroids (the report compares both)"))
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        study_pairs(config.dataset, config.drop_category)  # too few categories, or a bad --drop-category
        load_phase_reference(config.reference)

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "pooling": config.pooling}

    def run(self, config: StudyConfig) -> StudyResult:
        reference = load_phase_reference(config.reference)  # a bad file fails before any model loads
        pairs = study_pairs(config.dataset, config.drop_category)  # too few categories fail here
        warnings = pair_warnings(pairs, config.drop_category)  # and so does a bad --drop-category
        summaries, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_run(run, config))
        summary: PhasesSummary = {"models": summaries, "comparison": comparison(reference, summaries, pairs,
                                                                                 config.compat),
                                  "warnings": warnings}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest, summary=summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The early, mid and late phase means of r, and the last tested layer's r."""
        s: PhasesModel = result.summary["models"][model]
        return {**{phase: s["phases"][phase]["mean"] for phase in PHASES}, "final_r": s["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        """Per model: the pattern (or why there is none) with the phase means and their intervals, the late-layer
        verdict naming its layer, robustness and the small-n caveat; notebooks mode: the notebook's labels."""
        seed = result.config.get("compat") == NOTEBOOKS
        summary: PhasesSummary = result.summary
        return [headline_line(model, s, seed) for model, s in summary["models"].items()]


def headline_line(model: str, s: PhasesModel, seed: bool = False) -> str:
    """One model's console line (see :meth:`Phases.headline`)."""
    if "late_label" not in s:  # notebooks mode, or a result written before the interval rule
        rule = " [the notebook's rule]" if seed else ""
        return (f"{model}: {s['pattern']} (early {signed(s['phases']['early']['mean'], 2)}, mid "
                f"{signed(s['phases']['mid']['mean'], 2)}, late {signed(s['phases']['late']['mean'], 2)}); "
                f"{s['late_inversion']}{rule}")
    means = ", ".join(f"{phase} {phase_text(s['phases'][phase])}" for phase in PHASES)
    verdict = s["pattern"] if s["pattern"] in NAMED else s["pattern_text"]
    stage = ", before the final norm" if s.get("final_stage") == "pre_norm" else ""
    notes = [note for note in (short_robustness(s.get("checks", [])),
                               f"n = {s['n_pairs']} pairs < {MIN_N}" if s["n_pairs"] < MIN_N else "") if note]
    return (f"{model}: {verdict} (phase means, {s['ci_level']:.0%} CI: {means}); last tested layer "
            f"({s['final_layer']}{stage}): {s['late_inversion']}" + (f" [{'; '.join(notes)}]" if notes else ""))


def phase_text(p: PhaseMean) -> str:
    """``"+0.44 [+0.30, +0.55]"``: a phase mean and its interval (the mean alone where it has none)."""
    if p.get("ci_lo") is None or p.get("ci_hi") is None:
        return signed(p["mean"], 2)
    return f"{signed(p['mean'], 2)} [{signed(p['ci_lo'], 2)}, {signed(p['ci_hi'], 2)}]"


def short_robustness(checks: list[PhasesCheck]) -> str:
    """``"not robust: flips without c3"``, or ``"robust to all 9 sensitivity checks"``; "" without checks."""
    flipped = [c["check"] for c in checks if c["flips"]]
    if flipped:
        return "not robust: flips " + ", ".join(flipped)
    return f"robust to all {len(checks)} sensitivity checks" if checks else ""


def comparison(reference: list[dict], summaries: dict[str, PhasesModel], pairs: PairDataset,
               compat: str | None = None) -> list[ComparisonRow]:
    """The reference rows and one row per model of this run. By default every row carries how it was computed
    (``data``, ``layers``, ``token_rule``) and its ``comparability`` with this run's first model; notebooks mode:
    model, source and the three means, as the notebook prints them."""
    def means(s: PhasesModel) -> PhaseValues:
        return {phase: s["phases"][phase]["mean"] for phase in PHASES}

    if compat == NOTEBOOKS:
        return [{key: row[key] for key in ("model", "source", *PHASES)} for row in reference] + [
            {"model": model, "source": THIS_RUN, **means(s)} for model, s in summaries.items()]
    data = f"{Path(pairs.source).name} ({pairs.n_pairs} pairs, sha256 {pairs.hash[:12]})"
    return mark_comparable(reference + [{"model": model, "source": THIS_RUN, **means(s), "data": data,
                                         "layers": layers_text(s), "token_rule": token_rule(s["pooling"])}
                                        for model, s in summaries.items()])


def layers_text(s: PhasesModel) -> str:
    """``"0-30 of 30 (30 before the final norm)"``: the tested layers, runs of consecutive ones as ranges."""
    runs: list[list[int]] = []
    for layer in s["layers"]:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    text = ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) + f" of {s['n_layers']}"
    if s.get("stage") == "pre_norm" and s["n_layers"] in s["layers"]:
        text += f" ({s['n_layers']} before the final norm)"
    return text


def token_rule(pooling: str) -> str:
    """How a text's vector is made in the default mode: ``"mean over the tokens, a BOS token dropped by its id"``."""
    return {"mean": "mean over the tokens, a BOS token dropped by its id", "last": "last token",
            "first": "first token"}.get(pooling, f"{pooling} pooling")


def pair_warnings(pairs: PairDataset, drop_category: str | None = None) -> list[str]:
    """Small-n warnings for the pair-level correlations, on all pairs and without ``drop_category``
    (``ConfigError`` if that is not a category or no pairs remain)."""
    warnings = small_n_warning("phases", pairs.n_pairs, "pairs", "pair-level")
    if drop_category is not None:
        without = without_category(pairs, drop_category)
        warnings += small_n_warning(f"phases without {drop_category}", without.n_pairs, "pairs", "pair-level")
    return warnings
