"""The validation card: every verdict's measured power, false-alarm rate and coverage, from the instance rows.

    card = card_rows(rows)           # rows: one per instance of one check (see .boundaries); one row per check
    card[0]                          # {"verdict", "check", "metric", "n", "events", "rate", "ci_lo", "ci_hi",
                                     #  "target", "meets"}
    wilson(3, 60)                    # (0.0171, 0.1369): the Wilson 95 % interval of 3 events in 60
    text = card_markdown(card, meta) # the card as a markdown page

A card row counts the instance rows of one (verdict, check, metric): ``events`` are the successes, except for a
``false_alarm`` metric, where they are the false alarms (instances with ``success`` False); ``rate`` = events / n
with its Wilson score interval (``level`` 0.95). A numeric metric (``boundary_error``) reports the mean of its
values instead. ``target`` says what the issue that set the targets asks of the rate, and ``meets`` whether the
rate (and, for a false-alarm rate, the interval's upper end) meets it; :func:`standing` tells a rate that misses
its target from one that meets it on too few instances to show it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..report.markdown import md_table, md_text, number
from ..stats import wilson

TARGETS = {
    "power": ("rate >= 0.90", lambda r, lo, hi: r >= 0.90),
    "coverage": ("0.90 <= rate <= 0.98", lambda r, lo, hi: 0.90 <= r <= 0.98),
    "kept": ("rate >= 0.90", lambda r, lo, hi: r >= 0.90),
    "recurrence": ("rate >= 0.90", lambda r, lo, hi: r >= 0.90),
    "false_alarm": ("rate <= 0.05, upper end <= 0.10", lambda r, lo, hi: r <= 0.05 and hi <= 0.10),
    "first_picks": ("rate >= 0.90", lambda r, lo, hi: r >= 0.90),
    "interval_holds_zero": ("every instance", lambda r, lo, hi: r == 1.0),
    "set_cost": ("every instance (|difference| < 1e-4 nats)", lambda r, lo, hi: r == 1.0),
    "derived_diff": ("every measure (< 1e-3)", lambda r, lo, hi: r == 1.0),
    "lens_identical": ("every lens measure (<= 1e-5)", lambda r, lo, hi: r == 1.0),
    "estimate": ("every row within its target", lambda r, lo, hi: r == 1.0),
    "zero_width": ("every boundary", lambda r, lo, hi: r == 1.0),
}
"""metric: (what the rate must do, the test of it)."""
NUMERIC = {"boundary_error": "mean layers from the planted change (t or t + 1) to the boundary that found it",
           "interval_width": "mean width (layers) of the interval of the boundary that found it"}
METRIC_WORDS = {"power": "power", "coverage": "coverage", "kept": "kept", "recurrence": "recurrence",
                "false_alarm": "false-alarm rate", "first_picks": "first picks in the band",
                "interval_holds_zero": "interval holds 0", "set_cost": "equal to surgery's set cost",
                "derived_diff": "derived = real", "lens_identical": "identical", "estimate": "within target",
                "zero_width": "zero width only when never moved",
                "extra": "no extra boundary", "boundary_error": "boundary error",
                "interval_width": "interval width"}


def card_rows(rows: Iterable[dict], level: float = 0.95) -> list[dict]:
    """One card row per (verdict, check, metric) of the instance ``rows``, in first-seen order."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["verdict"], row["check"], row["metric"]), []).append(row)
    out = []
    for (verdict, check, metric), members in groups.items():
        n = len(members)
        if metric in NUMERIC:
            values = [float(r["value"]) for r in members]
            out.append({"verdict": verdict, "check": check, "metric": metric, "n": n, "events": None,
                        "rate": sum(values) / n, "ci_lo": min(values), "ci_hi": max(values),
                        "target": NUMERIC[metric], "meets": None})
            continue
        successes = sum(bool(r["success"]) for r in members)
        events = n - successes if metric == "false_alarm" else successes
        rate = events / n
        lo, hi = wilson(events, n, level)
        target, test = TARGETS.get(metric, ("(descriptive)", None))
        out.append({"verdict": verdict, "check": check, "metric": metric, "n": n, "events": events, "rate": rate,
                    "ci_lo": lo, "ci_hi": hi, "target": target, "meets": None if test is None else
                    bool(test(rate, lo, hi))})
    return out


def standing(c: dict) -> str:
    """``"yes"``, ``"no"`` (the rate itself misses the target), ``"too few instances"`` (the rate meets it but the
    interval's upper end does not: more instances would tell) or ``"-"`` (descriptive)."""
    if c["meets"] is None:
        return "-"
    if c["meets"]:
        return "yes"
    test = TARGETS[c["metric"]][1]
    return "too few instances" if c["events"] is not None and test(c["rate"], c["ci_lo"], 0.0) else "no"


def _meets(c: dict) -> str:
    word = standing(c)
    return f"**{word}**" if word in ("no", "too few instances") else word


def card_markdown(card: list[dict], meta: dict) -> str:
    """The card as markdown: a table of every verdict's rates with their intervals, targets and whether they are
    met, then how it was made (``meta``: model, instances, texts, seed, seconds, versions)."""
    rows = []
    for c in card:
        if c["events"] is None:
            value = f"{number(c['rate'], 2)} (range {number(c['ci_lo'], 2)}-{number(c['ci_hi'], 2)})"
        else:
            value = (f"{number(c['rate'], 3)} [{number(c['ci_lo'], 3)}, {number(c['ci_hi'], 3)}] "
                     f"({c['events']}/{c['n']})")
        rows.append([md_text(c["verdict"]), md_text(c["check"]), METRIC_WORDS.get(c["metric"], c["metric"]),
                     value, c["n"], md_text(c["target"]), _meets(c)])
    missed = [c for c in card if standing(c) == "no"]
    few = [c for c in card if standing(c) == "too few instances"]
    out = [f"# Validation card: {md_text(meta.get('model', ''))}", "",
           "Each verdict tested where the answer is known: plants whose right answer is known by construction, "
           "null relabelings under which nothing is there, and synthetic data of known truth. A rate is the share "
           "of instances (Wilson 95 % interval, events/instances); its target is the one the project set.", "",
           md_table(["verdict", "check", "metric", "rate [95 % interval] (events/n)", "instances", "target",
                     "meets"], rows), ""]
    if missed:
        out += ["**Targets missed:** " + "; ".join(f"{md_text(c['verdict'])}: {md_text(c['check'])} "
                                                   f"({METRIC_WORDS.get(c['metric'], c['metric'])} "
                                                   f"{number(c['rate'], 3)}, target {md_text(c['target'])})"
                                                   for c in missed) + ".", ""]
    if few:
        out += ["**Not yet shown (the rate meets its target, the interval's upper end does not: more instances "
                "would tell):** " + "; ".join(f"{md_text(c['verdict'])}: {md_text(c['check'])} "
                                             f"({c['events']}/{c['n']})" for c in few) + ".", ""]
    out += ["## How this card was made", ""]
    out += [f"- {md_text(k)}: {md_text(str(v))}" for k, v in meta.items()]
    return "\n".join(out) + "\n"
