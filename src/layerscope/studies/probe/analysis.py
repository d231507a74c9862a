"""One model's probe study: every label set decoded against a shallow reader, every contrast tested causally.

    summary, rows = analyse_model("smollm2-135m", 30, lm, tasks, vectors_of, options)

``vectors_of(task, pooling)`` gives the (n, L + 1, d) pooled vectors of a task's texts (state L before the final
norm). The per-category side contrasts share their causal passes (one pass edits every category's held-out texts
with its own category's vectors); every other contrast has its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...progress import note
from .causal_run import CHECKS, CausalOptions, Contrast, run_causal
from .causal_summary import causal_summary
from .decoding import DecodeOptions, decode_task, row
from .labels import LabelTask, token_ids

LEVEL = 0.05
"""Significance level of every verdict, on BH q over states."""


@dataclass(frozen=True)
class ProbeOptions:
    decode: DecodeOptions
    causal: CausalOptions | None
    pooling: str = "mean_no_pos0"


def with_model(model: str, n_layers: int, label_set: str, records: list[dict]) -> list[dict]:
    """Table rows: the model's columns added (``layer`` = ``state``; a surface row has none)."""
    out = []
    for r in records:
        s = r.get("state")
        out.append({"model": model, "layer": s, "n_layers": n_layers, "depth": None if s is None else s / n_layers,
                    "label_set": r.get("label_set", label_set), **{k: v for k, v in r.items() if k != "label_set"}})
    return out


def analyse_model(model: str, n_layers: int, lm, tasks: list[LabelTask],
                  vectors_of: Callable[[LabelTask, str], np.ndarray],
                  options: ProbeOptions) -> tuple[dict, list[dict]]:
    """Every label set's probes and, for a contrast, its direction's profile and the causal tests; (summary,
    rows)."""
    summary: dict = {"n_layers": n_layers, "pooling": options.pooling, "label_sets": {}}
    rows: list[dict] = []
    contrasts: list[Contrast] = []
    bos = lm.info.bos_token_id if lm.info.adds_bos else None
    check_poolings = [p for p in {pooling for pooling, _ in CHECKS.values()} if p != options.pooling]
    for task in tasks:
        note(f"probe {model}: {task.name}: probes at {n_layers + 1} states")
        X = vectors_of(task, options.pooling)
        checks = {p: vectors_of(task, p) for p in sorted(check_poolings)}
        try:
            entry, records, profiles = decode_task(task, X, checks, token_ids(lm.tokenizer, task.texts), bos,
                                                   options.decode)
        except ValueError as exc:  # too few groups of a class for the folds: this label set is not assessable
            summary.setdefault("skipped", {})[task.name] = str(exc)
            continue
        if task.causal:
            records += direction_records(task, X, vectors_of(task, "first"))
            if options.causal is not None and lm is not None:
                contrasts.append(Contrast(task, X, profiles["logreg"].chosen_c, checks))
        summary["label_sets"][task.name] = entry
        rows += with_model(model, n_layers, task.name, records)
    for group in contrast_groups(contrasts):
        out = run_causal(lm, group, options.causal, model)
        for con in group:
            name = con.task.name
            result = out[name]
            summary["label_sets"][name]["causal"] = causal_summary(result, options.causal)
            rows += with_model(model, n_layers, name, result["records"])
            for check in result["checks"]:
                rows += with_model(model, n_layers, name, check["records"])
    return summary, rows


def contrast_groups(contrasts: list[Contrast]) -> list[list[Contrast]]:
    """The per-category side contrasts together (one set of passes), every other contrast alone."""
    side = [c for c in contrasts if c.task.name.startswith("side:")]
    return ([side] if side else []) + [[c] for c in contrasts if not c.task.name.startswith("side:")]


def direction_records(task: LabelTask, X: np.ndarray, first: np.ndarray) -> list[dict]:
    """Per state: the cosine of the contrast's mass-mean direction with the mean position-0 state, and (pairs)
    the consistency of the pair differences."""
    from .decoding import consistency, pos0_cosine

    is_a = np.array([str(c) for c in task.labels.tolist()]) == task.classes[0]
    out = [row(s, "direction", "pos0_cosine", float(v), direction="mass_mean", n=len(is_a))
           for s, v in enumerate(pos0_cosine(X, first, is_a))]
    if task.partners is not None:
        out += [row(s, "direction", "consistency", float(v), direction="mass_mean", n=int(is_a.sum()))
                for s, v in enumerate(consistency(X, task.partners, is_a))]
    return out
