"""Check that extraction time per text stays flat and memory stays bounded as the number of texts grows.

    .venv/bin/python benchmarks/extract_scale.py [--sizes 1000 4000 16000] [--model smollm2-135m] [--seed 0]

Per size, in a fresh child process (this script run again with a hidden flag), on the CPU:
  1. load the model; its RSS (psutil) is the baseline
  2. ``extract`` the texts (every layer, the five default poolings, NLL) into a fresh temp cache folder
  3. the divergence-style analysis per layer, reading one layer of the "mean" pooling at a time: per category,
     uniformity of its A statements minus that of its B statements, then Pearson r over categories with the
     category's mean preference NLL(B) - NLL(A)
  4. report the times, the peak RSS (``ru_maxrss``) and the store's size on disk; the folder is then removed
The texts are pairs recombined from the bundled statements: a new pair joins the first part of one pair's A and
B statements with the last part of another pair's of the same category (the same cut for A and B, deterministic
with ``--seed``), so every pair keeps its category and its A/B contrast.

Checks: time per text within 20% across sizes (max / min <= 1.20), and peak RSS at the largest size at most
1.3x the peak at the smallest. The store takes about n_texts x (n_layers + 2) x d x 4 bytes x 5 poolings
(16,000 SmolLM2 texts: about 5.7 GB), in the system temp folder (``TMPDIR``). Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD_FLAG = "--child-size"
RESULT_PREFIX = "RESULT "
TIME_SPREAD_MAX = 1.20
RSS_GROWTH_MAX = 1.30


def recombined_pairs(n_pairs: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[str]]:
    """``texts, cats, names = recombined_pairs(500)``: texts ``[a0, b0, a1, b1, ...]`` (2 * n_pairs), cats
    (n_pairs,) the category index of each pair, names the category names.

    Pair k belongs to category k mod n_categories; it cuts two of that category's bundled pairs i and j at the same
    fraction of their words and joins the start of pair i's statements with the end of pair j's (A with A, B with B).
    """
    from layerscope import load_pairs

    categories = load_pairs().categories
    rng = np.random.default_rng(seed)
    texts, cats = [], np.arange(n_pairs) % len(categories)
    for c in cats:
        pairs = categories[c].pairs
        i, j = rng.integers(len(pairs), size=2)
        cut = rng.uniform(0.3, 0.7)
        texts += [_join(pairs[i][side], pairs[j][side], cut) for side in (0, 1)]
    return texts, cats, [c.name for c in categories]


def _join(first: str, second: str, cut: float) -> str:
    """The words of ``first`` before ``cut`` (a fraction of its words) and those of ``second`` after it; at least
    one word of each."""
    a, b = first.split(), second.split()
    keep_a = min(len(a), max(1, round(cut * len(a))))
    from_b = min(len(b) - 1, max(0, round(cut * len(b))))
    return " ".join(a[:keep_a] + b[from_b:])


def divergence_by_layer(acts, cats: np.ndarray, n_cat: int) -> np.ndarray:
    """(n_layers + 1,) Pearson r over categories of UA (uniformity of A minus that of B, "mean" pooling) with the
    mean preference NLL(B) - NLL(A); each layer is read from the store alone."""
    from layerscope.measures.geometry import uniformity

    nll = acts.nll_mean
    pref_pair = nll[1::2] - nll[0::2]  # (n_pairs,)
    pref = np.array([pref_pair[cats == c].mean() for c in range(n_cat)])
    stack = acts.pooled["mean"]
    r = np.full(stack.shape[1], np.nan)
    for layer in range(stack.shape[1]):
        block = stack[:, layer]  # (n_texts, d) float32, this layer only
        a, b = block[0::2], block[1::2]
        ua = np.array([uniformity(a[cats == c]) - uniformity(b[cats == c]) for c in range(n_cat)])
        r[layer] = np.corrcoef(ua, pref)[0, 1]
    return r


def folder_bytes(folder: Path) -> tuple[int, int]:
    """(bytes allocated on disk, apparent bytes) of every file under ``folder`` (the store's files are sparse)."""
    used = apparent = 0
    for path in folder.rglob("*"):
        if path.is_file():
            st = path.stat()
            used += st.st_blocks * 512
            apparent += st.st_size
    return used, apparent


def child(n_texts: int, model: str, seed: int) -> dict:
    """Run one size in this process and return its measurements."""
    import psutil

    from layerscope import extract, load_model

    lm = load_model(model, device="cpu")
    baseline = psutil.Process().memory_info().rss
    load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    texts, cats, names = recombined_pairs(n_texts // 2, seed)
    cache = Path(tempfile.mkdtemp(prefix="layerscope-scale-"))
    try:
        start = time.perf_counter()
        acts = extract(lm, texts, cache=cache, progress=False)
        t_extract = time.perf_counter() - start
        used, apparent = folder_bytes(cache)
        start = time.perf_counter()
        r = divergence_by_layer(acts, cats, len(names))
        t_analysis = time.perf_counter() - start
        batches = acts.stats.batches
        del acts
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    best = int(np.nanargmax(np.abs(r)))
    return {
        "n_texts": len(texts), "extract_s": t_extract, "ms_per_text": 1000 * t_extract / len(texts),
        "analysis_s": t_analysis, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "baseline_rss_mib": baseline / 2**20, "load_peak_rss_mib": load_peak / 1024,
        "store_bytes": used, "store_apparent_bytes": apparent,
        "batches": batches, "n_layers": lm.info.n_layers, "d": lm.info.hidden_size, "best_layer": best,
        "best_r": float(r[best]), "threads": _threads(),
    }


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def run_size(n_texts: int, model: str, seed: int) -> dict:
    """One size in a fresh Python process (spawned, so no memory of an earlier size is counted)."""
    env = {**os.environ, "LAYERSCOPE_PROGRESS": "0"}
    cmd = [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(n_texts), "--model", model,
           "--seed", str(seed)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)  # the child's stderr passes through
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        sys.exit(f"the child for {n_texts} texts failed (exit status {proc.returncode}); its output:\n{proc.stdout}")
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def report(results: list[dict]) -> bool:
    """Print the table and the checks; True when both pass."""
    first = results[0]
    print(f"model {first['n_layers']} layers, d={first['d']}, CPU, {first['threads']} threads; "
          f"RSS after loading the model {first['baseline_rss_mib']:.0f} MiB (peak while loading "
          f"{first['load_peak_rss_mib']:.0f} MiB)")
    print()
    print("| texts | extract s | ms/text | batches | analysis s | peak RSS MiB | above load MiB | store on disk "
          "| best layer (r) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in results:
        print(f"| {x['n_texts']:,} | {x['extract_s']:.1f} | {x['ms_per_text']:.2f} | {x['batches']} | "
              f"{x['analysis_s']:.2f} | {x['peak_rss_mib']:.0f} | {x['peak_rss_mib'] - x['load_peak_rss_mib']:.0f} | "
              f"{_size(x['store_bytes'])} | "
              f"{x['best_layer']} ({x['best_r']:+.2f}) |")
    print()
    per_text = [x["ms_per_text"] for x in results]
    spread = max(per_text) / min(per_text)
    growth = results[-1]["peak_rss_mib"] / first["peak_rss_mib"]
    ok_time, ok_rss = spread <= TIME_SPREAD_MAX, growth <= RSS_GROWTH_MAX
    print(f"time per text, max / min over sizes = {spread:.3f}  (target <= {TIME_SPREAD_MAX:.2f})  "
          f"{'PASS' if ok_time else 'FAIL'}")
    print(f"peak RSS, {results[-1]['n_texts']:,} / {first['n_texts']:,} texts = {growth:.3f}  "
          f"(target <= {RSS_GROWTH_MAX:.2f})  {'PASS' if ok_rss else 'FAIL'}")
    return ok_time and ok_rss


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000],
                        help="numbers of texts, each even and at least 20 (default: 1000 4000 16000)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(CHILD_FLAG, type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_size is not None:
        print(RESULT_PREFIX + json.dumps(child(args.child_size, args.model, args.seed)), flush=True)
        return
    sizes = sorted(args.sizes)
    if any(n < 20 or n % 2 for n in sizes):
        parser.error(f"--sizes {sizes}: each size must be an even number of texts (A/B pairs), at least 20")
    results = []
    for n in sizes:
        print(f"running {n:,} texts ...", file=sys.stderr, flush=True)
        results.append(run_size(n, args.model, args.seed))
    sys.exit(0 if report(results) else 1)


if __name__ == "__main__":
    main()
