"""Surgery report: which blocks the model needs (by skipping, repeating and swapping them), whether the
geometry predicts it, whether the phase boundaries hold causally, and the pruning curve against random sets.

    text = report(result)
    headline_line("smollm2-135m", result.summary["models"]["smollm2-135m"])
"""

from __future__ import annotations

from ...report.markdown import bits, md_table, md_text, number
from ...study.result import StudyResult

RULES = {"block_influence": "lowest block influence (ShortGPT)",
         "angular_distance": "closest contiguous block (Gromov et al.)"}
BOUNDARY_SETS = {"given": "the given boundaries (--boundaries)",
                 "change_points": "the 2 change points of this run's block influence profile",
                 "thirds": "the phases study's thirds"}


def _blocks(blocks) -> str:
    return ", ".join(map(str, blocks)) if blocks else "none"


def critical_line(s: dict) -> str:
    c = s["critical"]
    apart = (f"first block {'critical' if c['first'] else 'not critical'} "
             f"(delta NLL {number(bits(c['first_cost']))} bits/token), "
             f"last {'critical' if c['last'] else 'not critical'} ({number(bits(c['last_cost']))})")
    return (f"{len(c['interior'])} of {s['n_layers'] - 2} interior blocks critical when skipped (BH q < 0.05; "
            f"costliest first: {_blocks(c['top_interior'])}); {apart}; check: {len(c['in_both_halves'])} of "
            f"{len(c['layers'])} critical blocks raise NLL in both halves of the texts")


def geometry_line(s: dict) -> str:
    g = s["geometry"]["block_influence"]
    if g["rho"] is None:
        return f"block influence vs skip cost: not assessable ({g['note']})"
    verdict = "predicts" if g["predicts"] else "does not significantly predict"
    if g["rho_interior"] is None:
        check = "check without the first and last block: not assessable (too few blocks)"
    else:
        flips = g["predicts_interior"] != g["predicts"]
        check = (f"check without the first and last block: rho {number(g['rho_interior'])}, q "
                 f"{number(g['q_interior'])} ({'flips' if flips else 'holds'})")
    return f"block influence {verdict} the skip cost (Spearman rho {number(g['rho'])}, q {number(g['q'])}); {check}"


def pruning_line(s: dict) -> str:
    p = s["pruning"]
    parts = []
    for rule, entry in p["rules"].items():
        name = RULES[rule].split(" (")[0]
        better = [k for k, b in zip(p["k"], entry["better_than_random"], strict=True) if b]
        overall = "beats" if entry["better_overall"] else "does not significantly beat"
        parts.append(f"{name} {overall} random sets over k = 1..{p['k'][-1]} (rank-sum p "
                     f"{number(entry['overall_p'])}; per k after BH: {_blocks(better) if better else 'no k'})")
    return "; ".join(parts)


def headline_line(model: str, s: dict) -> str:
    parts = [f"{model} ({s['n_layers']} blocks, {s['n_texts']} texts)"]
    if "critical" in s:
        parts.append(critical_line(s))
    if "geometry" in s:
        parts.append(geometry_line(s))
    if "pruning" in s:
        parts.append(pruning_line(s))
    return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if parts[2:] else "")


def report(result: StudyResult) -> str:
    cfg = result.config
    out = ["# Surgery: which blocks the model needs, by intervention", "",
           "Each decoder block l is **skipped** (it hands its input on), **repeated** (run twice) or **swapped** "
           "with block l + 1 (Lad et al. 2024; Sun et al. 2024); sets of k blocks are **pruned**, chosen by the "
           "lowest block influence (Men et al. 2024, ShortGPT), as the contiguous block whose input and output are "
           "closest in angle (Gromov et al. 2024), and at random (the control). Per text: delta NLL (mean NLL over "
           "its scored tokens, intervened minus intact), KL(intact || intervened) of the next-token distributions, "
           "top-1 agreement and the cosine of the final hidden states. Per block: the mean over texts with a "
           f"{cfg.get('ci_level', 0.95):.0%} percentile bootstrap interval ({cfg.get('n_bootstrap')} resamples) and, "
           f"for delta NLL, a sign-flip permutation p ({cfg.get('n_permutations')} permutations) with "
           "Benjamini-Hochberg q over the blocks of one intervention.", ""]
    for model, s in result.summary["models"].items():
        out += _model_section(md_text(model), s)
    for warning in result.summary.get("warnings", []):
        out.append(f"- warning: {md_text(warning)}")
    return "\n".join(out) + "\n"


