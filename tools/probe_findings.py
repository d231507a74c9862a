"""Write the probe study's findings on a model from one run folder into the pages that quote them.

    .venv/bin/python tools/probe_findings.py runs/probe-smollm2 [--model smollm2-135m] [--check]
    .venv/bin/python tools/probe_findings.py docs/results/probe-smollm2 --check   # what tests/test_probe_findings runs

Reads ``result.json`` of a ``layerscope run probe`` folder and rewrites the block between
``<!-- probe-findings:start -->`` and ``<!-- probe-findings:end -->`` in docs/studies/probe.md (a table per
contrast and how the run was made) and between ``<!-- probe-headline:start -->`` and ``<!-- probe-headline:end -->``
in README.md (one line). Every number on those pages comes from that one folder; nothing is typed by hand.
The pooled side's figure and that of the contrast needed at the most states are copied into docs/figures, and the
run's result.json into docs/results/probe-smollm2/ with made.json (the commit and the day of the run).
``--check`` exits 1 when a page is not what the folder gives (for a test), writing nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

from pages import replace_block

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"docs/studies/probe.md": "probe-findings", "README.md": "probe-headline"}
KEPT = ROOT / "docs" / "results" / "probe-smollm2"
"""Where the run's result.json is kept (with made.json: its commit and day), so tests check the pages against it."""


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


def findings(result: dict, model: str, folder: str, made: str) -> str:
    s = result["summary"]["models"][model]
    m = result["manifest"]
    sets = s["label_sets"]
    first = next((e["causal"] for e in sets.values() if "causal" in e), None)
    lines = [f"From one run: `layerscope run probe --out {folder}` ({made}; layerscope {m['versions']['layerscope']}, "
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
        figure = f"../figures/probe_{slug(name)}_{slug(model)}.png"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a probe run folder (result.json)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs; write nothing")
    args = parser.parse_args()
    raw = (args.run / "result.json").read_text(encoding="utf-8")
    result = json.loads(raw)
    if (args.run / "made.json").exists():  # a kept copy: how the run was made is recorded beside it
        made = json.loads((args.run / "made.json").read_text(encoding="utf-8"))["made"]
    else:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        day = datetime.date.fromtimestamp((args.run / "result.json").stat().st_mtime).isoformat()
        made = f"commit {commit}, {day}, this 2-core CPU"
        if not args.check:
            KEPT.mkdir(parents=True, exist_ok=True)
            (KEPT / "result.json").write_text(raw, encoding="utf-8")
            (KEPT / "made.json").write_text(json.dumps({"made": made, "folder": str(args.run)}) + "\n",
                                            encoding="utf-8")
    folder = json.loads((args.run / "made.json").read_text())["folder"] if (args.run / "made.json").exists() \
        else str(args.run)
    bodies = {"probe-findings": findings(result, args.model, folder, made),
              "probe-headline": headline(result, args.model)}
    stale = []
    for page, tag in PAGES.items():
        path = ROOT / page
        old = path.read_text(encoding="utf-8")
        new = replace_block(old, tag, bodies[tag])
        if new != old:
            stale.append(page)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for name in shown(result, args.model):
        figure = f"probe_{slug(name)}_{slug(args.model)}.png"
        target = ROOT / "docs" / "figures" / figure
        if not (args.run / figure).exists():  # a kept result.json without its figures: the pages only
            continue
        if not target.exists() or target.read_bytes() != (args.run / figure).read_bytes():
            stale.append(f"docs/figures/{figure}")
            if not args.check:
                shutil.copyfile(args.run / figure, target)
    if args.check and stale:
        sys.exit(f"out of date with {args.run}: {', '.join(stale)}")


if __name__ == "__main__":
    main()
