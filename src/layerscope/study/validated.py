"""What the recorded validation card measured of a verdict, to print beside it.

    note("atlas boundary", "smollm2-135m")   # "validation card (smollm2-135m, 2026-12-01): found 38/40 planted
                                             #  [0.84, 0.99]; false alarms 3/100 [0.01, 0.08]"
    rows("surgery", "smollm2-135m")          # the card's rows of that verdict (empty for another model)
    with_card("r = +0.12", "divergence: ...", "smollm2-135m")   # the key, "; " and the note when there is one

The card is ``layerscope/data/bundled/validation_card.json``, written by ``tools/validation_findings.py`` from the
run kept in docs/results/validation/ (never typed). Its rates are one model's: a verdict about another model gets
no note (its own card: ``layerscope validate --model ...``).
"""

from __future__ import annotations

import functools
import json
from importlib import resources

WORDS = {"power": "found", "false_alarm": "false alarms", "coverage": "covered", "kept": "kept",
         "recurrence": "recur", "first_picks": "first picks in the band", "interval_holds_zero": "interval holds 0"}
"""How a metric reads in a note; metrics not listed stay out of notes."""


@functools.cache
def card() -> dict | None:
    """The bundled card, or None when the package has none."""
    path = resources.files("layerscope.data") / "bundled" / "validation_card.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def rows(verdict: str, model: str) -> list[dict]:
    """The card's rows of ``verdict`` when the card was measured on ``model``; [] otherwise."""
    c = card()
    if c is None or c.get("model") != model:
        return []
    return [r for r in c["card"] if r["verdict"] == verdict and r["metric"] in WORDS]


def with_card(key: str, verdict: str, model: str, metrics: tuple[str, ...] = ("false_alarm",)) -> str:
    """A verdict table's ``key`` with the card's :func:`note` of ``verdict`` on ``model`` after it, when the card
    has one."""
    card_note = note(verdict, model, metrics)
    return f"{key}; {card_note}" if card_note else key


def note(verdict: str, model: str, metrics: tuple[str, ...] = ("power", "false_alarm")) -> str:
    """One line of the card's ``metrics`` for ``verdict`` on ``model`` (each metric's events summed over its
    checks, with the Wilson interval of the total); "" when the card has none."""
    from ..report.markdown import number
    from ..stats import wilson

    mine = rows(verdict, model)
    parts = []
    for metric in metrics:
        these = [r for r in mine if r["metric"] == metric]
        if these:
            events, n = sum(r["events"] for r in these), sum(r["n"] for r in these)
            lo, hi = wilson(events, n)
            parts.append(f"{WORDS[metric]} {events}/{n} [{number(lo, 2)}, {number(hi, 2)}]")
    if not parts:
        return ""
    c = card()
    return f"validation card ({c['model']}, {c['day']}): " + "; ".join(parts)
