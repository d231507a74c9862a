"""Time ``extract`` on one CUDA GPU with 7-8B-parameter model shapes against a bare forward pass.

    .venv/bin/python benchmarks/extract_gpu.py [--models llama-3.1-8b pythia-6.9b] [--repeats 3]
    .venv/bin/python benchmarks/extract_gpu.py --tiny-cpu     # the same code path on a tiny shape, on the CPU
    ... --poolings default            # extract's default poolings (the default: the notebooks' mean, last, first)
    ... --tokenizer DIR               # a tokenizer folder (default: SmolLM2's from the zoo, converted once)
    ... --profile                     # then a torch.profiler summary of one extract: per batch, GPU busy time,
                                      # host waits (synchronize calls), the top kernels

Without a CUDA GPU (and without ``--tiny-cpu``) it says so and exits with status 2.

Models: Llama-3.1-8B-shaped (hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP 14336, vocab 128256, RoPE theta
500000, 8192 positions) and Pythia-6.9B-shaped (GPT-NeoX: hidden 4096, 32 layers, 32 heads, MLP 16384, vocab
50432, rotary on 25% of each head, 2048 positions), both built from configs written here: parameters on the meta
device, then ``to_empty`` on the GPU and a cheap random init in bfloat16 (matrices normal(0, 0.02), norm weights 1,
biases 0; the rotary buffers recomputed). Nothing is downloaded. The tokenizer is SmolLM2's from layerscope's zoo
(only token ids matter; its 49,152 ids fit both vocabularies).

Workload, the seeds' shape: 460 texts (230 A/B pairs) made from the bundled statements (one joined to the next
until it has 15 tokens, cut at 40), every layer, the poolings mean, last and first, and the NLL.
Per model, each the best of ``--repeats`` interleaved runs after a warm-up:
  extract         layerscope.extract(cache=False), its own batch plan (batch_size=None)
  extract+cache   the same into a fresh cache folder (the store written to disk)
  raw             length-sorted batches through model(...) with nothing kept, at the fastest of 16 .. 256 texts
  raw (planned)   the same at exactly extract's own batches (its plan for these texts): extract / raw (planned) is
                  the cost of extract's work alone, extract / raw that and its batch plan together
Prints texts/s, the auto plan's texts per batch, the peak GPU memory of each (``max_memory_allocated``, reset
before every run) and extract's time over raw's, then a markdown table for the README.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch

N_PAIRS = 230
MIN_TOKENS, MAX_TOKENS = 15, 40
POOLINGS = ("mean", "last", "first")
RAW_BATCH_SIZES = (16, 32, 64, 128, 256)


def model_configs(tiny: bool) -> dict:
    """name -> transformers config: the real shapes, or ``tiny`` ones (hidden 64, 2 layers) for a CPU check."""
    from transformers import GPTNeoXConfig, LlamaConfig

    if tiny:
        return {
            "llama-tiny": LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=128, vocab_size=49152, max_position_embeddings=512,
                                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
            "pythia-tiny": GPTNeoXConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=256, vocab_size=49152, max_position_embeddings=512,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "partial_rotary_factor": 0.25}),
        }
    return {
        "llama-3.1-8b": LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                    num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                                    max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        "pythia-6.9b": GPTNeoXConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                     intermediate_size=16384, vocab_size=50432, max_position_embeddings=2048,
                                     layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False,
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.25}),
    }


@torch.no_grad()
def build_random(config, device: torch.device, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """A causal LM of ``config`` with random weights on ``device``: built on the meta device (no memory, no init),
    then ``to_empty`` and a cheap init per parameter; buffers (rotary frequencies) are recomputed on the CPU."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        if param.ndim >= 2:
            param.normal_(0.0, 0.02, generator=generator)
        elif name.endswith("bias"):
            param.zero_()
        else:  # a norm's scale
            param.fill_(1.0)
    for module in model.modules():
        own = dict(module.named_buffers(recurse=False))
        if not own:
            continue
        try:
            fresh = type(module)(module.config)  # rotary embeddings: buffers computed from the config
        except Exception as exc:
            raise RuntimeError(f"cannot recompute the buffers {sorted(own)} of {type(module).__name__} after "
                               f"to_empty ({exc}); initialise that module by hand in build_random") from exc
        for key, buffer in fresh.named_buffers(recurse=False):
            own[key].copy_(buffer.to(own[key].dtype))
    return model.eval()


