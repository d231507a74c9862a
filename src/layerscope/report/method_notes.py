"""What ``--compat seed`` (the notebooks' method) and the layerscope default differ in, per study.

    for seed, default in COMPAT_DIFFERENCES["phases"]: ...
"""

from __future__ import annotations

_PAIRS = [
    ("mean pooling drops position 0 always (on a model without BOS: the first word)",
     "mean pooling drops a BOS token, found by its id, and nothing else"),
    ("every 4th layer plus the last", "every layer"),
    ("Pearson r with its t-test p", "Pearson r and Spearman rho, a permutation p, Benjamini-Hochberg q over "
     "layers; significance judged on q"),
    ("preference = difference of mean NLL per token", "also the difference of summed NLL, and the token-length "
     "difference of each pair with its correlation to the preference"),
]

COMPAT_DIFFERENCES: dict[str, list[tuple[str, str]]] = {
    "divergence": [*_PAIRS, ("no interval for category-level r", "Fisher-z interval for category-level r")],
    "scaling": [*_PAIRS[:3], ("no interval for category-level r", "Fisher-z interval for category-level r")],
    "phases": [*_PAIRS,
               ("percentile bootstrap, fresh resamples per layer from np.random.seed",
                "BCa bootstrap (scipy.stats.bootstrap) seeded from a numpy Generator"),
               ("significant when the bootstrap interval excludes 0", "significant when q < 1 - CI level"),
               ("each pair's centroid includes the pair itself",
                "leave-one-out centroids (the report compares both)")],
    "anisotropy": [("every token state, position 0 included, headline only",
                    "the same headline plus the profile without position 0 and with outlier dimensions removed")],
    "ablation": [("per-tensor scale, every parameter named 'weight' (norms included), texts cut at 256 tokens",
                  "per-channel scale on linear weights, full texts; the notebook's scheme is run beside it")],
}
"""(notebooks, layerscope default) for each setting that differs."""
