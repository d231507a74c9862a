"""Anisotropy of a cloud of token states, from its covariance spectrum.

    m = anisotropy_metrics(x)           # x: (N, d) token states of one layer
    m["top1_ratio"], m["effective_rank"], m["eigenvalues"][:100]
    dims = outlier_dims(x)              # "massive" dimensions: mean |x_j| > 100 x the median

The covariance C = Xc^T Xc / (N - 1) is d x d, but its nonzero eigenvalues are those of the
N x N Gram matrix Xc Xc^T / (N - 1) when N <= d (and the squared singular values of Xc
otherwise), so the d x d matrix is never built or decomposed. The d - rank zero eigenvalues
are then clipped to 1e-10 exactly as the notebook clips its d x d eigenvalues, so every
metric equals the d x d computation.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

from ..errors import LayerscopeError

CLIP = 1e-10
EPS = 1e-10


def centered(x: np.ndarray) -> np.ndarray:
    """x - mean(x) in float64 (x: (N, d), N >= 2, every entry finite)."""
    if len(x) < 2:
        raise ValueError("a covariance needs at least 2 token states")
    xc = np.array(x, dtype=np.float64)
    if not np.isfinite(xc).all():
        rows = np.flatnonzero(~np.isfinite(xc).all(axis=1))
        raise LayerscopeError(f"{len(rows)} of {len(xc)} token states hold NaN or inf (the first is row {rows[0]}); "
                              "a covariance spectrum needs finite states, so run the model in float32 and check its "
                              "weights")
    xc -= xc.mean(axis=0)
    return xc


def gram(xc: np.ndarray) -> np.ndarray:
    """Xc Xc^T / (N - 1), both triangles filled."""
    g = scipy.linalg.blas.dsyrk(1.0 / (len(xc) - 1), xc)  # upper triangle only
    lower = np.tril_indices(len(g), -1)
    g[lower] = g.T[lower]
    return g


def covariance_spectrum(x: np.ndarray, top_vector: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """All d covariance eigenvalues, descending and clipped at 1e-10, and (on request) the top
    unit eigenvector (d,). Float64."""
    xc = centered(x)
    return _spectrum(xc, gram(xc) if len(xc) <= xc.shape[1] else None, top_vector)


def _spectrum(xc: np.ndarray, g: np.ndarray | None, top_vector: bool) -> tuple[np.ndarray, np.ndarray | None]:
    n, d = xc.shape
    top = None
    if g is not None:
        if top_vector:
            top = xc.T @ top_eigenpair(g)[1]
        values = scipy.linalg.eigh(g, eigvals_only=True, driver="evr", check_finite=False)
    else:
        if top_vector:
            _, s, vt = scipy.linalg.svd(xc, full_matrices=False, check_finite=False)
            top = vt[0]
        else:
            s = scipy.linalg.svd(xc, compute_uv=False, check_finite=False)
        values = s**2 / (n - 1)
    spectrum = np.zeros(d)
    spectrum[: len(values)] = np.sort(values)[::-1]
    if top is not None and np.linalg.norm(top) > 0:
        top = top / np.linalg.norm(top)
    return np.maximum(spectrum, CLIP), top


def top_eigenpair(sym: np.ndarray) -> tuple[float, np.ndarray]:
    """Largest eigenvalue and its unit eigenvector of a symmetric matrix."""
    n = len(sym)
    if n <= 256:
        values, vectors = scipy.linalg.eigh(sym, subset_by_index=[n - 1, n - 1])
    else:  # a fixed start vector: ones would lie in a centred Gram's null space
        values, vectors = scipy.sparse.linalg.eigsh(sym, k=1, which="LA", v0=np.random.default_rng(0).normal(size=n))
    return float(values[0]), vectors[:, 0]


def metrics_from_spectrum(eigenvalues: np.ndarray) -> dict[str, float]:
    """The notebook's spectrum metrics from all d eigenvalues (descending, clipped)."""
    total = eigenvalues.sum()
    p = eigenvalues / total
    cumulative = np.cumsum(eigenvalues) / total
    return {
        "eigenvalue_variance": float(np.var(eigenvalues)),
        "top1_ratio": float(eigenvalues[0] / total),
        "effective_rank": float(np.exp(-np.sum(p * np.log(p + EPS)))),
        "var_top10": float(cumulative[min(9, len(cumulative) - 1)]),
        "var_top50": float(cumulative[min(49, len(cumulative) - 1)]),
    }


def cos_to_mean(x: np.ndarray) -> float:
    """Mean cosine of each state to the mean state (0 when the mean is ~0)."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0)
    norm = np.linalg.norm(mean)
    if norm <= EPS:
        return 0.0
    return float(np.mean(x @ mean / (np.linalg.norm(x, axis=1) * norm + EPS)))


def outlier_dims(x: np.ndarray, factor: float = 100.0) -> np.ndarray:
    """Dimensions whose mean |activation| over the states exceeds ``factor`` x the median dimension's."""
    magnitude = np.abs(np.asarray(x, dtype=np.float64)).mean(axis=0)
    return np.flatnonzero(magnitude > factor * np.median(magnitude))


def top1_ratio_without(x: np.ndarray, dims: np.ndarray) -> float:
    """top1_ratio of the states with ``dims`` removed."""
    xc = centered(x)
    return _top1_without(xc, gram(xc) if len(xc) <= xc.shape[1] else None, dims)


def _top1_without(xc: np.ndarray, g: np.ndarray | None, dims: np.ndarray) -> float:
    n, d = xc.shape
    rest = d - len(dims)
    if g is None or n > rest:  # thin SVD of the remaining columns (already centred)
        return metrics_from_spectrum(_spectrum(np.delete(xc, dims, axis=1), None, False)[0])["top1_ratio"]
    kept = g - xc[:, dims] @ xc[:, dims].T / (n - 1)  # a rank-k downdate of the Gram matrix
    top, _ = top_eigenpair(kept)
    # trace = sum of all eigenvalues; the rest - rank zero ones are clipped to 1e-10 as everywhere
    return top / (np.trace(kept) + (rest - min(n - 1, rest)) * CLIP)


def anisotropy_metrics(x: np.ndarray) -> dict:
    """Spectrum metrics, cos_to_mean, the eigenvalues, and how much outlier dimensions explain.

    ``outlier_share_top1``: the fraction of the top principal direction lying in the outlier
    dimensions. ``top1_ratio_without_outliers``: top1_ratio once those dimensions are removed.
    """
    x = np.asarray(x, dtype=np.float64)
    dims = outlier_dims(x)
    out = {"cos_to_mean": cos_to_mean(x)}
    xc = centered(x)
    g = gram(xc) if len(xc) <= xc.shape[1] else None
    eigenvalues, top = _spectrum(xc, g, top_vector=len(dims) > 0)
    out.update(metrics_from_spectrum(eigenvalues))
    out["n_outlier_dims"] = int(len(dims))
    out["outlier_dims"] = dims.tolist()
    out["outlier_share_top1"] = float(np.sum(top[dims] ** 2)) if len(dims) else 0.0
    out["top1_ratio_without_outliers"] = (_top1_without(xc, g, dims) if 0 < len(dims) < x.shape[1] - 1
                                          else out["top1_ratio"])
    out["eigenvalues"] = eigenvalues
    return out
