"""Time the probe study's steering with prefix reuse against whole passes.

    .venv/bin/python benchmarks/steering_reuse.py [--model smollm2-135m] [--keep DIR] [-- extra run options]

Runs ``layerscope run probe --label-sets side --model M --n-permutations 20 --n-bootstrap 200`` (the bundled
pairs, the default steering: 8 held-out pairs, every third state, alpha 1 and -1, 20 random directions) twice,
each in its own process: with prefix reuse (the default) and with ``--no-prefix-reuse``. Prints both wall times,
the time of the steering alone (the manifest's ``steering_s``), their ratios, and the largest relative difference
of any number in table.csv (target: float tolerance, <= 1e-5; the probes do not depend on the switch, so the
steering rows carry any difference). The activation cache is shared, so the first run may extract the pairs and
the second reads them: compare ``steering_s``, not the wall times, when the cache was cold.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

SHORT = ["--label-sets", "side", "--n-permutations", "20", "--n-bootstrap", "200"]


def run_cli(model: str, out: Path, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from layerscope.cli import main; main()", "run", "probe", "--model",
                    model, *SHORT, "--out", str(out), *extra], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def largest_relative_difference(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Over every numeric column both tables hold, row by row (the same rows in the same order, or inf)."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--keep", default=None, help="write both run folders here (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more `layerscope run probe` options, after --")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        t_on = run_cli(args.model, folder / "on", *args.extra)
        t_off = run_cli(args.model, folder / "off", "--no-prefix-reuse", *args.extra)
        results = {name: json.loads((folder / name / "result.json").read_text()) for name in ("on", "off")}
        tables = {name: pd.read_csv(folder / name / "table.csv") for name in ("on", "off")}
    steering = {name: r["manifest"]["timings"]["steering_s"] for name, r in results.items()}
    summary = next(iter(results["on"]["summary"]["models"].values()))
    st = summary["label_sets"]["side"]["steering"]
    print(f"model {args.model}: {summary['n_layers']} blocks; steering at {len(st['states'])} states on "
          f"{st['n_test_pairs']} held-out pairs, alphas {st['alphas']} and their negatives")
    print(f"whole run:  reuse {t_on:7.1f} s   no reuse {t_off:7.1f} s   ratio {t_off / t_on:.2f}x")
    print(f"steering_s: reuse {steering['on']:7.1f} s   no reuse {steering['off']:7.1f} s   ratio "
          f"{steering['off'] / steering['on']:.2f}x")
    print(f"largest relative difference in table.csv: {largest_relative_difference(tables['on'], tables['off']):.1e}"
          "   (target <= 1e-5)")


if __name__ == "__main__":
    main()
