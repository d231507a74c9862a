"""Bootstrap over pairs of the phase means of r: resample pairs, recompute r at every tested layer, average.

    batches = index_batches(n_pairs, 10_000, seed=42, values_per_index=k)
    samples = phase_bootstrap(x, y, {"early": [0, 1], "late": [4, 5]}, batches)   # {name: (10_000,)}
    lo, hi = interval(samples["late - early"], level=0.95)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...stats import BATCH_VALUES, pearson_along, percentile_ci, resample_indices
from ...study.finite import defined


def index_batches(n: int, n_resamples: int, seed: int, values_per_index: int = 1) -> Iterator[np.ndarray]:
    """``for idx in index_batches(n, 10_000, seed, k)``: (b, n) resample indices, drawn with replacement from
    ``np.random.default_rng(seed)``, in batches of at most ``BATCH_VALUES / (n * values_per_index)`` resamples."""
    rng = np.random.default_rng(seed)
    batch = max(1, BATCH_VALUES // max(1, n * values_per_index))
    for start in range(0, n_resamples, batch):
        yield resample_indices(n, min(batch, n_resamples - start), rng)


def phase_bootstrap(x: np.ndarray, y: np.ndarray, groups: dict[str, list[int]],
                    batches) -> dict[str, np.ndarray]:
    """Bootstrap distribution over pairs of each group's mean r: ``{name: (n_resamples,)}`` plus
    ``"late - early"`` when both groups exist.

    x: (n, k) one column per tested layer, y: (n,); ``groups`` maps a name to column indices; ``batches`` yields
    (b, n) resample indices (pairs resampled together). NaN for a resample where an r is undefined.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    out: dict[str, list[np.ndarray]] = {name: [] for name in groups}
    for idx in batches if groups else ():
        r = pearson_along(np.moveaxis(x[idx], 1, 2), y[idx][:, None, :])  # (b, k, n) with (b, 1, n) -> (b, k)
        for name, columns in groups.items():
            out[name].append(r[:, columns].mean(axis=1))
    samples = {name: np.concatenate(parts) if parts else np.empty(0) for name, parts in out.items()}
    if "early" in samples and "late" in samples:
        samples["late - early"] = samples["late"] - samples["early"]
    return samples


def interval(samples: np.ndarray, level: float) -> tuple[float | None, float | None]:
    """The percentile interval of the finite bootstrap ``samples`` (n_resamples,); (None, None) when none is."""
    lo, hi = percentile_ci(samples[np.isfinite(samples)], level)
    return defined(lo), defined(hi)
