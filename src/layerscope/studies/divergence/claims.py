"""The divergence study's rows of a run's summary table: per model, r(UA, output preference) of mean pooling at
the headline layer (the last tested one), with its interval, q and the sensitivity checks that flip it.

    claims(result)   # [Verdict("divergence", "smollm2-135m", "r(UA, pref) at layer 30 ...", "not significant", ...)]
"""

from __future__ import annotations

from ...modes import NOTEBOOKS
from ...study.result import StudyResult
from ...study.validated import with_card
from ...study.verdicts import NOT_ASSESSABLE, Verdict, flipped, key_text, seed_claim, status_of
from .summary import DivergenceModel, DivergenceSummary, headline_entry

CARD_VERDICT = "r(UA, pref) at the last tested layer, mean pooling"
"""The headline verdict's name on the validation card (its false-alarm rate under shuffled preferences)."""


def claims(result: StudyResult) -> list[Verdict]:
    """One verdict per model (notebooks mode, or a result written before the tests: "not assessable", the notebook's
    label kept in the claim)."""
    seed = result.config.get("compat") == NOTEBOOKS
    summary: DivergenceSummary = result.summary
    return [model_claim(result.study, model, s, seed) for model, s in summary["models"].items()]


def model_claim(study: str, model: str, s: DivergenceModel, seed: bool = False) -> Verdict:
    head = headline_entry(s)
    stage = " (before the final norm)" if head.get("stage") == "pre_norm" else ""
    if seed or "significant" not in head:
        claim = f"r(UA, pref) at the final layer {head['layer']}, mean pooling"
        claim = seed_claim(claim, head["label"], seed)
        return Verdict(study, model, claim, NOT_ASSESSABLE, key_text("r", head.get("r"), p=head.get("p")))
    claim = f"r(UA, pref) at the last tested layer {head['layer']}{stage}, mean pooling"
    interval = "LOO range" if head.get("interval") == "leave-one-out range" else ""
    if head.get("r") is None:  # UA the same in every category, or the pooling undefined for these data
        return Verdict(study, model, f"{claim}: {head['label']}", NOT_ASSESSABLE, key_text("r", None))
    key = key_text("r", head["r"], (head.get("ci_lo"), head.get("ci_hi")), q=head.get("q"), interval=interval)
    flips = flipped(s.get("checks"))
    significant = bool(head["significant"])
    return Verdict(study, model, f"{claim}: {head['label']}" if significant else claim,
                   status_of(significant, flips), with_card(key, f"{study}: {CARD_VERDICT}", model), flips)
