"""Time layerscope's extraction against the notebooks' method and a raw batched pass.

    .venv/bin/python benchmarks/extract_vs_seed.py [--model smollm2-135m] [--pairs N] [--repeats 3] [--profile]
        [--skip-notebooks]

In one process, on the bundled pair dataset:
  notebooks  per pair, as seed 000 does: NLL of A and of B (one pass each), then one
             pass per (text, layer) for every 4th layer plus the last
  extract    layerscope.extract: every layer, NLL, no cache, with its own batch plan (batch_size=None: a
             token budget from the device); timed twice: with the notebooks' poolings (mean, last, first:
             the workload the target is for) and with extract's default five (the two checks mean_no_pos0
             and mean_no_massive added: the massive-token flags take a median of every block's states)
  raw        length-sorted batches of 16, 32 and 64 texts through model(...) with nothing kept;
             the fastest of the three
Prints each time and the ratios notebooks/extract (target >= 30) and extract/raw (target <= 1.10 for the
notebooks' poolings; the five-pooling ratio is printed beside it). extract and raw are the best of --repeats
runs, interleaved (each repeat runs every raw batch size and both extracts once). ``--profile`` then prints a
cProfile of one extract call with the five poolings (top 25 by cumulative time); ``--skip-notebooks`` leaves
out the notebooks' method (minutes) to time extract and raw alone.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import torch

from layerscope import extract, load_model, load_pairs
from layerscope.engine.forward.batching import collate, pad_id, plan_batches, tokenize
from layerscope.engine.forward.pooling import ALL_POOLINGS, POOLINGS
from layerscope.models import input_device


@torch.inference_mode()
def notebooks_method(lm, pairs: list[tuple[str, str]]) -> None:
    model, tokenizer = lm.model, lm.tokenizer
    n_layers = lm.info.n_layers
    layers = list(range(0, n_layers + 1, 4))
    if n_layers not in layers:
        layers.append(n_layers)

    def nll(text):
        inputs = tokenizer(text, return_tensors="pt")
        return model(**inputs, labels=inputs["input_ids"]).loss.item()

    def layer_embedding(text, layer):
        inputs = tokenizer(text, return_tensors="pt")
        out = model(**inputs, output_hidden_states=True)
        return out.hidden_states[layer][0, 1:, :].mean(dim=0).cpu().numpy().astype(np.float32)

    for a, b in pairs:
        _ = nll(b) - nll(a)
        for layer in layers:
            layer_embedding(a, layer), layer_embedding(b, layer)


@torch.inference_mode()
def raw_pass(lm, texts: list[str], batch_size: int) -> None:
    ids = tokenize(lm.tokenizer, texts)
    device = input_device(lm.model)
    for index in plan_batches([len(x) for x in ids], batch_size):
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        lm.model(**batch.model_inputs(), use_cache=False)


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pairs", type=int, default=None, help="use the first N pairs (default: all)")
    parser.add_argument("--raw-batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile one extract call (cProfile)")
    parser.add_argument("--skip-notebooks", action="store_true", help="time extract and raw only")
    args = parser.parse_args()

    lm = load_model(args.model)
    dataset = load_pairs()
    pairs = [p for c in dataset.categories for p in c.pairs][: args.pairs]
    texts = [t for p in pairs for t in p]
    print(f"model {lm.info.name} ({lm.info.n_layers} layers, d={lm.info.hidden_size}) on {lm.info.device}, "
          f"{torch.get_num_threads()} threads; {len(pairs)} pairs = {len(texts)} texts")
    workloads = {"3": POOLINGS, "5": ALL_POOLINGS}

    for size in args.raw_batch_sizes:  # warm-up
        raw_pass(lm, texts[: 2 * size], size)
    for poolings in workloads.values():
        extract(lm, texts[:32], poolings=poolings, cache=False, progress=False)
    t_raw: dict[int, list[float]] = {size: [] for size in args.raw_batch_sizes}
    t_extract: dict[str, list[float]] = {key: [] for key in workloads}
    for _ in range(args.repeats):
        for size in args.raw_batch_sizes:
            t_raw[size].append(timed(raw_pass, lm, texts, size))
        for key, poolings in workloads.items():
            start = time.perf_counter()
            acts = extract(lm, texts, poolings=poolings, cache=False, progress=False)
            t_extract[key].append(time.perf_counter() - start)
    t_notebooks = None if args.skip_notebooks else timed(notebooks_method, lm, pairs)

    best_size = min(t_raw, key=lambda size: min(t_raw[size]))
    raw = min(t_raw[best_size])
    ext = {key: min(times) for key, times in t_extract.items()}
    batches = acts.stats.batches
    if t_notebooks is not None:
        print(f"notebooks' method : {t_notebooks:8.2f} s")
    for key, poolings in workloads.items():
        print(f"extract, {key} poolings: {ext[key]:8.2f} s   ({', '.join(poolings)}; runs: {_runs(t_extract[key])})")
    print(f"  auto batch plan: {batches} batches, {len(texts) / batches:.0f} texts per batch on average")
    for size in args.raw_batch_sizes:
        print(f"raw, {size:>3} per batch : {min(t_raw[size]):8.2f} s   (runs: {_runs(t_raw[size])})")
    print(f"raw, best ({best_size:>3})  : {raw:8.2f} s")
    if t_notebooks is not None:
        print(f"notebooks / extract (3 poolings) = {t_notebooks / ext['3']:6.1f}x   (target >= 30x)")
    print(f"extract (3 poolings) / raw       = {ext['3'] / raw:6.3f}x   (target <= 1.10x)")
    print(f"extract (5 poolings) / raw       = {ext['5'] / raw:6.3f}x   (the two checks added; no target)")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(extract, lm, texts, cache=False, progress=False)
        print("\ncProfile of one extract call (five poolings), top 25 by cumulative time:")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    elif ext["3"] / raw > 1.10:
        print("extract / raw is above its target: run again with --profile to see where extract's time goes")


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


if __name__ == "__main__":
    main()
