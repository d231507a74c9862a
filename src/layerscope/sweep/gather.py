"""Collect a sweep's finished task folders into one table and one row of numbers per task.

    table = gather_table(tasks)          # every task's table.csv; model, revision, step after the first column
    rows = task_rows(tasks, outcomes)    # per task: status, error, seconds, headline lines and numbers
    profile_rows(table, config)          # the layer-wise rows a sweep figure plots: one value per model, layer, metric
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..run import get_study
from ..run.pages import load_result
from ..study.config import StudyConfig
from .plan import Task

SIDE_COLUMNS = ("category", "rank", "phase", "layer_b", "model_b", "position_class", "check", "at_state")
"""Rows with a value here are broken down further than one number per layer (a layer pair's CKA, a position
class); sweep figures leave them out."""


def gather_table(tasks: list[Task]) -> pd.DataFrame:
    """The finished tasks' tables, one after another in task order; ``model`` is the model without its
    revision, followed by ``revision`` and ``step`` (the training step the revision names, if any)."""
    frames = []
    for task in tasks:
        if not task.done():
            continue
        table = pd.read_csv(task.folder / "table.csv")
        table["model"] = task.name
        table.insert(1, "revision", task.revision)
        table.insert(2, "step", pd.array([task.step] * len(table), dtype="Int64"))
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["model", "revision", "step"])


def task_rows(tasks: list[Task], outcomes: dict[str, dict]) -> list[dict]:
    """One summary row per task, in task order: what happened to it this time and, if its folder is
    complete, its layer count, headline lines and headline numbers."""
    rows = []
    for task in tasks:
        outcome = outcomes.get(task.spec, {})
        row = {"spec": task.spec, "model": task.name, "revision": task.revision, "step": task.step,
               "folder": f"tasks/{task.folder.name}", "status": outcome.get("status", "done" if task.done() else
                                                                             "not run"),
               "error": outcome.get("error"), "seconds": outcome.get("seconds")}
        if task.done():
            result = load_result(task.folder)
            study = get_study(result.study)
            (name, summary), = result.summary["models"].items()
            model = result.manifest["models"][0]
            row.update(n_layers=summary.get("n_layers"), weights_hash=model.get("weights_hash"),
                       dataset_hash=(result.manifest.get("dataset") or {}).get("hash"),
                       headline=study.headline(result), numbers=study.numbers(result, name))
        rows.append(row)
    return rows


def profile_rows(table: pd.DataFrame, config: StudyConfig) -> pd.DataFrame:
    """One value per (model, revision, step, metric, layer): the layer-wise rows of the study's main view
    (``Study.main_view``: e.g. the pooling, all pairs, the headline token set, the primary quantization; not the
    final layer after the final norm), averaged over any remaining breakdown such as languages and texts; with
    ``ci_lo``, ``ci_hi`` where the table has them and one row gave the value."""
    keys = ["model", "revision", "step", "metric", "layer"]
    if table.empty or "layer" not in table:  # no task finished: no rows, but the columns every caller reads
        return pd.DataFrame(columns=[*keys, "value", "depth"])
    keep = table["layer"].notna() & table["value"].notna()
    for column in SIDE_COLUMNS:
        if column in table:
            keep &= table[column].isna()
    main = get_study(config.study).main_view(config)
    for column, value in main.items():
        if column in table:
            keep &= table[column].isna() | (table[column] == value)
    if "stage" in table:  # the final layer after the model's final norm is not part of the profile
        keep &= table["stage"] != "post_norm"
    rows = table[keep].copy()
    rows["revision"] = rows["revision"].astype(object).fillna("")  # groupby drops NaN keys (all-NaN: float64)
    bounds = [column for column in ("ci_lo", "ci_hi") if column in rows]
    out = rows.groupby(keys, sort=False, dropna=False).agg(value=("value", "mean"), depth=("depth", "first"),
                                                           **{c: (c, "first") for c in bounds}, k=("value", "size"))
    out.loc[out["k"] > 1, bounds] = np.nan  # an interval only where one row gave the value, none for a mean
    out = out.drop(columns="k").reset_index()
    out["step"] = out["step"].astype("Int64")
    out["layer"] = out["layer"].astype(np.int64)
    return out
