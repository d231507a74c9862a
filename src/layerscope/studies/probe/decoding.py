"""The decodable half of the probe study: per label set, probes against a shallow reader, the control task, the
checks that can flip "decodable", and (the pooled side) transfer across categories.

    entry, rows, profiles = decode_task(task, X, {"mean": Xm, "mean_no_massive": Xn}, ids, bos_id, options)
    entry["probes"]["logreg"]["decodable_from"], entry["surface"], entry["control"], entry["checks"]

A state is decodable when its probe's permutation q < 0.05 and its accuracy beats the best shallow reader (a
bag of tokens plus length, logistic, and the state-0 probe) with a group-bootstrap interval of the gain above 0
(:mod:`layerscope.measures.probes`). ``decodable_from`` is the first state from which every later state is; the
plateau (the old rule: accuracy within the best state's interval from a state on) is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...measures.probe_controls import surface_baseline, surface_features
from ...measures.probe_transfer import transfer_states
from ...measures.probes import ProbeProfile, probe_states
from .labels import LabelTask, control_units

METHODS = ("logreg", "mass_mean")
LEVEL = 0.05
PROBE_CHECKS = {"mean": "with position 0 (pooling mean)",
                "mean_no_massive": "without massive-activation tokens (pooling mean_no_massive)"}
"""{pooling: check name}: the logistic probe again on these poolings (its C per state as chosen on the main one)."""


@dataclass(frozen=True)
class DecodeOptions:
    folds: int
    n_bootstrap: int
    n_permutations: int
    seed: int
    ci_level: float
    control_seeds: int = 10


def row(state, method, metric, value, ci=(None, None), p=None, q=None, n=None, **extra) -> dict:
    return {"state": state, "method": method, "metric": metric, "value": value, "ci_lo": ci[0], "ci_hi": ci[1],
            "p": p, "q": q, "n": n, **extra}


def _f(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def probe_rows(prof: ProbeProfile, check: str = "") -> list[dict]:
    extra = {"check": check} if check else {}
    out = []
    for s in range(len(prof.accuracy)):
        common = {"n": prof.n, **extra}
        out += [row(s, prof.method, "accuracy", prof.accuracy[s], prof.accuracy_ci[s], prof.p[s], prof.q[s],
                    at_floor=bool(prof.at_floor[s]), **common),
                row(s, prof.method, "gain_over_surface", prof.gain[s], prof.gain_ci[s],
                    decodable=bool(prof.decodable[s]), **common)]
        if not check:
            out.append(row(s, prof.method, "auroc", prof.auroc[s], prof.auroc_ci[s], **common))
        if prof.control_possible and not check:
            out += [row(s, prof.method, "selectivity", prof.selectivity[s], prof.selectivity_ci[s], **common),
                    row(s, "control", "accuracy", prof.control_accuracy[s], prof.control_ci[s], **common,
                        direction=prof.method)]
    return out


def probe_summary(prof: ProbeProfile) -> dict:
    best = int(np.nanargmax(prof.accuracy))
    decodable = [int(s) for s in np.flatnonzero(prof.decodable)]
    return {"method": prof.method, "classes": list(prof.classes), "chance": prof.chance, "n": prof.n,
            "n_groups": prof.n_groups, "best_state": best, "best_accuracy": float(prof.accuracy[best]),
            "best_ci": [float(x) for x in prof.accuracy_ci[best]], "best_q": float(prof.q[best]),
            "best_gain": float(prof.gain[best]), "best_gain_ci": [_f(x) for x in prof.gain_ci[best]],
            "best_selectivity": _f(prof.selectivity[best]),
            "best_selectivity_ci": [_f(x) for x in prof.selectivity_ci[best]],
            "decodable_states": decodable, "decodable_from": prof.decodable_from,
            "plateau_from": prof.plateau_from,
            "plateau_ci": list(prof.plateau_ci) if prof.plateau_ci is not None else None,
            "significant_states": [int(s) for s in np.flatnonzero(prof.q < LEVEL)],
            "p_floor": float(prof.p_floor), "floor_states": [int(s) for s in np.flatnonzero(prof.at_floor)],
            "last_state": len(prof.accuracy) - 1}


def decode_task(task: LabelTask, X: np.ndarray, checks: dict[str, np.ndarray], ids: list[list[int]],
                bos_id: int | None, options: DecodeOptions) -> tuple[dict, list[dict], dict[str, ProbeProfile]]:
    """One label set's probes, surface baseline, control task, checks and transfer: (summary entry, rows without
    the model's columns, {method: profile})."""
    common = {"folds": options.folds, "n_bootstrap": options.n_bootstrap, "n_permutations": options.n_permutations,
              "seed": options.seed, "ci_level": options.ci_level}
    surface = surface_baseline(surface_features(ids), task.labels, task.groups, folds=options.folds,
                               seed=options.seed)
    units = control_units(task, ids, bos_id)
    profiles = {m: probe_states(X, task.labels, task.groups, method=m, surface=surface, units=units,
                                control_seeds=options.control_seeds, **common) for m in METHODS}
    logreg = profiles["logreg"]
    rows = [r for prof in profiles.values() for r in probe_rows(prof)]
    rows.append(row(None, "surface", "accuracy", logreg.surface_accuracy, logreg.surface_ci, n=logreg.n,
                    best=logreg.best_surface))
    entry = {"source": task.source, "kind": task.kind, "contrast": task.contrast, "classes": list(task.classes),
             "surface": {"accuracy": _f(logreg.surface_accuracy), "ci": [_f(x) for x in logreg.surface_ci],
                         "state0_accuracy": float(logreg.accuracy[0]), "best": logreg.best_surface},
             "control": {"possible": bool(logreg.control_possible), "recurrence": _f(logreg.control_recurrence),
                         "unit": "the first token where a text parts from its pair partner" if task.partners
                         is not None else "the text's first token", "seeds": options.control_seeds},
             "probes": {m: probe_summary(p) for m, p in profiles.items()}, "checks": []}
    main_from = logreg.decodable_from
    for pooling, name in PROBE_CHECKS.items():
        if pooling not in checks or not logreg.decodable.any():  # a check can only flip a verdict that holds
            continue
        prof = probe_states(checks[pooling], task.labels, task.groups, method="logreg", surface=surface, units=None,
                            fixed_c=logreg.chosen_c, **common)
        rows += probe_rows(prof, check=name)
        entry["checks"].append({"check": name, "decodable_from": prof.decodable_from,
                                "decodable_states": [int(s) for s in np.flatnonzero(prof.decodable)],
                                "flips": (prof.decodable_from is None) != (main_from is None)})
    mass = profiles["mass_mean"]
    entry["checks"].append({"check": "with the mass-mean probe", "decodable_from": mass.decodable_from,
                            "decodable_states": [int(s) for s in np.flatnonzero(mass.decodable)],
                            "flips": (mass.decodable_from is None) != (main_from is None)})
    if logreg.control_possible:
        best = int(np.nanargmax(logreg.accuracy))
        entry["checks"].append({"check": "against the control task", "selectivity": _f(logreg.selectivity[best]),
                                "flips": main_from is not None and not logreg.selectivity_ci[best, 0] > 0})
    if task.domains is not None:
        for method in METHODS:
            prof = transfer_states(X, task.labels, task.groups, task.domains, method=method,
                                   c=logreg.chosen_c if method == "logreg" else None,
                                   n_bootstrap=options.n_bootstrap, seed=options.seed, ci_level=options.ci_level)
            for k, domain in enumerate(prof.domains):
                rows += [{**row(s, method, "transfer_accuracy", prof.accuracy[k, s], prof.ci[k, s], n=int(prof.n[k])),
                          "label_set": f"side:{domain}"} for s in range(prof.accuracy.shape[1])]
    return entry, rows, profiles