def smollm2_tokenizer(folder: str | None = None):
    """SmolLM2's tokenizer from ``folder`` or layerscope's zoo folder (converted once by ``load_model``; no weights
    are loaded)."""
    from transformers import AutoTokenizer

    from layerscope.models.zoo import zoo_folder

    return AutoTokenizer.from_pretrained(folder or zoo_folder("smollm2-135m"))


def seed_texts(tokenizer, n_pairs: int = N_PAIRS) -> list[str]:
    """``[a0, b0, a1, b1, ...]`` (2 * n_pairs) from the bundled statements: pair k starts from bundled pair
    k mod n and joins the next statements of the same side until it has ``MIN_TOKENS`` tokens (``extract`` and
    the raw pass cut it at ``MAX_TOKENS``)."""
    from layerscope import load_pairs

    pairs = [p for c in load_pairs().categories for p in c.pairs]
    texts = []
    for k in range(n_pairs):
        for side in (0, 1):
            parts, step = [], k // len(pairs) + 1
            while len(tokenizer(" ".join(parts))["input_ids"]) < MIN_TOKENS:
                parts.append(pairs[(k + len(parts) * step) % len(pairs)][side])
            texts.append(" ".join(parts))
    return texts


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")


@torch.inference_mode()
def raw_pass(lm, ids: list[list[int]], batch_size: int) -> None:
    """Length-sorted batches of ``batch_size`` texts through the model, nothing kept (logits freed per batch)."""
    from layerscope.engine.forward.batching import collate, pad_id, plan_batches
    from layerscope.models import input_device

    device = input_device(lm.model)
    for index in plan_batches([len(x) for x in ids], batch_size):
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        lm.model(**batch.model_inputs(), use_cache=False)
    sync(device)


@torch.inference_mode()
def raw_planned(lm, ids: list[list[int]], kept: int) -> None:
    """The model over exactly the batches extract plans (:func:`~layerscope.engine.forward.extract.planned_ranges`
    for these texts, its memory budget with ``kept`` states held), nothing kept: the bare pass extract's plan
    allows."""
    from layerscope.engine.forward.batching import collate, pad_id
    from layerscope.engine.forward.extract import planned_ranges
    from layerscope.models import input_device

    device = input_device(lm.model)
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    for lo, hi in planned_ranges(lm, lengths[order], np.ones(len(ids), dtype=bool), None, kept):
        index = order[lo:hi]
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        lm.model(**batch.model_inputs(), use_cache=False)
    sync(device)


@dataclass
class Timing:
    seconds: float = float("inf")
    peak_gib: float = float("nan")

    def add(self, seconds: float, peak: float) -> None:
        if seconds < self.seconds:
            self.seconds, self.peak_gib = seconds, peak


