"""What the prefix-reuse benchmarks share: one study run twice through the CLI, with prefix reuse and with
``--no-prefix-reuse``, each in its own process, and the two tables compared number by number.

    runs = run_both("surgery", "smollm2-135m", extra=[], keep=None)
    runs.seconds["on"], runs.results["off"]["manifest"]["timings"], largest_relative_difference(*runs.tables.values())
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd


@dataclass
class Runs:
    seconds: dict[str, float]
    """Wall time of each run ("on": prefix reuse, "off": whole passes)."""
    results: dict[str, dict]
    """Each run's result.json."""
    tables: dict[str, pd.DataFrame]
    """Each run's table.csv."""


def run_cli(study: str, model: str, out: Path, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from layerscope.cli import main; main()", "run", study, "--model",
                    model, "--out", str(out), *extra], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_both(study: str, model: str, extra: list[str], keep: str | None) -> Runs:
    """``layerscope run STUDY --model MODEL EXTRA`` with prefix reuse, then with ``--no-prefix-reuse``; the run
    folders go under ``keep`` (default: a temporary folder, removed)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(keep or tmp)
        seconds = {"on": run_cli(study, model, folder / "on", *extra),
                   "off": run_cli(study, model, folder / "off", "--no-prefix-reuse", *extra)}
        results = {name: json.loads((folder / name / "result.json").read_text()) for name in seconds}
        tables = {name: pd.read_csv(folder / name / "table.csv") for name in seconds}
    return Runs(seconds, results, tables)


def largest_relative_difference(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Over every numeric column both tables hold, row by row (the same rows in the same order and the same text
    columns, or inf)."""
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return float("inf")
    keys = [c for c in a.columns if not pd.api.types.is_numeric_dtype(a[c])]
    if not a[keys].fillna("").equals(b[keys].fillna("")):
        return float("inf")
    numeric = [c for c in a.columns if c not in keys]
    x, y = a[numeric].to_numpy(dtype=float), b[numeric].to_numpy(dtype=float)
    if not np.array_equal(np.isfinite(x), np.isfinite(y)):
        return float("inf")
    both = np.isfinite(x)
    scale = np.maximum(np.abs(x[both]), 1e-12)
    return float(np.max(np.abs(x[both] - y[both]) / scale)) if both.any() else 0.0
