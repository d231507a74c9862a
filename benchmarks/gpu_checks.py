"""The engine's other GPU paths on an 8B-shaped random bf16 model: the atlas pass (against a bare forward pass of
the same texts), surgery with and without prefix reuse, and the logit lens of one prompt; wall time and peak GPU
memory of each.

    python benchmarks/gpu_checks.py [--tokenizer DIR] [--texts 460] [--surgery-texts 64]
    python benchmarks/gpu_checks.py --tiny-cpu        # the same code path on a tiny shape, on the CPU

The bare pass runs the same texts (cut at 40 tokens) in the atlas's own length-sorted batch plan through
``model(..., output_hidden_states=True)``, nothing kept; the line "atlas pass / bare pass = Nx" is their ratio.
Both are timed again on ``--steady`` texts (default 5,000 on a GPU): the difference of the two sizes gives each
one's cost per text at steady state (target: the atlas's at most 5x the bare pass's), and the atlas's time at
``--texts`` less that many texts' steady cost is its fixed cost per pass (target: at most 0.5 s; what a pass pays
whatever its number of texts, such as the top-1 share of every covariance).

Checks, not only timings: surgery's numbers with prefix reuse equal those without (largest difference printed);
the lens at the last layer equals the model's own argmax at every position. Exits with status 1 when either fails,
2 without a CUDA GPU (and without ``--tiny-cpu``). The model and texts are ``extract_gpu.py``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from extract_gpu import build_random, model_configs, peak_gib, reset_peak, seed_texts, smollm2_tokenizer, sync


def timed(device: torch.device, what, *args, **kwargs):
    reset_peak(device)
    sync(device)
    start = time.perf_counter()
    out = what(*args, **kwargs)
    sync(device)
    return out, time.perf_counter() - start, peak_gib(device)


@torch.inference_mode()
def bare_pass(lm, texts: list[str], max_length: int) -> int:
    """The atlas's batches of ``texts`` through the model alone (hidden states returned, nothing kept); returns the
    number of batches."""
    from layerscope.engine.forward.batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
    from layerscope.engine.forward.guards import encode
    from layerscope.models import input_device

    ids = encode(lm, texts, max_length)
    budget = memory_budget(lm.model, lm.info.vocab_size, lm.info.n_layers + 2)
    batches = plan_batches([len(x) for x in ids], MAX_TEXTS_PER_BATCH, budget)
    device = input_device(lm.model)
    for index in batches:
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
    return len(batches)


def profile_atlas(lm, texts: list[str]) -> str:
    """The atlas pass once under ``torch.profiler``: wall and kernel time, host waits, the top ops by CUDA time."""
    from torch.profiler import ProfilerActivity, profile

    from layerscope.engine.atlas.stream import atlas_pass

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        atlas_pass(lm, texts, max_length=40, progress=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
    waits = {e.key: e.count for e in events if "Synchronize" in e.key}
    lines = [f"atlas pass under the profiler: {wall:.2f} s wall, {kernel_us / 1e6:.2f} s of kernels; host waits "
             f"{waits}", "| op | CUDA ms | calls | CPU total ms |", "|---|---:|---:|---:|"]
    top = sorted((e for e in events if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)
    for e in top[:16]:
        lines.append(f"| `{e.key[:60]}` | {e.self_device_time_total / 1e3:.1f} | {e.count} | "
                     f"{e.cpu_time_total / 1e3:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--texts", type=int, default=460, help="texts for the atlas pass")
    parser.add_argument("--steady", type=int, default=None,
                        help="texts for the steady-state timing (default: 5000 on a GPU, 3 x --texts with --tiny-cpu; "
                             "0: skip it)")
    parser.add_argument("--surgery-texts", type=int, default=64)
    parser.add_argument("--tiny-cpu", action="store_true")
    parser.add_argument("--profile", action="store_true", help="then the atlas pass once more under torch.profiler")
    args = parser.parse_args()
    if not args.tiny_cpu and not torch.cuda.is_available():
        print("gpu_checks.py needs a CUDA GPU (or --tiny-cpu)", file=sys.stderr)
        return 2
    os.environ.setdefault("LAYERSCOPE_PROGRESS", "0")
    from layerscope import Intervention, lens, measure_interventions
    from layerscope.engine.atlas.stream import atlas_pass
    from layerscope.models import LoadedModel

    device = torch.device("cpu") if args.tiny_cpu else torch.device("cuda")
    name, config = next(iter(model_configs(args.tiny_cpu).items()))
    dtype = torch.float32 if args.tiny_cpu else torch.bfloat16
    tokenizer = smollm2_tokenizer(args.tokenizer)
    lm = LoadedModel.wrap(build_random(config, device, dtype), tokenizer, name=name)
    texts = seed_texts(tokenizer, n_pairs=args.texts // 2)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (tiny shapes)"
    print(f"{label}, torch {torch.__version__}, {name} {dtype}", flush=True)
    ok = True

    atlas_pass(lm, texts[:8], max_length=40, progress=False)  # warm-up
    bare_pass(lm, texts, max_length=40)
    n_batches, bare, bare_peak = timed(device, bare_pass, lm, texts, max_length=40)
    result, seconds, peak = timed(device, atlas_pass, lm, texts, max_length=40, progress=False)
    print(f"bare pass, {len(texts)} texts, {n_batches} batch(es): {bare:.2f} s, peak GPU {bare_peak:.1f} GiB")
    print(f"atlas pass, {len(texts)} texts, every layer: {seconds:.2f} s ({result.seconds}), peak GPU {peak:.1f} GiB")
    print(f"atlas pass / bare pass = {seconds / bare:.1f}x", flush=True)
    steady = args.steady if args.steady is not None else (3 * len(texts) if args.tiny_cpu else 5000)
    if steady > len(texts):
        many = seed_texts(tokenizer, n_pairs=steady // 2)
        _, bare_many, _ = timed(device, bare_pass, lm, many, max_length=40)
        _, atlas_many, _ = timed(device, atlas_pass, lm, many, max_length=40, progress=False)
        n1, n2 = len(texts), len(many)
        per_bare, per_atlas = (bare_many - bare) / (n2 - n1), (atlas_many - seconds) / (n2 - n1)
        print(f"{n2} texts: bare pass {bare_many:.2f} s, atlas pass {atlas_many:.2f} s; per text at steady state "
              f"({n1} -> {n2} texts): atlas {per_atlas * 1e3:.3f} ms, bare {per_bare * 1e3:.3f} ms, atlas / bare "
              f"= {per_atlas / per_bare:.1f}x   (target <= 5x)")
        print(f"atlas fixed cost per pass ({seconds:.2f} s at {n1} texts less {n1} x {per_atlas * 1e3:.3f} ms): "
              f"{seconds - per_atlas * n1:.2f} s   (target <= 0.5 s)", flush=True)
    if args.profile and device.type == "cuda":
        print(profile_atlas(lm, texts), flush=True)

    n_layers = lm.info.n_layers
    ivs = ([Intervention.skip(b) for b in range(n_layers)] + [Intervention.repeat(b) for b in range(0, n_layers, 4)]
           + [Intervention.swap(b) for b in range(0, n_layers - 1, 4)])
    few = texts[: args.surgery_texts]
    whole, t_whole, p_whole = timed(device, measure_interventions, lm, few, ivs, max_length=40, prefix_reuse=False,
                                    progress=False)
    reuse, t_reuse, p_reuse = timed(device, measure_interventions, lm, few, ivs, max_length=40, prefix_reuse=True,
                                    progress=False)
    diff = max(float(np.nanmax(np.abs(np.asarray(reuse[iv].nll) - np.asarray(whole[iv].nll)))) for iv in ivs)
    print(f"surgery, {len(ivs)} interventions x {len(few)} texts: whole passes {t_whole:.2f} s (peak {p_whole:.1f} "
          f"GiB), prefix reuse {t_reuse:.2f} s (peak {p_reuse:.1f} GiB), {t_whole / t_reuse:.2f}x; largest NLL "
          f"difference {diff:.2e}", flush=True)
    ok &= diff <= (1e-4 if args.tiny_cpu else 5e-2)  # bf16: a resumed stream is the same bits, summed in float32

    prompt = "The capital of France is"
    frame, seconds, peak = timed(device, lens, lm, prompt, top_k=5)
    with torch.no_grad():
        ids = tokenizer(prompt, return_tensors="pt").to(device)
        own = lm.model(**ids).logits[0].argmax(-1).cpu().numpy()
    top = frame[(frame["layer"] == n_layers) & (frame["rank"] == 1)].sort_values("position")["token_id"].to_numpy()
    same = np.array_equal(top, own)
    print(f"lens of one prompt: {seconds:.2f} s; last layer equals the model's argmax at every position: {same}")
    ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