def bench_model(name: str, config, device: torch.device, tokenizer, texts: list[str], repeats: int,
                poolings: tuple[str, ...] = POOLINGS, profile: bool = False) -> dict:
    """Build ``config`` on ``device``, time extract / extract+cache / raw, free it; one table row."""
    from layerscope import extract
    from layerscope.engine.forward.batching import memory_budget, tokenize
    from layerscope.models import LoadedModel

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if len(tokenizer) > config.vocab_size:
        raise SystemExit(f"the tokenizer's {len(tokenizer)} ids do not fit {name}'s vocabulary of "
                         f"{config.vocab_size}; give the config a larger vocab_size")
    start = time.perf_counter()
    model = build_random(config, device, dtype)
    lm = LoadedModel.wrap(model, tokenizer, name=name)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e9:.2f} B parameters, {dtype}, built and wrapped in {time.perf_counter() - start:.0f} s",
          file=sys.stderr, flush=True)
    ids = tokenize(tokenizer, texts, MAX_TOKENS)
    budget = memory_budget(lm.model, lm.info.vocab_size, 0)
    kwargs = {"poolings": poolings, "max_length": MAX_TOKENS, "progress": False}

    def run_extract(cache, **more) -> tuple[float, int]:
        folder = tempfile.mkdtemp(prefix="layerscope-gpu-") if cache else None
        try:
            reset_peak(device)
            sync(device)
            t0 = time.perf_counter()
            acts = extract(lm, texts, cache=folder or False, **kwargs, **more)
            sync(device)
            seconds = time.perf_counter() - t0
            st = acts.stats
            print(f"  extract{' +cache' if cache else ''} {more or ''}: {seconds * 1e3:.0f} ms, {st.batches} batches, "
                  f"waited for the store {st.store_wait_s * 1e3:.0f} ms, writer busy {st.store_write_s * 1e3:.0f} ms",
                  file=sys.stderr, flush=True)
            return seconds, acts.stats.batches
        finally:
            if folder:
                shutil.rmtree(folder, ignore_errors=True)

    def run_raw(size: int) -> float:
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        raw_pass(lm, ids, size)
        return time.perf_counter() - t0

    def run_raw_planned() -> float:
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        raw_planned(lm, ids, lm.info.n_layers + 1 if "mean_no_massive" in poolings else 0)
        return time.perf_counter() - t0

    run_extract(False)  # warm-up: kernels, allocator
    for size in RAW_BATCH_SIZES:
        run_raw(size)
    run_raw_planned()
    plain, cached, half, planned = Timing(), Timing(), Timing(), Timing()
    raw = {size: Timing() for size in RAW_BATCH_SIZES}
    batches = 0
    for _ in range(repeats):
        seconds, batches = run_extract(False)
        plain.add(seconds, peak_gib(device))
        seconds, _ = run_extract(True)
        cached.add(seconds, peak_gib(device))
        seconds, _ = run_extract(False, store_dtype="float16")
        half.add(seconds, peak_gib(device))
        for size in RAW_BATCH_SIZES:
            raw[size].add(run_raw(size), peak_gib(device))
        planned.add(run_raw_planned(), peak_gib(device))
    best = min(raw, key=lambda size: raw[size].seconds)
    n = len(texts)
    print(f"  extract with a float16 store (half the bytes): {n / half.seconds:.1f} texts/s, "
          f"{half.seconds / raw[best].seconds:.2f}x raw", file=sys.stderr)
    print(f"  raw at extract's own batches: {n / planned.seconds:8.1f} texts/s; extract / it = "
          f"{plain.seconds / planned.seconds:.2f}x (the cost of extract's work, its batch plan aside)", file=sys.stderr)
    for size in RAW_BATCH_SIZES:
        print(f"  raw, {size:>3} texts per batch: {n / raw[size].seconds:8.1f} texts/s, "
              f"peak {raw[size].peak_gib:.1f} GiB", file=sys.stderr)
    row = {
        "model": name, "dtype": str(dtype).removeprefix("torch."), "params_b": params / 1e9,
        "texts": n, "extract_tps": n / plain.seconds,
        "cached_tps": n / cached.seconds, "raw_tps": n / raw[best].seconds, "raw_batch": best,
        "plan_texts_per_batch": n / batches, "plan_token_budget": budget, "extract_peak": plain.peak_gib,
        "cached_peak": cached.peak_gib, "raw_peak": raw[best].peak_gib, "ratio": plain.seconds / raw[best].seconds,
        "ratio_cached": cached.seconds / raw[best].seconds, "ratio_planned": plain.seconds / planned.seconds,
    }
    if profile:
        try:
            print(f"\n{name}, torch.profiler:\n{profile_extract(lm, texts, poolings)}\n", flush=True)
        except Exception as exc:  # noqa: BLE001 - the timings above still count
            print(f"{name}: the profile failed: {type(exc).__name__}: {exc}", flush=True)
    return row  # the model is freed with this frame: the caller collects it


