"""One model's probe study: probes per state for every label set, steering for every two-class one (the pair
side; a labels file, category or language set with two classes), and the two profiles side by side.

    summary, rows = analyse_model(lm, info, tasks, states_of, options)

``states_of(task)`` gives the (n, L + 1, d) pooled vectors of a task's texts (state L before the final norm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ...measures.probes import ProbeProfile, probe_states
from ...progress import note
from ...study.finite import defined
from .labels import LabelTask
from .steering import SteerOptions, steer_states

METHODS = ("logreg", "mass_mean")
LEVEL = 0.05
"""Significance level of every verdict, on BH q over states."""


@dataclass(frozen=True)
class ProbeOptions:
    folds: int
    n_bootstrap: int
    n_permutations: int
    seed: int
    ci_level: float
    steer: SteerOptions | None


def row(model: str, n_layers: int, state: int, task: str, method: str, metric: str, value, ci=(None, None),
        p=None, q=None, n=None, **extra) -> dict:
    return {"model": model, "layer": state, "n_layers": n_layers, "depth": state / n_layers, "state": state,
            "label_set": task, "method": method, "metric": metric, "value": value, "ci_lo": ci[0],
            "ci_hi": ci[1], "p": p, "q": q, "n": n, **extra}


def probe_rows(model: str, n_layers: int, task: str, prof: ProbeProfile) -> list[dict]:
    out = []
    for s in range(len(prof.accuracy)):
        common = {"n": prof.n}
        out += [row(model, n_layers, s, task, prof.method, "accuracy", prof.accuracy[s], prof.accuracy_ci[s],
                    prof.p[s], prof.q[s], **common),
                row(model, n_layers, s, task, prof.method, "auroc", prof.auroc[s], prof.auroc_ci[s], **common),
                row(model, n_layers, s, task, prof.method, "selectivity", prof.selectivity[s],
                    prof.selectivity_ci[s], **common)]
        if prof.method == "logreg":  # the control task is fitted with the logreg probe's folds and family
            out.append(row(model, n_layers, s, task, "control", "accuracy", prof.control_accuracy[s],
                           prof.control_ci[s], **common))
    return out


def probe_summary(prof: ProbeProfile) -> dict:
    best = int(np.nanargmax(prof.accuracy))
    return {"method": prof.method, "classes": list(prof.classes), "chance": prof.chance, "n": prof.n,
            "n_groups": prof.n_groups, "best_state": best, "best_accuracy": float(prof.accuracy[best]),
            "best_ci": [float(x) for x in prof.accuracy_ci[best]], "best_q": float(prof.q[best]),
            "best_selectivity": float(prof.selectivity[best]),
            "best_selectivity_ci": [float(x) for x in prof.selectivity_ci[best]],
            "decodable_from": prof.decodable_from,
            "decodable_ci": list(prof.decodable_ci) if prof.decodable_ci is not None else None,
            "significant_states": [int(s) for s in np.flatnonzero(prof.q < LEVEL)]}


def steer_rows(model: str, n_layers: int, task: str, out: dict) -> list[dict]:
    rows = []
    split = "in-sample" if out["in_sample"] else "held-out"
    for s in out["states"]:
        for j, alpha in enumerate(out["alphas"]):
            first = j == 0
            rows.append(row(model, n_layers, s, task, "steer", "effect", out["effect"][s, j],
                            (out["ci_lo"][s, j], out["ci_hi"][s, j]), out["p"][s] if first else None,
                            out["q"][s] if first else None, out["n_test"], alpha=alpha, split=split,
                            p_rank=out["p_rank"][s] if first else None))
            rows.append(row(model, n_layers, s, task, "steer", "effect", out["effect_neg"][s, j],
                            n=out["n_test"], alpha=-alpha, split=split))
        rows.append(row(model, n_layers, s, task, "random_band", "effect", (out["band_lo"][s] + out["band_hi"][s]) / 2,
                        (out["band_lo"][s], out["band_hi"][s]), n=out["n_test"], alpha=out["alphas"][0],
                        split=split))
    return rows


def steer_summary(out: dict, accuracy: np.ndarray) -> dict:
    chosen = out["states"]
    effect, q = out["effect"][:, 0], out["q"]
    flips = np.sign(out["effect_neg"][:, 0]) == -np.sign(effect)
    used = [int(s) for s in chosen if q[s] < LEVEL and flips[s]]
    best = int(chosen[int(np.argmax(np.abs(effect[chosen])))])
    acc, eff = accuracy[chosen], effect[chosen]
    constant = np.ptp(acc) == 0 or np.ptp(eff) == 0  # rank correlation undefined: not assessable
    rho = stats.spearmanr(acc, eff) if not constant else None
    return {"alphas": list(out["alphas"]), "classes": list(out["classes"]), "states": [int(s) for s in chosen],
            "n_test_pairs": out["n_test"], "n_train_pairs": out["n_train"],  # pairs or, for other labels, groups
            "in_sample": bool(out["in_sample"]), "used_states": used,
            "best_state": best, "best_effect": float(effect[best]),
            "best_ci": [float(out["ci_lo"][best, 0]), float(out["ci_hi"][best, 0])], "best_q": float(q[best]),
            "best_flips_sign": bool(flips[best]),
            "rho_probe_steer": None if rho is None else defined(float(rho.statistic)),
            "rho_p": None if rho is None else defined(float(rho.pvalue)),
            "blocks_run": out["blocks_run"]}  # decoder blocks the steering passes ran (fewer with prefix reuse)


def analyse_model(model: str, n_layers: int, lm, tasks: list[LabelTask],
                  states_of: Callable[[LabelTask], np.ndarray], options: ProbeOptions) -> tuple[dict, list[dict]]:
    """Every label set's probes (both methods) and, for a two-class one, steering; (summary, rows)."""
    summary: dict = {"n_layers": n_layers, "label_sets": {}}
    rows: list[dict] = []
    for task in tasks:
        X = states_of(task)
        note(f"probe {model}: {task.name}: probes at {X.shape[1]} states ({', '.join(METHODS)})")
        try:
            profiles = {m: probe_states(X, task.labels, task.groups, method=m, folds=options.folds,
                                        n_bootstrap=options.n_bootstrap, n_permutations=options.n_permutations,
                                        seed=options.seed, ci_level=options.ci_level) for m in METHODS}
        except ValueError as exc:  # too few groups of a class for the folds: this label set is not assessable
            summary.setdefault("skipped", {})[task.name] = str(exc)
            continue
        entry: dict = {"source": task.source, "probes": {m: probe_summary(p) for m, p in profiles.items()}}
        for prof in profiles.values():
            rows += probe_rows(model, n_layers, task.name, prof)
        if task.steerable and options.steer is not None and lm is not None:
            out = steer_states(lm, X, list(task.texts), task.labels, task.groups, options.steer)
            rows += steer_rows(model, n_layers, task.name, out)
            entry["steering"] = steer_summary(out, profiles["logreg"].accuracy)
            entry["contrast"] = contrast(profiles["logreg"], out)
        summary["label_sets"][task.name] = entry
    return summary, rows


def contrast(prof: ProbeProfile, out: dict) -> dict:
    """Among the steered states: where the property is decodable (probe q < level) but steering is null
    (q >= level), and vice versa."""
    decodable = {s for s in out["states"] if prof.q[s] < LEVEL}
    used = {s for s in out["states"] if out["q"][s] < LEVEL}
    return {"decodable_not_used": sorted(int(s) for s in decodable - used),
            "used_not_decodable": sorted(int(s) for s in used - decodable)}
