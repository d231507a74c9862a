"""Write the probe study's findings on SmolLM2 from the recorded `make run` into the pages that quote them.

    .venv/bin/python tools/probe_findings.py            # rewrite the blocks from docs/results/make-run/probe/
    .venv/bin/python tools/probe_findings.py --check    # exit 1 when a page differs (tests/docs/test_result_pages.py)

Reads the probe study's ``result.json`` that tools/run_findings.py keeps from the recorded ``make run`` (with
``made.json`` beside it: the commit, day and machine) and rewrites the block between ``<!-- probe-findings:start
-->`` and ``<!-- probe-findings:end -->`` in docs/studies/probe.md (a table per contrast) and between ``<!--
probe-headline:start -->`` and ``<!-- probe-headline:end -->`` in README.md (one line). The figures it shows (the
pooled side's, and that of the contrast needed at the most states) are those run_findings.py keeps. Nothing in
those blocks is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pages import write_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"docs/studies/probe.md": "probe-findings", "README.md": "probe-headline"}
RUN = ROOT / "docs" / "results" / "make-run"
"""Where tools/run_findings.py keeps the recorded make run: ``probe/result.json``, ``made.json``, ``figures/``."""
MODEL = "smollm2-135m"


def num(x, digits: int = 3, sign: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def states(values: list[int]) -> str:
    return ", ".join(map(str, values)) if values else "none"


def decodable(p: dict) -> str:
    if p["decodable_from"] is not None:
        return f"from {p['decodable_from']}"
    return f"at {states(p['decodable_states'])}" if p["decodable_states"] else "no state"


def flips(c: dict, test: str) -> str:
    names = [x["check"] for x in c["checks"] if x["test"] == test and x["flips"]]
    return "; ".join(names) if names else "none"


def mde(c: dict, test: str) -> str:
    lo, hi = c["min_detectable"][test]
    return "-" if lo is None else f"{lo:.2f}-{hi:.2f}"


def shown(result: dict, model: str) -> list[str]:
    """The label sets whose figures the page shows: the contrast needed at the most states, and the pooled side."""
    sets = result["summary"]["models"][model]["label_sets"]
    contrasts = [n for n, e in sets.items() if "causal" in e]
    best = max(contrasts, key=lambda n: (len(sets[n]["causal"]["needed_states"]), n)) if contrasts else None
    return [n for n in (best, "side") if n in sets]


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def findings(result: dict, model: str, made: dict) -> str:
    s = result["summary"]["models"][model]
    m = result["manifest"]
    sets = s["label_sets"]
    first = next((e["causal"] for e in sets.values() if "causal" in e), None)
    lines = [f"The probe study of the recorded `make run` ({made['day']}, commit {made['commit']}, "
             f"{made['machine']}; layerscope {m['versions']['layerscope']}, "
             f"torch {m['versions']['torch']}, seed {m['seed']}; the bundled pairs, {m['dataset']['n_pairs']} pairs "
             f"in {m['dataset']['n_categories']} categories, dataset sha256 {m['dataset']['hash'][:12]}...; "
             f"analysis {m['timings']['analysis_s'] / 60:.1f} min on a 2-core CPU with the pairs cached, the causal "
             f"tests {m['timings'].get('causal_s', 0) / 60:.1f} min of it). "]
    if first:
        lines[0] += (f"Causal tests at states {states(first['states'])} on {first['n_test_units']} held-out pairs "
                     f"per category ({first['n_train_units']} fitted), {first['n_null']} null directions, steering "
                     f"doses {', '.join(f'{a:g}' for a in first['alphas'])} x r_s, tested at {first['test_alpha']:g}.")
    lines += ["", "| contrast | decodable beyond the surface (logistic) | best gain [95% CI] | needed at (removal) | "
              "damage vs null at the best state | steerable at | S at the best state [95% CI] | smallest detectable "
              "(removal; steering) | checks that flip it |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, e in sets.items():
        p = e["probes"]["logreg"]
        gain = f"{num(p['best_gain'], sign=True)} [{num(p['best_gain_ci'][0], sign=True)}, " \
               f"{num(p['best_gain_ci'][1], sign=True)}] at {p['best_state']}"
        c = e.get("causal")
        label = f"`{name}`" + (" (a mixture)" if e.get("kind") == "mixture" else "")
        if not c:
            lines.append(f"| {label} | {decodable(p)} | {gain} | not tested | | | | | |")
            continue
        rb, sb = c["remove_best"] or {}, c["steer_best"] or {}
        damage = f"{num(rb.get('value'), 2, True)} vs {num(rb.get('null_damage'), 2, True)} nats at " \
                 f"{rb.get('state')} (q = {num(rb.get('q'))})" if rb else "-"
        steer = f"{num(sb.get('value'), 2, True)} [{num(sb['ci'][0], 2, True)}, {num(sb['ci'][1], 2, True)}] at " \
                f"{sb.get('state')} (q = {num(sb.get('q'))})" if sb else "-"
        checks = "; ".join(f"{t}: {flips(c, t)}" for t in ("remove", "steer"))
        lines.append(f"| {label} | {decodable(p)} | {gain} | {states(c['needed_states'])} | {damage} | "
                     f"{states(c['steerable_states'])} | {steer} | {mde(c, 'remove')}; {mde(c, 'steer')} | {checks} |")
    mixture = sets.get("side")
    if mixture:
        p = mixture["probes"]["logreg"]
        lines += ["", f"The pooled side (a mixture of {m['dataset']['n_categories']} contrasts): best logistic "
                  f"accuracy {num(p['best_accuracy'])} [{num(p['best_ci'][0])}, {num(p['best_ci'][1])}] at state "
                  f"{p['best_state']}, against {num(mixture['surface']['accuracy'])} for the bag of tokens and "
                  f"{num(mixture['surface']['state0_accuracy'])} for the state-0 probe."]
    for name in shown(result, model):
        figure = f"../results/make-run/figures/{figure_name(name, model)}"
        lines += ["", f"![The probe study's figure for {name} on {model}]({figure})"]
    return "\n".join(lines)


def headline(result: dict, model: str) -> str:
    sets = result["summary"]["models"][model]["label_sets"]
    contrasts = {n: e for n, e in sets.items() if "causal" in e}
    beyond = [n for n, e in contrasts.items() if e["probes"]["logreg"]["decodable_states"]]
    needed = [n for n, e in contrasts.items() if e["causal"]["needed_states"]]
    steerable = [n for n, e in contrasts.items() if e["causal"]["steerable_states"]]
    return (f"On SmolLM2-135M-Instruct (Q4_1), of the {len(contrasts)} per-category side contrasts, "
            f"{len(beyond)} are decodable beyond a bag of tokens at some state, {len(needed)} are needed (removing "
            f"the direction costs the held-out pairs' own continuations more than null directions) and "
            f"{len(steerable)} are steerable, each at the states in [the probe page](docs/studies/probe.md"
            "#on-smollm2-135m-instruct-q4_1).")


def figure_name(name: str, model: str = MODEL) -> str:
    """The file name the probe study gives the figure of label set ``name``, and the name it is kept under."""
    return f"probe_{slug(name)}_{slug(model)}.png"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs; write nothing")
    args = parser.parse_args()
    result = json.loads((RUN / "probe" / "result.json").read_text(encoding="utf-8"))
    made = json.loads((RUN / "made.json").read_text(encoding="utf-8"))
    bodies = {"probe-findings": findings(result, MODEL, made),
              "probe-headline": headline(result, MODEL)}
    stale = write_blocks(ROOT, {page: {tag: bodies[tag]} for page, tag in PAGES.items()}, args.check)
    if args.check and stale:
        print(f"not what {RUN.relative_to(ROOT)} gives: {', '.join(stale)}; run tools/probe_findings.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
