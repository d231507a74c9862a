"""The probe study's rows of the summary table: per model and label set, where it is decodable beyond a shallow
reader; per contrast, where the model needs it (removal) and where pushing along it moves the preference.

    claims(result) -> [Verdict, ...]
"""

from __future__ import annotations

from ...report.markdown import number, signed
from ...study.result import StudyResult
from ...study.verdicts import Verdict, key_text, status_of
from .analysis import LEVEL


def states_text(states: list[int]) -> str:
    return ", ".join(map(str, states)) if states else "none"


def where_decodable(p: dict) -> str:
    s, last = p["decodable_from"], p["last_state"]
    if s is not None:
        state_l = " (the last block's output before the final norm)" if s == last else ""
        return f"from state {s} on{state_l}"
    if p["decodable_states"]:
        return f"at states {states_text(p['decodable_states'])}, not from a state on"
    return "at no state"


def decodable_claim(study: str, model: str, name: str, entry: dict) -> Verdict:
    p = entry["probes"]["logreg"]
    holds = bool(p["decodable_states"])
    mixture = " (a mixture of categories' contrasts)" if entry.get("kind") == "mixture" else ""
    best = entry["surface"]["best"]
    flips = tuple(c["check"] for c in entry["checks"] if c["flips"]) if holds else ()
    key = key_text("gain over the surface", p["best_gain"], p["best_gain_ci"]) + \
        f" at state {p['best_state']} (accuracy {number(p['best_accuracy'])}, q = {number(p['best_q'])})"
    return Verdict(study, model, f"{name}{mixture}: decodable beyond the best shallow reader ({best}) "
                   f"{where_decodable(p)}", status_of(holds, flips), key, flips)


def none_found(test: str, mde: list) -> str:
    lo, hi = mde
    if lo is None:
        return f"{test}: not assessable"
    span = number(lo) if hi is None or abs(hi - lo) < 5e-4 else f"{number(lo)} to {number(hi)}"
    return f"{test}: no effect above the null detected (smallest detectable at 80 % power: {span} nats)"


def removal_claim(study: str, model: str, name: str, c: dict) -> Verdict:
    b = c["remove_best"]
    holds = bool(c["needed_states"])
    flips = tuple(x["check"] for x in c["checks"] if x["test"] == "remove" and x["flips"]) if holds else ()
    split = " (in-sample)" if c["in_sample"] else ""
    what = (f"needed at states {states_text(c['needed_states'])}: removing it costs its own continuations more "
            f"than removing null directions{split}" if holds else
            none_found(f"removal at states {states_text(c['states'])}{split}", c["min_detectable"]["remove"]))
    key = "" if b is None else (f"damage {signed(b['value'])} vs null {signed(b['null_damage'])} nats at state "
                                f"{b['state']}, q = {number(b['q'])}")
    return Verdict(study, model, f"{name}: {what}", status_of(holds if b is not None else None, flips), key, flips)


def steering_claim(study: str, model: str, name: str, c: dict) -> Verdict:
    b = c["steer_best"]
    holds = bool(c["steerable_states"])
    flips = tuple(x["check"] for x in c["checks"] if x["test"] == "steer" and x["flips"]) if holds else ()
    split = " (in-sample)" if c["in_sample"] else ""
    what = (f"steerable at states {states_text(c['steerable_states'])}: pushing along it at alpha "
            f"{c['test_alpha']:g} moves the preference its way more than null directions{split}" if holds else
            none_found(f"steering at alpha {c['test_alpha']:g}{split}", c["min_detectable"]["steer"]))
    key = "" if b is None else (key_text("S", b["value"], b["ci"], q=b["q"]) +
                                f" nats at state {b['state']}, damage {signed(b['damage'])}")
    return Verdict(study, model, f"{name}: {what}", status_of(holds if b is not None else None, flips), key, flips)


def claims(result: StudyResult) -> list[Verdict]:
    out = []
    for model, s in result.summary["models"].items():
        for name, entry in s["label_sets"].items():
            out.append(decodable_claim(result.study, model, name, entry))
            if "causal" in entry:
                out.append(removal_claim(result.study, model, name, entry["causal"]))
                out.append(steering_claim(result.study, model, name, entry["causal"]))
    return out


__all__ = ["LEVEL", "claims"]
