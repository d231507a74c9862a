"""Time ``extract`` at its default settings against a bare batched forward pass, and check the massive flags.

    .venv/bin/python benchmarks/extract_speed.py [--model smollm2-135m] [--device cuda] [--repeats 5] [--check]
        [--batch-sizes 16 32 64] [--pairs N]

In one process, on the bundled pairs' texts (the 154 pairs' 308 texts, as ``extract_vs_seed.py`` uses):
  extract  layerscope.extract at its defaults: the five poolings (mean, last, first, mean_no_pos0,
           mean_no_massive), every layer, the NLL, its own batch plan (batch_size=None), ``cache=False``
           (the store goes to a temp folder on disk, as a cached run writes it, and is removed after)
  raw      length-sorted batches through model(...) (``use_cache=False``) with nothing kept, at each of
           ``--batch-sizes`` texts per batch; the fastest size counts
After a warm-up, each of ``--repeats`` rounds runs every raw batch size and extract once (interleaved, so a
busy machine slows both alike); each time is the best of its rounds, CUDA synchronized before and after.
Prints both times, their ratio (target <= 1.10) and whether the massive-token flags that ``mean_no_massive``
uses (:func:`layerscope.engine.massive.massive_mask` at every decoder block output, each batch as extract
plans it) equal a naive reference: per text and block, numpy's ``np.median`` of the text's |activations|
over its real tokens and every dimension, a token massive where its largest |activation| is above 100x it.
``--check`` exits with status 1 if the ratio is above 1.10 or a flag differs.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from extract_gpu import raw_pass, sync  # the bare pass both benchmarks time (benchmarks/ is on sys.path)

from layerscope import extract, load_model, load_pairs
from layerscope.engine.batching import CPU_TOKEN_BUDGET, collate, pad_id, plan_ranges, tokenize
from layerscope.engine.capture import PRE_NORM, capture_states
from layerscope.engine.massive import MASSIVE_RATIO, massive_mask
from layerscope.models import input_device

TARGET = 1.10


def timed(device: torch.device, fn, *args, **kwargs) -> float:
    sync(device)
    start = time.perf_counter()
    fn(*args, **kwargs)
    sync(device)
    return time.perf_counter() - start


def naive_flags(hidden: np.ndarray, real: np.ndarray) -> np.ndarray:
    """(B, T) bool: per text (a loop), |hidden| (B, T, d) over its real tokens; np.median of all those values."""
    flags = np.zeros(real.shape, dtype=bool)
    for b in range(len(real)):
        mag = np.abs(hidden[b][real[b]]).astype(np.float32)  # (n_real, d)
        flags[b, real[b]] = mag.max(axis=1) > MASSIVE_RATIO * np.median(mag)
    return flags


@torch.inference_mode()
def check_flags(lm, ids: list[list[int]]) -> tuple[int, int, int]:
    """Batches as extract plans them on a CPU (or 64 texts on a GPU); every decoder block output's flags by
    massive_mask against :func:`naive_flags`. Returns (differing flags, massive (token, block) pairs, real tokens)."""
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    device = input_device(lm.model)
    budget = CPU_TOKEN_BUDGET if device.type == "cpu" else None
    n_layers = lm.info.n_layers
    differ = flagged = checked = 0
    for lo, hi in plan_ranges(lengths[order], np.ones(len(ids), dtype=bool), 64, budget):
        index = order[lo:hi]
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        real = batch.attention_mask.bool()
        states: dict = {}
        keep = states.__setitem__  # states[key] = hidden, as each block's output arrives
        with capture_states(lm, list(range(1, n_layers)), keep):
            lm.model(**batch.model_inputs(), use_cache=False)
        assert len(states) == n_layers and PRE_NORM in states  # blocks 1 .. n_layers - 1 and the last one
        for hidden in states.values():
            got = massive_mask(hidden, real).cpu().numpy()
            ref = naive_flags(hidden.float().cpu().numpy(), real.cpu().numpy())
            differ += int((got != ref).sum())
            flagged += int(ref.sum())
        checked += int(real.sum())
    return differ, flagged, checked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a zoo name or a model folder")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the model's default, CUDA if any)")
    parser.add_argument("--pairs", type=int, default=None, help="use the first N pairs (default: all)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                        help="raw texts per batch to try (default: 16 32 64 on a CPU, 32 64 128 256 on a GPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if extract / raw > {TARGET} or a flag differs")
    args = parser.parse_args()

    lm = load_model(args.model, device=args.device)
    device = input_device(lm.model)
    pairs = [p for c in load_pairs().categories for p in c.pairs][: args.pairs]
    texts = [t for p in pairs for t in p]
    ids = tokenize(lm.tokenizer, texts)
    sizes = args.batch_sizes or ([16, 32, 64] if device.type == "cpu" else [32, 64, 128, 256])
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"model {lm.info.name} ({lm.info.n_layers} layers, d={lm.info.hidden_size}, {lm.info.dtype}) on {where}; "
          f"{len(texts)} texts, {sum(map(len, ids))} tokens; extract: default poolings, every layer, NLL, cache=False")

    for size in sizes:  # warm-up
        raw_pass(lm, ids[: 2 * size], size)
    extract(lm, texts[:64], cache=False, progress=False)
    t_raw: dict[int, list[float]] = {size: [] for size in sizes}
    t_extract: list[float] = []
    for _ in range(args.repeats):
        for size in sizes:
            t_raw[size].append(timed(device, raw_pass, lm, ids, size))
        t_extract.append(timed(device, extract, lm, texts, cache=False, progress=False))

    acts = extract(lm, texts, cache=False, progress=False)
    best = min(sizes, key=lambda size: min(t_raw[size]))
    raw, ext = min(t_raw[best]), min(t_extract)
    for size in sizes:
        print(f"raw, {size:>3} texts per batch : {min(t_raw[size]):8.3f} s   (runs: {_runs(t_raw[size])})")
    print(f"extract (5 poolings)      : {ext:8.3f} s   (runs: {_runs(t_extract)}; {acts.stats.batches} batches, "
          f"{len(texts) / acts.stats.batches:.0f} texts per batch)")
    ratio = ext / raw
    print(f"extract / raw (best, {best} per batch) = {ratio:.3f}x   (target <= {TARGET:.2f}x)")

    differ, flagged, checked = check_flags(lm, ids)
    n_blocks = lm.info.n_layers
    print(f"massive flags vs the naive np.median reference: {differ} of {checked * n_blocks} (token, block) flags "
          f"differ ({flagged} massive) over {checked} tokens x {n_blocks} block outputs"
          f" -> {'identical' if differ == 0 else 'DIFFERENT'}")
    if args.check and (ratio > TARGET or differ):
        return 1
    return 0


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


if __name__ == "__main__":
    sys.exit(main())
