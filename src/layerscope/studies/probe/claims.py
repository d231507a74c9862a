"""The probe study's rows of the summary table: per model and label set, where it is decodable; for a two-class
set, where steering moves the output, whether the two profiles agree, and where they part.

    claims(result) -> [Verdict, ...]
"""

from __future__ import annotations

from ...study.result import StudyResult
from ...study.verdicts import Verdict, key_text, status_of
from .analysis import LEVEL


def states_text(states: list[int]) -> str:
    return ", ".join(map(str, states)) if states else "none"


def probe_claim(study: str, model: str, name: str, entry: dict) -> Verdict:
    logreg, mass = entry["probes"]["logreg"], entry["probes"]["mass_mean"]
    s = logreg["decodable_from"]
    holds = logreg["best_q"] < LEVEL
    flips = []
    if holds and not logreg["best_selectivity_ci"][0] > 0:
        flips.append("against the control task")
    if holds and not mass["best_q"] < LEVEL:
        flips.append("with the mass-mean probe")
    where = f"from state {s} on" if s is not None else "at its best state, not stably from any state on"
    key = key_text("accuracy", logreg["best_accuracy"], logreg["best_ci"], q=logreg["best_q"], sign=False)
    return Verdict(study, model, f"{name}: linearly decodable {where} (best state {logreg['best_state']})",
                   status_of(holds, flips), f"{key}, selectivity {logreg['best_selectivity']:+.3f}", tuple(flips))


def steer_claim(study: str, model: str, name: str, steer: dict) -> Verdict:
    holds = steer["best_q"] < LEVEL
    flips = () if steer["best_flips_sign"] or not holds else ("-alpha does not flip the sign",)
    split = " (in-sample)" if steer["in_sample"] else ""
    key = key_text("effect", steer["best_effect"], steer["best_ci"], q=steer["best_q"])
    return Verdict(study, model, f"{name}: steering moves the preference at states "
                   f"{states_text(steer['used_states'])}{split} (largest at state {steer['best_state']})",
                   status_of(holds, flips), key, flips)


def agreement_claim(study: str, model: str, name: str, steer: dict) -> Verdict:
    rho, p = steer["rho_probe_steer"], steer["rho_p"]
    significant = None if rho is None or p is None else p < LEVEL
    return Verdict(study, model, f"{name}: probe accuracy and steering effect rise and fall together over depth",
                   status_of(significant), key_text("rho", rho, p=p))


def contrast_claim(study: str, model: str, name: str, contrast: dict) -> Verdict:
    """Decodable where steering is null, and the reverse: both sets are read at BH q < LEVEL of their own tests."""
    apart, reverse = contrast["decodable_not_used"], contrast["used_not_decodable"]
    return Verdict(study, model, f"{name}: decodable (probe q < {LEVEL}) where steering is not significant at states "
                   f"{states_text(apart)}; steering moves it where it is not decodable at states "
                   f"{states_text(reverse)}", status_of(bool(apart or reverse)),
                   f"{len(apart)} + {len(reverse)} of the states steered")


def claims(result: StudyResult) -> list[Verdict]:
    out = []
    for model, s in result.summary["models"].items():
        for name, entry in s["label_sets"].items():
            out.append(probe_claim(result.study, model, name, entry))
            if "steering" in entry:
                out.append(steer_claim(result.study, model, name, entry["steering"]))
                out.append(agreement_claim(result.study, model, name, entry["steering"]))
                out.append(contrast_claim(result.study, model, name, entry["contrast"]))
    return out
