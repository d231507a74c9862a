"""Time the Scorer's output head on the scored positions alone against the full logits (the path before it).

    .venv/bin/python benchmarks/scorer_head.py [--model smollm2-135m] [--texts 154] [--repeats 3] [--threads 2]

On the bundled pairs (the first ``--texts`` statements, each paired with its partner, so the tokens a pair shares
from the start are not scored), times three :class:`~layerscope.engine.interventions.edit_scores.Interventions` calls:
the intact pass (``iv.intact()``, a new object each time: it also keeps the streams the edited passes start from), and
one rank-one removal at a middle and at the last-but-one state (``iv.run(15, [edit])``, ``iv.run(29, [edit])`` on
SmolLM2's 30 blocks: 15 blocks and 1 block per batch, then the final norm and the head). "before" forces the
full-logits path by telling the Scorer the head cannot be split off (``head_matches`` patched to False); "after" is
the default. The two alternate within each repeat, in this process; the medians and their ratios (before / after)
are printed, with the largest relative difference of the NLLs between the paths (target: float tolerance).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import numpy as np
import torch

import layerscope
from layerscope.engine.interventions import scoring
from layerscope.engine.interventions.edit_scores import Interventions, project_out

PATHS = ("before", "after")


def forced(path: str):
    """``before``: the full-logits path; ``after``: the head on the scored positions (the default)."""
    if path == "before":
        return mock.patch.object(scoring, "head_matches", lambda lm, batch: False)
    return contextlib.nullcontext()


def timed(call):
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def one_repeat(lm, texts, partners, edit, late: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Seconds of each call and its NLLs, on a new Interventions object."""
    iv = Interventions(lm, texts, partners=partners)
    seconds, nll = {}, {}
    seconds["intact"], nll["intact"] = timed(iv.intact)
    seconds["run(15)"], nll["run(15)"] = timed(lambda: iv.run(15, [edit]))
    seconds[f"run({late})"], nll[f"run({late})"] = timed(lambda: iv.run(late, [edit]))
    return seconds, nll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--texts", type=int, default=154)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = layerscope.load_model(args.model)
    texts = layerscope.load_pairs().texts()[: args.texts]
    partners = np.arange(len(texts)) ^ 1
    d, late = lm.info.hidden_size, lm.info.n_layers - 1
    units = np.random.default_rng(0).standard_normal((len(texts), d))
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    edit = project_out(units)

    iv = Interventions(lm, texts, partners=partners)
    scored = int(iv.n_scored.sum())
    padded = sum(b.input_ids.numel() for b in iv.batches)
    print(f"model {args.model} ({lm.info.n_layers} blocks, vocab {lm.info.vocab_size}), {len(texts)} texts in "
          f"{len(iv.batches)} batches: {scored} scored positions of {padded} padded "
          f"({1 - scored / padded:.0%} of the head's work skipped), {torch.get_num_threads()} threads")
    for path in PATHS:  # warm-up (and the head path's probe, once per model)
        with forced(path):
            one_repeat(lm, texts[:8], partners[:8], project_out(units[:8]), late)

    times: dict[str, dict[str, list[float]]] = {path: {} for path in PATHS}
    results: dict[str, dict[str, np.ndarray]] = {}
    for r in range(args.repeats):
        for path in PATHS if r % 2 == 0 else PATHS[::-1]:
            with forced(path):
                seconds, results[path] = one_repeat(lm, texts, partners, edit, late)
            for call, s in seconds.items():
                times[path].setdefault(call, []).append(s)
        last = {call: (times["before"][call][-1], times["after"][call][-1]) for call in times["before"]}
        print(f"repeat {r + 1}: " + "   ".join(f"{call} {b:.2f}/{a:.2f} s" for call, (b, a) in last.items())
              + "   (before/after)")

    print(f"\nmedians of {args.repeats}:      before      after   ratio (before / after)")
    for call in times["before"]:
        before, after = (statistics.median(times[path][call]) for path in PATHS)
        print(f"  {call:12s}  {before:8.3f} s  {after:8.3f} s   {before / after:.2f}x")
    largest = max(float(np.max(np.abs(results["after"][c] / results["before"][c] - 1))) for c in results["after"])
    print(f"largest relative difference of the NLLs between the paths: {largest:.1e}   (target <= 1e-6)")


if __name__ == "__main__":
    main()
