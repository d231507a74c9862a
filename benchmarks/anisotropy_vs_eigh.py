"""Time layerscope's anisotropy path against the notebook's d x d eigendecomposition.

    .venv/bin/python benchmarks/anisotropy_vs_eigh.py [--d 4096] [--tokens 2000] [--layers 3]

Synthetic token states shaped like a transformer's (a shared offset, a decaying spectrum,
one massive dimension in some layers), float32 as a model returns them. For each layer,
in one process:
  layerscope   spectrum.anisotropy_metrics: N x N Gram, outlier analysis included
  d x d        the notebook's compute_anisotropy_metrics: covariance (d x d), eigvalsh,
               a Python loop for the cosines -- in float64 (same precision as layerscope)
               and in float32 (the notebook's own dtype)
Prints the times, the ratios (target >= 10x), and the largest relative difference of
every metric against the float64 d x d values.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from layerscope.measures.spectrum import anisotropy_metrics

METRICS = ("eigenvalue_variance", "top1_ratio", "effective_rank", "cos_to_mean", "var_top10", "var_top50")


def notebook_metrics(embeddings: np.ndarray) -> dict:
    """The notebook's procedure, in our words: d x d covariance, eigvalsh, clip, loop."""
    centred = embeddings - embeddings.mean(axis=0)
    cov = (centred.T @ centred) / (embeddings.shape[0] - 1)
    eigenvalues = np.maximum(np.sort(np.linalg.eigvalsh(cov))[::-1], 1e-10)
    total = eigenvalues.sum()
    p = eigenvalues / total
    cumulative = np.cumsum(eigenvalues) / total
    mean = embeddings.mean(axis=0)
    mean_norm = np.linalg.norm(mean)
    cosines = [np.dot(e, mean) / (np.linalg.norm(e) * mean_norm + 1e-10) for e in embeddings]
    return {"eigenvalue_variance": np.var(eigenvalues), "top1_ratio": eigenvalues[0] / total,
            "effective_rank": np.exp(-np.sum(p * np.log(p + 1e-10))), "cos_to_mean": np.mean(cosines),
            "var_top10": cumulative[9], "var_top50": cumulative[49]}


def synthetic_layers(n: int, d: int, layers: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for layer in range(layers):
        x = rng.normal(size=(n, d)) * np.geomspace(4.0, 0.05, d) + rng.normal(size=d) * 2.0
        if layer % 2:
            x[:, rng.integers(d)] += 400.0 * (1 + rng.random(n))  # a massive dimension
        out.append(x.astype(np.float32))
    return out


def timed(fn, x):
    start = time.perf_counter()
    value = fn(x)
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()

    data = synthetic_layers(args.tokens, args.d, args.layers)
    anisotropy_metrics(data[0][:64, :128])  # warm-up
    ours_total = ref64_total = ref32_total = 0.0
    worst = {m: 0.0 for m in METRICS}
    print(f"N = {args.tokens} tokens, d = {args.d}, {args.layers} layers")
    print(f"{'layer':>5} {'layerscope':>11} {'d x d f64':>10} {'d x d f32':>10} {'f64 ratio':>10} {'outlier dims':>13}")
    for layer, x in enumerate(data):
        ours, t_ours = timed(anisotropy_metrics, x)
        ref64, t_ref64 = timed(notebook_metrics, x.astype(np.float64))
        _, t_ref32 = timed(notebook_metrics, x)
        ours_total, ref64_total, ref32_total = ours_total + t_ours, ref64_total + t_ref64, ref32_total + t_ref32
        for m in METRICS:
            worst[m] = max(worst[m], abs(ours[m] - ref64[m]) / abs(ref64[m]))
        print(f"{layer:>5} {t_ours:>10.2f}s {t_ref64:>9.2f}s {t_ref32:>9.2f}s {t_ref64 / t_ours:>9.1f}x "
              f"{ours['n_outlier_dims']:>13}")
    print(f"total: layerscope {ours_total:.2f}s, d x d float64 {ref64_total:.2f}s, d x d float32 {ref32_total:.2f}s")
    print(f"layerscope vs d x d float64 = {ref64_total / ours_total:5.1f}x   (target >= 10x)")
    print(f"layerscope vs d x d float32 = {ref32_total / ours_total:5.1f}x   (the notebook's dtype)")
    print("largest relative difference vs d x d float64: "
          + ", ".join(f"{m} {v:.1e}" for m, v in worst.items()))


if __name__ == "__main__":
    main()
