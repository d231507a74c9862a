"""The tuned lens at Belrose et al.'s budget (250 steps of 2^18 tokens) beside train-lens's defaults, on a GPU.

    python benchmarks/tuned_lens_paper_budget.py --model smollm2-135m --out runs/paper-budget
    python benchmarks/tuned_lens_paper_budget.py --model path/SmolLM2-135M-Instruct.Q4_1.gguf --device cuda

Both lenses train on the default corpus and split of ``train-lens`` (the bundled texts and one model sample of
each, seed 0); the corpus holds far fewer rows than 2^18, so a paper-budget step holds each training row about
equally often (epochs end to end) and the run makes 250 x 2^18 = 65.5M token-draws of the same rows. Printed:
each run's wall time by phase and the held-out KL per state of both, with the default's 95 % interval; written:
``paper_budget.json`` in ``--out`` with the records and the device's name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from layerscope import load_model
from layerscope.engine.lenses.tuned_cache import default_corpus
from layerscope.engine.lenses.tuned_train import PAPER_TOKENS_PER_STEP, train_tuned_lens
from layerscope.io import atomic_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--tokens-per-step", type=int, default=PAPER_TOKENS_PER_STEP)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("LAYERSCOPE_PROGRESS", "0")
    lm = load_model(args.model, dtype=args.dtype, device=args.device)
    device = lm.model.get_output_embeddings().weight.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    t0 = time.perf_counter()
    texts, groups, words = default_corpus(lm, seed=0)
    sampling = time.perf_counter() - t0
    runs = {}
    for label, recipe in (("default", {}), ("paper budget", {"steps": args.steps,
                                                              "tokens_per_step": args.tokens_per_step})):
        t0 = time.perf_counter()
        lens = train_tuned_lens(lm, texts, groups=groups, corpus=words, seed=0, progress=False, **recipe)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        runs[label] = {"seconds": time.perf_counter() - t0, "record": lens.record}
        r = lens.record
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in r["seconds"].items())
        print(f"{label}: {runs[label]['seconds']:.1f} s ({phases}); {r['steps']} steps x {r['tokens_per_step']} "
              f"tokens = {r['tokens']['token_draws']:,} token-draws "
              f"over {r['tokens']['train_rows']:,} rows", flush=True)
    new, big = (runs[k]["record"]["heldout"] for k in ("default", "paper budget"))
    lo, hi = np.array(new["intervals"]["tuned_kl"]).T
    print(f"{lm.info.name} on {name} ({args.dtype}); corpus sampled in {sampling:.1f} s; held out: {new['tokens']} "
          "tokens; bits per token")
    print("state  default [95 % interval]     paper budget  logit lens")
    for s in range(len(lo)):
        print(f"{s:>5}  {new['metrics']['tuned_kl'][s]:7.3f} [{lo[s]:6.3f}, {hi[s]:6.3f}]  "
              f"{big['metrics']['tuned_kl'][s]:12.3f}  {new['metrics']['logit_kl'][s]:9.3f}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with atomic_file(args.out / "paper_budget.json", "w") as f:
            json.dump({"model": lm.info.name, "weights_hash": lm.info.weights_hash, "device": name,
                       "dtype": args.dtype, "torch": torch.__version__, "corpus": words,
                       "sampling_seconds": sampling, "runs": runs}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
