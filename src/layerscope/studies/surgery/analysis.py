"""From per-text measures to the table's rows and the summary's verdicts.

    rows, summary = analyse(model, n_layers, measures, transitions, jobs, groups, boundaries, options)

Per intervention and layer: the mean over texts with a bootstrap interval; for delta NLL also the sign-flip
p and its BH q over the layers of one kind (:mod:`layerscope.measures.paired`). KL, top-1 agreement and the
final-state cosine are distances from the intact model (never below 0, never above 1) and carry intervals only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine.interventions.surgery_run import SurgeryMeasures
from ...engine.interventions.transitions import Transitions
from ...measures.changepoints import piecewise_linear_breaks
from ...measures.paired import group_difference, paired_effects, placement_test, rank_sum_p
from ...stats import bh_qvalues, percentile_ci, spearman
from ...study.finite import defined
from ...study.result import layer_row
from .jobs import SurgeryJobs

METRICS = ("delta_nll", "kl", "top1_agree", "final_cos")
ALPHA = 0.05


@dataclass(frozen=True)
class Options:
    n_bootstrap: int
    n_permutations: int
    seed: int
    level: float


@dataclass(frozen=True)
class Groups:
    """Per text its language code and whether that language is low-resource (None without a languages file)."""

    lang: np.ndarray
    low: np.ndarray


def per_text(m: SurgeryMeasures, iv) -> dict[str, np.ndarray]:
    r = m[iv]
    return {"delta_nll": r.nll - m.intact_nll, "kl": r.kl, "top1_agree": r.agreement, "final_cos": r.cosine}


def _stack(m: SurgeryMeasures, ivs, metric: str, texts: np.ndarray | slice = slice(None)) -> np.ndarray:
    return np.stack([per_text(m, iv)[metric][texts] for iv in ivs])


def boundary_blocks(states: list[int], n_layers: int) -> list[int]:
    """The blocks on either side of each boundary hidden state b (blocks b - 1 and b), inside 1..L-2."""
    return sorted({blk for b in states for blk in (b - 1, b) if 1 <= blk <= n_layers - 2})


def analyse(model: str, n_layers: int, m: SurgeryMeasures, t: Transitions | None, jobs: SurgeryJobs,
            groups: Groups | None, given_boundaries: list[int] | None, o: Options) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    summary: dict = {"n_layers": n_layers, "n_texts": len(m.intact_nll), "intact_nll": float(m.intact_nll.mean()),
                     "passes_per_batch": len(m.plan.passes), "layers_run_per_batch": m.plan.layers_run()}

    def row(intervention, layer, metric, value, lo=np.nan, hi=np.nan, p=np.nan, n=None, **extra):
        base = layer_row(model, layer, n_layers, metric, value) if layer is not None else \
            {"model": model, "n_layers": n_layers, "metric": metric, "value": value}
        return {**base, "intervention": intervention, "k": extra.pop("k", None), "rule": extra.pop("rule", None),
                "lang": extra.pop("lang", "all"), "ci_lo": lo, "ci_hi": hi, "p": p,
                "n": len(m.intact_nll) if n is None else n, **extra}

    costs: dict[str, np.ndarray] = {}
    for kind, ivs in jobs.per_layer.items():
        for metric in METRICS:
            mean, lo, hi, p = paired_effects(_stack(m, ivs, metric), o.n_bootstrap, o.n_permutations, o.seed, o.level)
            q = bh_qvalues(p) if metric == "delta_nll" else np.full(len(ivs), np.nan)
            if metric == "delta_nll":
                costs[kind] = mean
                summary[kind] = {"mean": mean.tolist(), "ci_lo": lo.tolist(), "ci_hi": hi.tolist(), "q": q.tolist()}
            for layer, iv in enumerate(ivs):
                rows.append(row(kind, iv.layers[0], metric, mean[layer], lo[layer], hi[layer],
                                p[layer] if metric == "delta_nll" else np.nan, q=q[layer]))
        if groups is not None:
            rows += _per_language(row, kind, ivs, m, groups, o, summary)
    if t is not None:
        for layer in range(n_layers):
            rows.append(row(None, layer, "block_influence", t.influence[layer], n=t.n_tokens))
            rows.append(row(None, layer, "angular_distance", t.angular[layer, layer + 1]))
        summary["block_influence"] = t.influence.tolist()
        summary["angular_next"] = [float(t.angular[b, b + 1]) for b in range(n_layers)]
    if "skip" in costs:
        summary["critical"] = _critical(m, jobs.per_layer["skip"], summary["skip"], n_layers, o)
        if t is not None:
            summary["geometry"] = _geometry(rows, row, costs["skip"], t, n_layers)
        summary["boundaries"] = _boundaries(rows, row, costs["skip"], t, given_boundaries, n_layers, o)
    if "swap" in costs and n_layers >= 4:
        effect, p, count = placement_test(costs["swap"], [0, n_layers - 2], range(n_layers - 1), o.n_permutations,
                                          o.seed)
        rows.append(row("swap", None, "edge_swap_effect", effect, p=p, n=count))
        middle = costs["swap"][1:-1]
        summary["swap"] |= {"edge_effect": effect, "edge_p": p, "placements": count,
                            "middle_median": float(np.median(middle)),
                            "edges": [float(costs["swap"][0]), float(costs["swap"][-1])],
                            "agrees": bool(p < ALPHA and min(costs["swap"][0], costs["swap"][-1]) > np.max(middle))}
    if jobs.prune:
        summary["pruning"] = _pruning(rows, row, m, jobs, o)
    return rows, summary


def _critical(m, ivs, skip: dict, n_layers: int, o: Options) -> dict:
    """Blocks whose skip raises NLL after BH; the split-half check: the skip raises the mean NLL in each half of
    the texts (a seeded split; the direction, as halves of a small sample cannot reach BH significance)."""
    q, mean = np.array(skip["q"]), np.array(skip["mean"])
    critical = [int(b) for b in np.flatnonzero((q < ALPHA) & (mean > 0))]
    order = np.random.default_rng(o.seed).permutation(len(m.intact_nll))
    halves = []
    for half in (order[: len(order) // 2], order[len(order) // 2 :]):
        halves.append({int(b) for b in np.flatnonzero(_stack(m, ivs, "delta_nll", half).mean(axis=1) > 0)})
    interior = [b for b in critical if 0 < b < n_layers - 1]
    top = sorted(interior, key=lambda b: -mean[b])[:5]
    return {"layers": critical, "interior": interior, "first": 0 in critical, "last": n_layers - 1 in critical,
            "first_cost": float(mean[0]), "last_cost": float(mean[-1]), "top_interior": top,
            "in_both_halves": sorted(set(critical) & halves[0] & halves[1]),
            "half_sizes": [len(order) // 2, len(order) - len(order) // 2]}


def _geometry(rows: list, row, skip_cost: np.ndarray, t: Transitions, n_layers: int) -> dict:
    """Spearman rho of each geometric measure with the skip cost over blocks, BH over the two; the check
    leaves the first and last block out. None (with ``note``) where rho is undefined: fewer than 3 blocks
    left, or a constant side."""
    angular = np.array([t.angular[b, b + 1] for b in range(n_layers)])
    out = {}
    for name, values in (("block_influence", t.influence), ("angular_distance", angular)):
        rho, p = spearman(values, skip_cost) if n_layers >= 3 else (np.nan, np.nan)
        inner_rho, inner_p = spearman(values[1:-1], skip_cost[1:-1]) if n_layers >= 5 else (np.nan, np.nan)
        out[name] = {"rho": defined(rho), "p": defined(p), "rho_interior": defined(inner_rho),
                     "p_interior": defined(inner_p)}
    q = bh_qvalues([np.nan if out[k]["p"] is None else out[k]["p"] for k in out])
    q_inner = bh_qvalues([np.nan if out[k]["p_interior"] is None else out[k]["p_interior"] for k in out])
    for (name, entry), qv, qi in zip(out.items(), q, q_inner, strict=True):
        entry |= {"q": defined(qv), "q_interior": defined(qi),
                  "predicts": bool(np.isfinite(qv) and qv < ALPHA and entry["rho"] > 0),
                  "predicts_interior": bool(np.isfinite(qi) and qi < ALPHA and entry["rho_interior"] > 0)}
        if entry["rho"] is None or entry["rho_interior"] is None:
            entry["note"] = ("Spearman rho is undefined with fewer than 3 blocks (5 with the first and last left "
                             "out) or a constant profile")
        rows.append(row("skip", None, f"spearman_{name}", entry["rho"], p=entry["p"], n=n_layers, q=qv))
        rows.append(row("skip", None, f"spearman_{name}_interior", entry["rho_interior"], p=entry["p_interior"],
                        n=max(0, n_layers - 2), q=qi))
    return out


def _boundaries(rows: list, row, skip_cost: np.ndarray, t: Transitions | None, given: list[int] | None,
                n_layers: int, o: Options) -> dict:
    """Permutation tests: is the skip cost at the blocks beside each set of boundaries above the other
    interior blocks'? Sets: the given boundaries (the atlas's), the change points of this run's Block
    Influence profile, and the phases study's thirds."""
    sets: dict[str, list[int]] = {}
    if given:
        sets["given"] = sorted(given)
    if t is not None and n_layers >= 6:
        sets["change_points"] = list(piecewise_linear_breaks(t.influence, 2).breaks)
    sets["thirds"] = [(n_layers + 1) // 3, 2 * (n_layers + 1) // 3]
    out = {}
    candidates = range(1, n_layers - 1)
    for name, states in sets.items():
        blocks = boundary_blocks(states, n_layers)
        if not blocks or len(blocks) >= n_layers - 2:
            out[name] = {"states": states, "blocks": blocks, "effect": None, "p": None, "placements": 0}
            continue
        effect, p, count = placement_test(skip_cost, blocks, candidates, o.n_permutations, o.seed)
        out[name] = {"states": states, "blocks": blocks, "effect": effect, "p": p, "placements": count,
                     "holds": bool(p < ALPHA and effect > 0)}
        rows.append(row("skip", None, "boundary_effect", effect, p=p, n=count, rule=name))
    return out


def _pruning(rows: list, row, m: SurgeryMeasures, jobs: SurgeryJobs, o: Options) -> dict:
    """Per k: each rule's cost with its interval, the random band, and the rule's rank among the random sets
    (k = 1: among every single block, exactly); its p of doing no better than a random set (rank / candidates),
    BH over k per rule; and one test over every k (:func:`~layerscope.measures.paired.rank_sum_p`)."""
    out: dict = {"k": sorted({k for _, k in jobs.prune}), "rules": {}}
    ks = out["k"]
    singles = np.array([per_text(m, iv)["delta_nll"].mean() for iv in jobs.per_layer.get("skip", [])])
    null = {k: np.array([per_text(m, iv)["delta_nll"].mean() for iv in jobs.prune[("random", k)]]) for k in ks}
    for rule in ("block_influence", "angular_distance"):
        entry: dict = {"mean": [], "ci_lo": [], "ci_hi": [], "p": [], "rank": [], "of": [], "layers": []}
        for k in ks:
            (iv,) = jobs.prune[(rule, k)]
            for metric in METRICS:
                mean, lo, hi, _ = paired_effects(_stack(m, [iv], metric), o.n_bootstrap, 1, o.seed, o.level)
                p = np.nan
                if metric == "delta_nll":
                    if k == 1 and len(singles):  # every single block is a candidate: the exact null
                        rank, of = int(np.sum(singles <= mean[0] + 1e-12)), len(singles)
                    else:
                        rank, of = 1 + int(np.sum(null[k] <= mean[0])), 1 + len(null[k])
                    p = rank / of
                    for key, value in (("mean", mean[0]), ("ci_lo", lo[0]), ("ci_hi", hi[0]), ("p", p),
                                       ("rank", rank), ("of", of)):
                        entry[key].append(float(value) if key not in ("rank", "of") else value)
                    entry["layers"].append(list(iv.layers))
                rows.append(row("prune", None, metric, mean[0], lo[0], hi[0], p, k=k, rule=rule,
                                layers=" ".join(map(str, iv.layers))))
        entry["q"] = bh_qvalues(entry["p"]).tolist()
        entry["better_than_random"] = [bool(q < ALPHA) for q in entry["q"]]
        entry["overall_p"] = rank_sum_p(entry["rank"], entry["of"])
        entry["better_overall"] = bool(entry["overall_p"] < ALPHA)
        rows.append(row("prune", None, "rank_sum_vs_random", float(sum(entry["rank"])), p=entry["overall_p"],
                        n=len(ks), rule=rule))
        out["rules"][rule] = entry
    band: dict = {"mean": [], "lo": [], "hi": []}
    for k in ks:
        for metric in METRICS:
            draws = np.array([per_text(m, iv)[metric].mean() for iv in jobs.prune[("random", k)]])
            lo, hi = percentile_ci(draws, o.level)
            rows.append(row("prune", None, metric, draws.mean(), lo, hi, k=k, rule="random", draws=len(draws)))
            if metric == "delta_nll":
                band["mean"].append(float(draws.mean()))
                band["lo"].append(lo)
                band["hi"].append(hi)
    out["random"] = band
    return out


def _per_language(row, kind: str, ivs, m: SurgeryMeasures, groups: Groups, o: Options, summary: dict) -> list[dict]:
    """Per language, delta NLL per layer; and low minus high resource per layer with a label permutation p."""
    rows = []
    per_lang = {}
    for code in dict.fromkeys(groups.lang):
        texts = np.flatnonzero(groups.lang == code)
        mean, lo, hi, p = paired_effects(_stack(m, ivs, "delta_nll", texts), o.n_bootstrap, o.n_permutations,
                                         o.seed, o.level)
        per_lang[str(code)] = mean.tolist()
        for layer, iv in enumerate(ivs):
            rows.append(row(kind, iv.layers[0], "delta_nll", mean[layer], lo[layer], hi[layer], p[layer],
                            n=len(texts), lang=str(code)))
    summary[kind]["per_language"] = per_lang
    if groups.low.any() and not groups.low.all():
        diff, lo, hi, p = group_difference(_stack(m, ivs, "delta_nll"), groups.low, o.n_bootstrap,
                                           o.n_permutations, o.seed, o.level)
        q = bh_qvalues(p)
        for layer, iv in enumerate(ivs):
            rows.append(row(kind, iv.layers[0], "delta_nll_low_minus_high", diff[layer], lo[layer], hi[layer],
                            p[layer], lang="low-high", q=q[layer]))
        summary[kind]["low_minus_high"] = {"mean": diff.tolist(), "q": q.tolist(),
                                           "low_hurt_more": [int(b) for b in np.flatnonzero((q < ALPHA) & (diff > 0))],
                                           "high_hurt_more": [int(b) for b in np.flatnonzero((q < ALPHA) & (diff < 0))]}
    return rows
