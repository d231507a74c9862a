"""The massive-token test on a GPU: the count search (the CUDA default) against the 16-bit histogram it replaced,
per layer of a batch at the 8B shape, and both against ``np.median`` in a loop over texts.

    python benchmarks/massive_gpu.py                   # needs a CUDA GPU
    python benchmarks/massive_gpu.py --texts 92 --tokens 128 --d 4096 --repeats 20

States: bfloat16 (and float16, float32) normal values with a few planted spikes of 50-1000x the median per text,
padding on the right. Prints the milliseconds per layer of each method (CUDA events, median of ``--repeats``), their
ratio, the flags that differ from the loop (must be 0), and whether the count search synchronised with the host
(``torch.cuda.set_sync_debug_mode("error")`` around it).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch

from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask


def states(rng: np.random.Generator, B: int, T: int, d: int, dtype: torch.dtype, device: str):
    lengths = rng.integers(max(2, T // 4), T + 1, size=B)
    lengths[0] = T
    real = torch.arange(T)[None, :] < torch.from_numpy(lengths)[:, None]
    h = torch.from_numpy(rng.standard_normal((B, T, d), dtype=np.float32))
    for b in range(B):  # spikes around the cut: 50x to 1000x a typical |value|
        for t in rng.integers(0, lengths[b], size=3):
            h[b, t, rng.integers(0, d)] = float(rng.choice([50, 99.5, 100.5, 150, 1000])) * 0.6745
    h[~real] = float("nan")  # padding holds anything
    return h.to(dtype).to(device), real.to(device)


def naive(h: np.ndarray, real: np.ndarray, ratio: float) -> np.ndarray:
    flags = np.zeros(real.shape, dtype=bool)
    for b in range(len(real)):
        mag = np.abs(h[b][real[b]]).astype(np.float32)
        flags[b, real[b]] = mag.max(axis=1) > np.float32(ratio) * np.median(mag)
    return flags


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=92)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}; batch {args.texts} texts x {args.tokens} tokens x d {args.d}")
    rng = np.random.default_rng(0)
    failed = False
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        h, real = states(rng, args.texts, args.tokens, args.d, dtype, "cuda")
        expect = naive(h.float().cpu().numpy(), real.cpu().numpy(), MASSIVE_RATIO)
        methods = ["count", "bits16" if dtype != torch.float32 else "exact"]
        line = []
        for method in methods:
            got = massive_mask(h, real, method=method).cpu().numpy()
            differ = int((got != expect).sum())
            failed |= differ > 0
            ms = timed(lambda method=method, h=h, real=real: massive_mask(h, real, method=method), args.repeats)
            line.append((method, ms, differ))
        torch.cuda.set_sync_debug_mode("error")
        try:
            massive_mask(h, real, method="count")
            synced = "no host sync"
        except RuntimeError as exc:
            synced, failed = f"SYNCED ({str(exc).splitlines()[0]})", True
        finally:
            torch.cuda.set_sync_debug_mode("default")
        (m0, t0, d0), (m1, t1, d1) = line
        print(f"{str(dtype).removeprefix('torch.'):>8}: {m0} {t0:.3f} ms/layer, {m1} {t1:.3f} ms/layer "
              f"({t0 / t1:.2f}x); flags differing from np.median: {m0} {d0}, {m1} {d1} of {int(real.sum())} "
              f"({int(expect.sum())} massive); count: {synced}")
    h, real = states(rng, args.texts, args.tokens, args.d, torch.bfloat16, "cuda")
    for method in ("count", "bits16"):  # where the time goes
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                massive_mask(h, real, method=method)
            torch.cuda.synchronize()
        print(f"\n{method}, bfloat16, 5 calls:")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=50))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