def profile_extract(lm, texts: list[str], poolings: tuple[str, ...]) -> str:
    """One ``extract(cache=False)`` under ``torch.profiler``: a summary per batch (wall time, the GPU's kernel time,
    the host's synchronize calls) and the ten ops with the most CUDA time, as markdown for the README."""
    from torch.profiler import ProfilerActivity, profile

    from layerscope import extract

    device = torch.device("cuda")
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        acts = extract(lm, texts, cache=False, poolings=poolings, max_length=MAX_TOKENS, progress=False)
        sync(device)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
    waits = {e.key: e.count for e in events if "Synchronize" in e.key or e.key == "cudaStreamWaitEvent"}
    copies = {e.key: e.count for e in events if e.key.startswith("cudaMemcpy")}
    batches = acts.stats.batches
    lines = [f"extract of {len(texts)} texts in {batches} batches: {wall * 1e3:.0f} ms wall, "
             f"{kernel_us / 1e3:.0f} ms of GPU kernels ({kernel_us / 1e6 / wall:.0%} busy); per batch "
             f"{wall * 1e3 / batches:.1f} ms wall, {kernel_us / 1e3 / batches:.1f} ms kernels",
             f"host waits (calls in the whole extract): {waits or 'none'}; copies: {copies}; the passes waited "
             f"{acts.stats.store_wait_s * 1e3:.0f} ms for the store, whose writer was busy "
             f"{acts.stats.store_write_s * 1e3:.0f} ms", "",
             "| op | CUDA time ms | calls |", "|---|---:|---:|"]
    top = sorted((e for e in events if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)
    for e in top[:14]:
        lines.append(f"| `{e.key[:60]}` | {e.self_device_time_total / 1e3:.1f} | {e.count} |")
    from layerscope.engine.forward.batching import tokenize

    ids = tokenize(lm.tokenizer, texts, MAX_TOKENS)
    size = -(-len(texts) // batches)  # the bare pass in batches as many texts as extract's
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        with torch.inference_mode():
            raw_pass(lm, ids, size)
        wall = time.perf_counter() - start
    kernel_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    lines += ["", f"the bare pass in batches of {size} under the same profiler: {wall * 1e3:.0f} ms wall, "
              f"{kernel_us / 1e3:.0f} ms of GPU kernels ({kernel_us / 1e6 / wall:.0%} busy)"]
    return "\n".join(lines)


def table(rows: list[dict], device_label: str, tokens: np.ndarray, poolings: tuple[str, ...] = POOLINGS) -> str:
    head = (f"{device_label}; {rows[0]['dtype']} random weights; {rows[0]['texts']} texts of "
            f"{tokens.min()}-{tokens.max()} tokens (median {int(np.median(tokens))}); every layer, poolings "
            f"{', '.join(poolings)}, NLL; best of interleaved repeats\n\n")
    lines = [
        "| model | params | extract texts/s | extract+cache texts/s | raw texts/s (batch) | "
        "extract / raw time | extract / raw at its batches | extract+cache / raw time | auto plan texts/batch | "
        "peak GPU GiB extract / +cache / raw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params_b']:.2f} B | {r['extract_tps']:.0f} | {r['cached_tps']:.0f} | "
            f"{r['raw_tps']:.0f} ({r['raw_batch']}) | {r['ratio']:.2f} | {r['ratio_planned']:.2f} | "
            f"{r['ratio_cached']:.2f} | "
            f"{r['plan_texts_per_batch']:.0f} | {r['extract_peak']:.1f} / {r['cached_peak']:.1f} / "
            f"{r['raw_peak']:.1f} |"
        )
    return head + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=None, help="which shapes (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny-cpu", action="store_true", help="tiny shapes on the CPU: checks the code path only")
    parser.add_argument("--poolings", default=",".join(POOLINGS),
                        help="comma-separated poolings, or 'default' for extract's default set")
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: SmolLM2's from the zoo)")
    parser.add_argument("--profile", action="store_true", help="a torch.profiler summary of one extract (CUDA)")
    args = parser.parse_args()
    if not args.tiny_cpu and not torch.cuda.is_available():
        print("extract_gpu.py needs a CUDA GPU and none is available (torch.cuda.is_available() is False); run it "
              "on a machine with one, or pass --tiny-cpu to check the code path on tiny shapes", file=sys.stderr)
        return 2
    os.environ.setdefault("LAYERSCOPE_PROGRESS", "0")
    device = torch.device("cpu") if args.tiny_cpu else torch.device("cuda")
    configs = model_configs(args.tiny_cpu)
    names = args.models or list(configs)
    unknown = sorted(set(names) - set(configs))
    if unknown:
        parser.error(f"unknown model {unknown}; choose from {', '.join(configs)}")
    from layerscope.engine.forward.pooling import ALL_POOLINGS

    poolings = tuple(ALL_POOLINGS) if args.poolings == "default" else tuple(args.poolings.split(","))
    tokenizer = smollm2_tokenizer(args.tokenizer)
    texts = seed_texts(tokenizer)
    tokens = np.array([min(len(x), MAX_TOKENS) for x in tokenizer(texts)["input_ids"]])
    label = (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}" if device.type == "cuda"
             else f"CPU ({torch.get_num_threads()} threads, tiny shapes: a code-path check, not a benchmark)")
    rows = []
    for name in names:
        rows.append(bench_model(name, configs[name], device, tokenizer, texts, args.repeats, poolings,
                                profile=args.profile and device.type == "cuda"))
        gc.collect()  # the last model's weights go before the next is built
        if device.type == "cuda":
            torch.cuda.empty_cache()
        r = rows[-1]
        print(f"{name}: extract {r['extract_tps']:.0f} texts/s, extract+cache {r['cached_tps']:.0f}, raw "
              f"{r['raw_tps']:.0f} at {r['raw_batch']} per batch; extract / raw = {r['ratio']:.2f}; auto plan "
              f"{r['plan_texts_per_batch']:.0f} texts per batch (budget {r['plan_token_budget']:,} tokens); peak "
              f"GPU {r['extract_peak']:.1f} / {r['cached_peak']:.1f} / {r['raw_peak']:.1f} GiB", flush=True)
    print()
    print(table(rows, label, tokens, poolings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
