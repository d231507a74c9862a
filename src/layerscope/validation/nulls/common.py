"""What every null run shares: the false-alarm summary, the study's config and pair run, one row per
verdict, and the loop over instances (see :mod:`layerscope.validation.nulls`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...modes import NOTEBOOKS
from ...stats import wilson
from ...studies.shared.inputs import PairRun
from ...study.config import StudyConfig
from ...study.result import StudyResult
from ...study.settings import ConfigError
from ...study.verdicts import HOLDS_FRAGILE, HOLDS_ROBUST, NOT_ASSESSABLE, Verdict

PRINTED = (HOLDS_ROBUST, HOLDS_FRAGILE)
"""Verdict-table statuses under which a study prints its claim."""
ROW_KEYS = ("study", "null", "verdict", "instance", "printed")
"""What :func:`false_alarm_rows` needs in each row."""


# -- the summary ------------------------------------------------------------------------------------------------

def false_alarm_rows(rows: Iterable[dict], level: float = 0.95) -> list[dict]:
    """Per (study, null, verdict), in the order first seen: ``instances``, ``false_alarms`` (rows printed),
    ``rate``, its :func:`wilson` interval ``ci_lo``, ``ci_hi`` at ``level``, ``not_assessable`` (rows with
    ``assessed`` False, or without it whose status is "not assessable"), ``rate_assessed`` (false alarms over the
    assessed instances; None when none was) and ``seconds_per_instance`` (the mean of the rows' ``seconds``, where
    they have one)."""
    groups: dict[tuple, list[dict]] = {}
    seen: set[tuple] = set()
    for row in rows:
        missing = [key for key in ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"a null row lacks {', '.join(missing)}; pass the rows a *_null function returned")
        if not isinstance(row["printed"], (bool, np.bool_)):
            raise ValueError(f"row 'printed' must be True or False, not {row['printed']!r}")
        key = (row["study"], row["null"], row["verdict"])
        instance = (*key, row.get("seed"), row["instance"])
        if instance in seen:
            raise ValueError(f"instance {row['instance']} (seed {row.get('seed')}) of {row['study']} {row['verdict']!r}"
                             " appears twice; pass each null run's rows once (runs of other seeds may be joined)")
        seen.add(instance)
        groups.setdefault(key, []).append(row)
    out = []
    for (study, null, verdict), members in groups.items():
        n, k = len(members), sum(bool(r["printed"]) for r in members)
        lo, hi = wilson(k, n, level)
        seconds = [r["seconds"] for r in members if r.get("seconds") is not None]
        unassessed = sum(not r.get("assessed", r.get("status") != NOT_ASSESSABLE) for r in members)
        out.append({"study": study, "null": null, "verdict": verdict, "instances": n, "false_alarms": k,
                    "rate": k / n, "ci_lo": lo, "ci_hi": hi, "level": level, "not_assessable": unassessed,
                    "rate_assessed": k / (n - unassessed) if n > unassessed else None,
                    "seconds_per_instance": float(np.mean(seconds)) if seconds else None})
    return out


def is_printed(status: str | None) -> bool:
    """Whether a verdict-table status prints its claim ("holds and robust" or "holds but fragile")."""
    return status in PRINTED


# -- running a study on relabelled data -------------------------------------------------------------------------

def study_config(study: str, lm_or_spec: Any, settings: dict) -> StudyConfig:
    """The config a study's own ``run`` would read, default mode only (notebooks mode prints untested labels)."""
    config = StudyConfig(study, models=(lm_or_spec,), **settings)
    if config.compat == NOTEBOOKS:
        raise ConfigError("a null run measures the default mode's tested verdicts; notebooks mode prints the "
                          "notebooks' labels untested (all 'not assessable'): leave compat out")
    return config


def pair_run(config: StudyConfig) -> tuple[PairRun, float]:
    """The one model's :class:`PairRun` on the study's pairs, extracted once as the study's ``run`` extracts it
    (through the activation cache), and the seconds it took (load and extraction)."""
    from ...studies.shared.categories import study_pairs
    from ...studies.shared.inputs import pair_runs

    start = time.perf_counter()
    pairs = study_pairs(config.dataset, getattr(config.settings, "drop_category", None))
    runs = pair_runs(config, pairs, {})
    try:
        run = next(runs)
    finally:
        runs.close()
    return run, time.perf_counter() - start


def result_of(study: str, config: StudyConfig, summary: dict) -> StudyResult:
    """A result holding ``summary``, as a study's ``verdicts`` reads it (no manifest, no table)."""
    return StudyResult(study=study, config=config.to_dict(), manifest={}, summary=summary, table=pd.DataFrame())


def verdict_row(verdict: str, printed: bool, v: Verdict | None = None, label: Any = None, value: Any = None,
                assessed: bool = True) -> dict:
    """One verdict of one instance: ``printed``, ``assessed`` (False where the study could not test it: a verdict
    table's "not assessable", or an undetermined label) and, from the verdict table where it is in it, its status,
    claim and key text."""
    return {"verdict": verdict, "printed": bool(printed),
            "assessed": bool(assessed) if v is None else v.status != NOT_ASSESSABLE,
            "status": v.status if v is not None else None, "label": label, "value": value,
            "claim": v.claim if v is not None else None, "key": v.key if v is not None else None}


def check_budget(n_null: int, seed: int, max_seconds: float | None) -> None:
    """``ConfigError`` naming the fix for a bad ``n_null``, ``seed`` or ``max_seconds``, before any model loads."""
    if isinstance(n_null, bool) or int(n_null) != n_null or n_null < 1:
        raise ConfigError(f"n_null must be a whole number of at least 1 (relabelings to run); got {n_null!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ConfigError(f"seed must be a whole number of 0 or more; got {seed!r}")
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
        raise ConfigError(f"max_seconds must be a positive number of seconds, or None for no limit; got "
                          f"{max_seconds!r}")


def run_instances(study: str, null: str, model: str, n_null: int, seed: int, setup_s: float,
                  instance: Callable[[np.random.Generator], list[dict]], max_seconds: float | None = None,
                  first: int = 0) -> list[dict]:
    """``instance(np.random.default_rng([seed, i]))`` for ``first`` <= i < ``first + n_null``, each row with the
    study, null, instance, seed, model, the instance's seconds and the setup's; with ``max_seconds``, no instance
    starts once the instances so far took that long (the first always runs)."""
    check_budget(n_null, seed, max_seconds)
    rows, spent = [], 0.0
    for i in range(int(first), int(first) + int(n_null)):
        if max_seconds is not None and i > first and spent >= max_seconds:
            break
        start = time.perf_counter()
        verdicts = instance(np.random.default_rng([int(seed), i]))
        seconds = time.perf_counter() - start
        spent += seconds
        rows += [{"study": study, "null": null, "instance": i, "seed": int(seed), "model": model, **v,
                  "seconds": seconds, "setup_s": setup_s} for v in verdicts]
    return rows



def summary_text(summary: Sequence[dict]) -> str:
    """The rows of :func:`false_alarm_rows` as a plain table, one line per verdict."""
    lines = []
    for r in summary:
        seconds = "" if r["seconds_per_instance"] is None else f", {r['seconds_per_instance']:.2f} s per instance"
        lines.append(f"{r['study']} | {r['null']} | {r['verdict']} | {r['false_alarms']} / {r['instances']} = "
                     f"{r['rate']:.3f} "
                     f"[{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] ({r['not_assessable']} not assessable{seconds})")
    return "\n".join(lines)
