"""No verdict from a non-finite number: the check every study's result passes before anyone sees it.

    check_result(result)                               # run_study does this for every study
    check_rows("divergence", rows, ("r_ua_pref",))     # an analysis, before it computes a verdict from rows
    check_values("anisotropy", "tiny", "layer 2 token states", states)   # any array or number

A deliberate absence is ``None`` in a summary, with its reason beside it (the ablation's
``disparity_note`` when the high-resource degradation is below 0.001; ``std_peak_pct`` with one
model), or a table cell a mode does not compute (CI columns in notebooks mode, a row with ``n`` = 0).
Any other NaN or inf, in the summary or in a table row of a metric a verdict is computed from,
raises :class:`NonFiniteError` naming the study, the model and the layer and metric where it sits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import LayerscopeError
from . import hooks
from .result import StudyResult

FIX = ("no verdict is computed from it; the model's activations or NLL overflowed or hold NaN there: run it in "
       "float32 (--dtype float32) and check its weights and the texts")
LABELS = ("pooling", "tokens", "variant", "config", "lang", "sample", "category", "subset", "stage", "phase", "rank")
"""Row fields that say where a number sits, besides model, layer and metric."""


class NonFiniteError(LayerscopeError):
    """A number a verdict or headline would be computed from is NaN or inf."""


def verdict_metrics(study: str) -> tuple[str, ...]:
    """The table metrics whose values ``study``'s verdicts and headlines are computed from
    (``Study.verdict_metrics``)."""
    try:
        return hooks.study_class(study).verdict_metrics
    except LayerscopeError:  # an unknown study: nothing to check
        return ()


def check_result(result: StudyResult) -> StudyResult:
    """``result``, once its summary holds no NaN or inf and its table none in a verdict metric's value."""
    check_summary(result.study, result.summary)
    table = result.table
    metrics = verdict_metrics(result.study)
    if len(table) and metrics:
        values = pd.to_numeric(table["value"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        n = pd.to_numeric(table["n"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = table["metric"].isin(metrics).to_numpy() & ~np.isfinite(values) & (n != 0)
        if bad.any():
            check_rows(result.study, [table[bad].iloc[0].to_dict()], metrics)
    return result


def check_summary(study: str, summary: Mapping[str, Any]) -> None:
    """Every number in ``summary`` is finite (``None`` is an absence, not a number)."""
    for key, value in summary.items():
        if key == "models" and isinstance(value, Mapping):
            for model, body in value.items():
                _raise_at(study, str(model), _first_non_finite(body, ""))
        else:
            _raise_at(study, None, _first_non_finite(value, key))


def check_rows(study: str, rows: Iterable[Mapping[str, Any]], metrics: Iterable[str] | None = None) -> None:
    """Every row (of ``metrics``, if given) has a finite ``value``, except rows with ``n`` = 0 (nothing to compute
    from)."""
    wanted = None if metrics is None else set(metrics)
    for row in rows:
        if wanted is not None and row.get("metric") not in wanted or _is_zero(row.get("n")):
            continue
        value = row.get("value")
        if value is None or _finite(value):
            continue
        where = [] if _missing(row.get("layer")) else [f"layer {int(row['layer'])}"]
        where.append(f"metric {row.get('metric')}")
        where += [f"{label} {row[label]}" for label in LABELS if not _missing(row.get(label))]
        raise _error(study, row.get("model"), ", ".join(where), value)


def check_values(study: str, model: str | None, where: str, values: Any) -> None:
    """``values`` (a number or an array) is all finite; ``where`` names it, e.g. ``"layer 3 token states"``."""
    array = np.asarray(values)
    if array.dtype.kind in "fc" and not np.isfinite(array).all():
        bad = array[~np.isfinite(array)]
        count = f" ({bad.size} of {array.size} entries)" if array.size > 1 else ""
        raise _error(study, model, where + count, bad.flat[0])


def defined(x: float | None) -> float | None:
    """``x``, or None for an undefined statistic (NaN) whose inputs were checked finite: a correlation with a constant
    side, a statistic of an empty set. Summaries hold None there, so the guard tells it from a failed computation."""
    return None if x is None or not math.isfinite(x) else float(x)


def _error(study: str, model: Any, where: str, value: Any) -> NonFiniteError:
    who = f"model {model}, " if not _missing(model) else ""
    return NonFiniteError(f"{study}: {who}{where} is {float(value)}, not a finite number, so {FIX}")


def _raise_at(study: str, model: str | None, found: tuple[str, Any] | None) -> None:
    if found is not None:
        path, value = found
        raise _error(study, model, f"summary field {path}", value)


def _first_non_finite(obj: Any, path: str) -> tuple[str, Any] | None:
    """(path, value) of the first NaN or inf in nested dicts, lists and arrays; None when there is none."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if found := _first_non_finite(value, f"{path}.{key}" if path else str(key)):
                return found
    elif isinstance(obj, (list, tuple, np.ndarray)):
        for i, value in enumerate(obj):
            if found := _first_non_finite(value, f"{path}[{_item_label(value, i)}]"):
                return found
    elif isinstance(obj, (float, np.floating)) and not math.isfinite(obj):
        return path, obj
    return None


def _item_label(item: Any, i: int) -> str:
    """``pooling=mean`` for a list entry that names itself, else its index."""
    if isinstance(item, Mapping):
        for key in ("pooling", "config", "model", "layer", "lang"):
            if key in item and isinstance(item[key], (str, int)):
                return f"{key}={item[key]}"
    return str(i)


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:
        return True  # not a number: nothing a verdict computes with


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _is_zero(value: Any) -> bool:
    return not _missing(value) and value == 0
