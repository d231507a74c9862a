"""Phases study (seed 000): pair-level r(centroid asymmetry, preference) per layer with bootstrap CIs,
early/mid/late phase means with bootstrap intervals over pairs, the pattern they support, the late-layer verdict,
sensitivity checks and a cross-model comparison that says which rows were computed the same way."""

from __future__ import annotations

from pathlib import Path

from ...data import PairDataset
from ...data.reference import THIS_RUN, load_phase_reference, mark_comparable
from ...report.markdown import signed
from ..base import Study
from ..config import StudyConfig
from ..controls import MIN_N, small_n_warning, study_pairs
from ..inputs import analyse_pairs, without_category
from ..result import StudyResult, make_table
from .analysis import analyse_model
from .figures import figures as draw_figures
from .report import report as write_report

PHASES = ("early", "mid", "late")
NAMED = ("PYTHIA_PATTERN", "LATE_INVERSION", "DECOUPLED")
"""The default mode's pattern labels; any other verdict is printed as its text (the reason)."""


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
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest,
                           summary={"models": summaries, "comparison": comparison(reference, summaries, pairs,
                                                                                  config.compat),
                                    "warnings": warnings},
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """The early, mid and late phase means of r, and the last tested layer's r."""
        s = result.summary["models"][model]
        return {**{phase: s["phases"][phase]["mean"] for phase in PHASES}, "final_r": s["final_r"]}

    def headline(self, result: StudyResult) -> list[str]:
        """Per model: the pattern (or why there is none) with the phase means and their intervals, the late-layer
        verdict naming its layer, robustness and the small-n caveat; seed compat: the notebook's labels."""
        seed = result.config.get("compat") == "seed"
        return [headline_line(model, s, seed) for model, s in result.summary["models"].items()]


def headline_line(model: str, s: dict, seed: bool = False) -> str:
    """One model's console line (see :meth:`Phases.headline`)."""
    if "late_label" not in s:  # seed compat, or a result written before the interval rule
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


def phase_text(p: dict) -> str:
    """``"+0.44 [+0.30, +0.55]"``: a phase mean and its interval (the mean alone where it has none)."""
    if p.get("ci_lo") is None or p.get("ci_hi") is None:
        return signed(p["mean"], 2)
    return f"{signed(p['mean'], 2)} [{signed(p['ci_lo'], 2)}, {signed(p['ci_hi'], 2)}]"


def short_robustness(checks: list[dict]) -> str:
    """``"not robust: flips without c3"``, or ``"robust to all 9 sensitivity checks"``; "" without checks."""
    flipped = [c["check"] for c in checks if c["flips"]]
    if flipped:
        return "not robust: flips " + ", ".join(flipped)
    return f"robust to all {len(checks)} sensitivity checks" if checks else ""


def comparison(reference: list[dict], summaries: dict[str, dict], pairs: PairDataset,
               compat: str | None = None) -> list[dict]:
    """The reference rows and one row per model of this run. By default every row carries how it was computed
    (``data``, ``layers``, ``token_rule``) and its ``comparability`` with this run's first model; seed compat:
    model, source and the three means, as the notebook prints them."""
    def means(s: dict) -> dict:
        return {phase: s["phases"][phase]["mean"] for phase in PHASES}

    if compat == "seed":
        return [{key: row[key] for key in ("model", "source", *PHASES)} for row in reference] + [
            {"model": model, "source": THIS_RUN, **means(s)} for model, s in summaries.items()]
    data = f"{Path(pairs.source).name} ({pairs.n_pairs} pairs, sha256 {pairs.hash[:12]})"
    return mark_comparable(reference + [{"model": model, "source": THIS_RUN, **means(s), "data": data,
                                         "layers": layers_text(s), "token_rule": token_rule(s["pooling"])}
                                        for model, s in summaries.items()])


def layers_text(s: dict) -> str:
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