def consistency(X: np.ndarray, partners: np.ndarray, is_a: np.ndarray) -> np.ndarray:
    """(S,) per state, the mean cosine between the pair differences h_A - h_B of every two pairs: near 1 when the
    pairs differ along one direction (a steering direction can work), near 0 when each differs its own way."""
    a = np.flatnonzero(is_a & (partners >= 0))
    diffs = X[a].astype(np.float64) - X[partners[a]].astype(np.float64)           # (P, S, d)
    unit = diffs / np.maximum(np.linalg.norm(diffs, axis=2, keepdims=True), 1e-30)
    gram = np.einsum("psd,qsd->spq", unit, unit)                                   # (S, P, P)
    n = len(a)
    return (gram.sum(axis=(1, 2)) - np.trace(gram, axis1=1, axis2=2)) / (n * (n - 1))


def pos0_cosine(X: np.ndarray, first: np.ndarray, is_a: np.ndarray) -> np.ndarray:
    """(S,) per state, the cosine of the mass-mean direction (all rows) with the mean position-0 state: near +-1
    when the direction is the attention sink's."""
    v = X[is_a].astype(np.float64).mean(axis=0) - X[~is_a].astype(np.float64).mean(axis=0)   # (S, d)
    sink = first.astype(np.float64).mean(axis=0)
    denom = np.linalg.norm(v, axis=1) * np.linalg.norm(sink, axis=1)
    return np.where(denom > 0, (v * sink).sum(axis=1) / np.where(denom > 0, denom, 1.0), np.nan)