def _model_section(model: str, s: dict) -> list[str]:
    out = [f"## {model}", "", f"{s['n_texts']} texts, intact NLL {number(bits(s['intact_nll']))} bits/token; "
           f"{s['passes_per_batch']} passes per batch, {s['layers_run_per_batch']} decoder blocks run per batch "
           f"(a whole pass runs {s['n_layers']}).", ""]
    if "critical" in s:
        out += ["### Critical blocks (test)", "", critical_line(s) + ".", ""]
        rows = [[kind, _blocks([b for b, q in enumerate(s[kind]["q"]) if q is not None and q < 0.05]),
                 number(bits(max(s[kind]["mean"]))),
                 int(max(range(len(s[kind]["mean"])), key=s[kind]["mean"].__getitem__))]
                for kind in ("skip", "repeat", "swap") if kind in s]
        out += [md_table(["intervention", "blocks with BH q < 0.05", "largest delta NLL (bits/token)", "at block"],
                         rows), ""]
    if "geometry" in s:
        out += ["### Does geometry predict the removal cost? (test)", "", geometry_line(s) + ".", ""]
        out += [md_table(["measure", "rho", "p", "q", "rho without first/last", "q without first/last"],
                         [[name, number(g["rho"]), number(g["p"]), number(g["q"]), number(g["rho_interior"]),
                           number(g["q_interior"])] for name, g in s["geometry"].items()]), ""]
    if s.get("boundaries"):
        out += ["### Do the phase boundaries hold causally? (permutation test over placements)", "",
                "The statistic: mean skip cost of the blocks beside each boundary (blocks b - 1 and b for boundary "
                "state b) minus the mean of the other interior blocks; the null places as many blocks at random "
                "among the interior ones (the first and last block are left out: they are reported apart).", ""]
        out += [md_table(["boundaries", "states", "blocks", "effect (bits/token)", "p", "placements"],
                         [[BOUNDARY_SETS.get(name, name), _blocks(b["states"]), _blocks(b["blocks"]),
                           number(bits(b["effect"])), number(b["p"]), b["placements"]]
                          for name, b in s["boundaries"].items()]), ""]
    if "edge_p" in s.get("swap", {}):
        w = s["swap"]
        verdict = "agrees" if w["agrees"] else "does not agree (not significant, or a middle swap costs as much)"
        out += ["### Swap sensitivity (test)", "",
                f"Lad et al. report that middle blocks tolerate swapping with a neighbour while the first and last "
                f"do not. Here the edge swaps cost {number(bits(w['edges'][0]))} and {number(bits(w['edges'][1]))} "
                f"bits/token against a middle median of {number(bits(w['middle_median']))}; the placement test's p is "
                f"{number(w['edge_p'])} "
                f"({w['placements']} placements): this model {verdict}.", ""]
    if "pruning" in s:
        p = s["pruning"]
        out += ["### Pruning curve (test per k against the random sets)", "", pruning_line(s) + ".", ""]
        rows = []
        for i, k in enumerate(p["k"]):
            row = [k, f"{number(bits(p['random']['mean'][i]))} [{number(bits(p['random']['lo'][i]))}, "
                      f"{number(bits(p['random']['hi'][i]))}]"]
            for entry in p["rules"].values():
                row += [f"{number(bits(entry['mean'][i]))} ({_blocks(entry['layers'][i])})",
                        f"{entry['rank'][i]} of {entry['of'][i]}", number(entry["q"][i])]
            rows.append(row)
        heads = ["k", "random: mean delta NLL, bits/token [95% of draws]"]
        for rule in p["rules"]:
            heads += [RULES[rule], "rank", "q"]
        out += [md_table(heads, rows), ""]
    for kind in ("skip", "repeat", "swap"):
        lh = s.get(kind, {}).get("low_minus_high")
        if lh:
            out += [f"### Per language, {kind} (test: low minus high resource, label permutation, BH)", "",
                    f"Blocks where low-resource texts are hurt more: {_blocks(lh['low_hurt_more'])}; where "
                    f"high-resource texts are: {_blocks(lh['high_hurt_more'])}.", ""]
    return out
