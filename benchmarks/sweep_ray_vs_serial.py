"""Time a sweep of 4 small random models run serially in this process against the same sweep as Ray
tasks on a local instance with 2 workers.

    .venv/bin/python benchmarks/sweep_ray_vs_serial.py [--study phases] [--workers 2] [--hidden 256]

The models are Llama-shaped, randomly initialised, 4, 6, 8 and 10 layers deep, with the tokenizer the
tests train in code; the data is the bundled pair dataset (154 pairs). Both runs start from an empty
activation cache, so each task loads, extracts and analyses. The Ray time includes starting Ray and its
worker processes (each imports torch and transformers). Prints both wall times, the ratio, and the largest
difference between the two gathered tables.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

import tiny  # noqa: E402  (the tests' tokenizer trained in code)
from layerscope.study import StudyConfig  # noqa: E402
from layerscope.sweep import SweepPlan, run_sweep  # noqa: E402

DEPTHS = (4, 6, 8, 10)


def save_models(root: Path, hidden: int) -> list[str]:
    """Four random Llama models of the given width, one per depth, as save_pretrained folders."""
    import torch

    tok = tiny.tokenizer(adds_bos=False)
    folders = []
    for depth in DEPTHS:
        torch.manual_seed(depth)
        config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden,
                             num_hidden_layers=depth, num_attention_heads=8, num_key_value_heads=4,
                             max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        folder = root / f"llama-{depth}"
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        tok.save_pretrained(folder)
        folders.append(str(folder))
    return folders


def timed_sweep(plan: SweepPlan, out: Path, cache: Path) -> float:
    os.environ["LAYERSCOPE_CACHE"] = str(cache)  # read by this process and by Ray workers started after it
    start = time.perf_counter()
    summary = run_sweep(plan, out, echo=lambda line: None)
    seconds = time.perf_counter() - start
    assert summary["n_failed"] == 0, summary["tasks"]
    return seconds


def largest_difference(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """The largest absolute difference between two tables' numbers; they must match in every other cell."""
    numeric = a.select_dtypes("number").columns
    pd.testing.assert_frame_equal(a.drop(columns=numeric), b.drop(columns=numeric))
    return float((a[numeric] - b[numeric]).abs().max().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="phases", help="the study each task runs (default: phases)")
    parser.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray instance (default: 2)")
    parser.add_argument("--hidden", type=int, default=256, help="width of the models (default: 256)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    transformers.logging.disable_progress_bar()
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = save_models(root, args.hidden)
        config = StudyConfig(study=args.study, models=tuple(models))
        serial = timed_sweep(SweepPlan(config), root / "serial", root / "cache-serial")
        on_ray = timed_sweep(SweepPlan(config, executor="ray", workers=args.workers), root / "ray",
                             root / "cache-ray")
        difference = largest_difference(pd.read_csv(root / "serial" / "table.csv"),
                                        pd.read_csv(root / "ray" / "table.csv"))
    print(f"sweep of {len(models)} models ({', '.join(f'{d} layers' for d in DEPTHS)}, d={args.hidden}), "
          f"study {args.study}, bundled pairs, {os.cpu_count()} CPUs")
    print(f"  serial, in-process           {serial:8.1f} s")
    print(f"  Ray, {args.workers} workers (incl. start) {on_ray:8.1f} s")
    print(f"  ratio serial / Ray           {serial / on_ray:8.2f}x")
    print(f"  gathered tables: largest difference of any number {difference:.1e} (torch uses 2 threads in the "
          "serial run, 1 in each Ray task)")


if __name__ == "__main__":
    main()
