"""The probe study's report.md and headline lines, from the result alone.

    report(result) -> str;  headline_line(model, summary) -> [str, ...]   (plain text: the terminal prints it)
"""

from __future__ import annotations

import pandas as pd

from ...report.markdown import md_text, number, signed
from ...study.result import StudyResult
from .claims import none_found, states_text, where_decodable
from .conventions import CONVENTIONS


def headline_line(model: str, s: dict) -> list[str]:
    """One plain-text line per label set: where it is decodable beyond the surface, and for a contrast where the
    model needs it and where steering moves it."""
    lines = []
    for name, entry in s["label_sets"].items():
        p = entry["probes"]["logreg"]
        line = (f"{model}: {name}: decodable beyond the surface {where_decodable(p)} (best gain "
                f"{signed(p['best_gain'])} at state {p['best_state']}, accuracy {number(p['best_accuracy'])})")
        c = entry.get("causal")
        if c:
            line += "; " + (f"needed at states {states_text(c['needed_states'])}" if c["needed_states"] else
                            none_found("removal", c["min_detectable"]["remove"]))
            line += "; " + (f"steerable at states {states_text(c['steerable_states'])}" if c["steerable_states"]
                            else none_found("steering", c["min_detectable"]["steer"]))
        lines.append(line)
    return lines


def pick(table: pd.DataFrame, model: str, name: str, method: str, metric: str, **match) -> pd.DataFrame:
    rows = table[(table["model"] == model) & (table["label_set"] == name) & (table["method"] == method)
                 & (table["metric"] == metric)]
    if "check" in rows.columns:
        rows = rows[rows["check"].isna() | (rows["check"] == "")]
    for key, value in match.items():
        rows = rows[rows[key] == value] if key in rows.columns else rows.iloc[0:0]
    return rows.set_index("state")


def interval(r) -> str:
    return f"[{signed(r['ci_lo'])}, {signed(r['ci_hi'])}]"


def axis_table(table: pd.DataFrame, model: str, name: str, c: dict, companions: dict) -> list[str]:
    """Decodable vs used on one axis: per state tested, the probe's gain over the surface, removal's damage against
    the null and its preference change, steering's S and slope, the skip of block s - 1 on the same texts (the
    same units) and divergence's UA."""
    gain = pick(table, model, name, "logreg", "gain_over_surface")
    damage = pick(table, model, name, "remove", "damage")
    null = pick(table, model, name, "remove_null", "damage")
    effect = pick(table, model, name, "remove", "effect")
    sign = pick(table, model, name, "steer", "sign_effect", direction="mass_mean", alpha=c["test_alpha"])
    slope = pick(table, model, name, "steer", "slope", direction="mass_mean")
    skip = pick(table, model, name, "skip", "effect")
    ua = dict(zip(companions.get("divergence_ua", {}).get("states", []),
                  companions.get("divergence_ua", {}).get("values", []), strict=False))
    out = [f"| state | gain over surface | removal damage (q) | null damage | removal pref change | "
           f"steering S at {c['test_alpha']:g} (q) | slope | skip block s-1: pref change | UA |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in c["states"]:
        def cell(rows, with_q=False, s=s):
            if s not in rows.index:
                return ""
            r = rows.loc[s]
            text = f"{signed(r['value'])} {interval(r)}"
            return text + (f" (q = {number(r['q'])})" if with_q and pd.notna(r.get("q")) else "")
        u = ua.get(s)
        out.append(f"| {s} | {cell(gain)} | {cell(damage, True)} | {cell(null)} | {cell(effect)} | "
                   f"{cell(sign, True)} | {cell(slope)} | {cell(skip)} | {'' if u is None else signed(u)} |")
    return out + [""]


def report(result: StudyResult) -> str:
    out = ["# Probe: decodable, and used?", "", "Per hidden state: is the contrast linearly decodable beyond what a "
           "shallow reader gets, does the model need it (removal), and does pushing along it move the model's "
           "preference (steering)?", ""]
    table = result.table
    for model, s in result.summary["models"].items():
        out += [f"## {md_text(model)}", "", f"Vectors: pooling `{md_text(s.get('pooling', ''))}`.", ""]
        out += [f"- {md_text(line)}" for line in headline_line(model, s)] + [""]
        out += ["| label set | method | best state | accuracy | q | gain over surface | selectivity | decodable "
                "from | plateau from |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, entry in s["label_sets"].items():
            for method, p in entry["probes"].items():
                sel = "" if p["best_selectivity"] is None else signed(p["best_selectivity"])
                out.append(f"| {md_text(name)} | {method} | {p['best_state']} | {number(p['best_accuracy'])} "
                           f"[{number(p['best_ci'][0])}, {number(p['best_ci'][1])}] | {number(p['best_q'])} | "
                           f"{signed(p['best_gain'])} | {sel} | {p['decodable_from']} | {p['plateau_from']} |")
        out.append("")
        for name, entry in s["label_sets"].items():
            out += entry_notes(name, entry)
            c = entry.get("causal")
            if c:
                out += [f"### {md_text(name)}: decodable vs used", ""]
                unit = "pairs" if entry.get("kind") == "contrast" and name.startswith("side") else "groups"
                split = (f"in-sample (fitted and measured on all {unit})" if c["in_sample"] else
                         f"{c['n_train_units']} training {unit}, {c['n_test_units']} held-out {unit}")
                out += [f"{split}; {c['n_null']} null directions; removal by {c['erasure']}; alphas "
                        f"{', '.join(f'{a:g}' for a in c['alphas'])} (x r_s), tested at {c['test_alpha']:g}; "
                        f"position 0 {'edited' if c['include_pos0'] else 'left alone'}.", ""]
                out += axis_table(table, model, name, c, s.get("companions") or {})
                if c["checks"]:
                    out += ["Checks at the best state: " + "; ".join(
                        f"{md_text(x['check'])} ({x['test']}, state {x['state']}): "
                        f"{'flips' if x['flips'] else 'holds'}" for x in c["checks"]) + ".", ""]
    return "\n".join(out) + "\n" + CONVENTIONS


def entry_notes(name: str, entry: dict) -> list[str]:
    out = []
    p = entry["probes"]["logreg"]
    if p["floor_states"]:
        out.append(f"{md_text(name)}: the permutation p is at its floor 1/(n + 1) = {number(p['p_floor'])} at states "
                   f"{states_text(p['floor_states'])} (more permutations could lower q there).")
    if not entry["control"]["possible"]:
        out.append(f"{md_text(name)}: no selectivity: the control task's unit "
                   f"({md_text(entry['control']['unit'])}) recurs across folds for "
                   f"{number(entry['control']['recurrence'] or 0)} of the texts, so a probe could not memorise it.")
    return out + ([""] if out else [])
