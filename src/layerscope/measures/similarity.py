"""How alike two layers' representations are, and how much one block changes the token states.

    linear_cka(x, y)                    # x: (n, d1), y: (n, d2), the same n inputs -> float in [0, 1]
    cka_matrix(layers)                  # layers: L arrays (n, d) -> (L, L), symmetric
    cka_matrix(layers_a, layers_b)      # two models on the same n inputs -> (La, Lb)
    cka_matrix(layers, max_texts=500, seed=0)       # a seeded subset of 500 of the n rows
    block_influence(h, h_next)          # (n_tokens, d) states entering and leaving a block -> float
    angular_distance(h, h_next)         # (n, d) each, e.g. each text's last token -> float in [0, 1]

Linear CKA (Kornblith et al. 2019, "Similarity of Neural Network Representations Revisited"):
with the columns of X and Y centred,

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) = <Kc, Lc>_F / (||Kc||_F ||Lc||_F)

where Kc = Xc Xc^T and Lc = Yc Yc^T are the centred n x n Gram matrices. Each layer is turned once into
its kernel normalised to Frobenius norm 1, Kc / ||Kc||_F, and every CKA entry is the Frobenius inner
product of two of them. That kernel is kept in whichever form is smaller: the n x n matrix itself when
d >= n, else the scaled centred states F = Xc / sqrt(||Xc^T Xc||_F) (n x d, with F F^T = Kc / ||Kc||_F),
so an inner product costs d1 d2 n (the d x d "feature" route) or n^2 (the Gram route) and no n x n matrix
is built for a narrow layer. All arithmetic is float64.

A layer whose n rows are all equal (centred to zero) has no kernel; its CKA with anything is NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import LayerscopeError, check_finite_rows

Layers = Iterable[np.ndarray] | Callable[[], Iterable[np.ndarray]]


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of x (n, d1) and y (n, d2), whose row i describes the same input in both; float64.

    Computed by the cheaper route for these shapes: the feature products Yc^T Xc, Xc^T Xc, Yc^T Yc (d x d)
    when the widths are small next to n, else the centred n x n Gram matrices. NaN when the rows of x, or
    of y, are all equal (no variance to compare).
    """
    x, y = _states(x, "x"), _states(y, "y")
    if len(x) != len(y):
        raise ValueError(
            f"x has {len(x)} rows and y has {len(y)}; CKA compares the same n inputs in both, "
            "so pass states of the same texts (or tokens) in the same order"
        )
    (n, d1), d2 = x.shape, y.shape[1]
    form = "states" if d1 * d2 + d1 * d1 + d2 * d2 <= n * (d1 + d2) else "gram"  # the cheaper route
    return _inner(_kernel(x, form), _kernel(y, form))


def cka_matrix(
    layers_a: Layers, layers_b: Layers | None = None, max_texts: int | None = None, seed: int = 0
) -> np.ndarray:
    """Linear CKA between every layer of ``layers_a`` and every layer of ``layers_b``: (La, Lb) float64.

    ``layers_a`` (and ``layers_b``): L arrays (n, d_l), one per layer, with the same n rows (the same inputs,
    in the same order) in every layer of both; a list, a generator, an (L, n, d) array, or a callable taking
    no arguments that returns one of those. Layers are read one at a time and each is reduced at once to its
    normalised kernel (module docstring), so the memory held is about 8 n min(n, d_l) bytes per layer, over
    the La + Lb layers (n after ``max_texts``), plus the one layer being read: 500 texts of width 576 take
    2 MB a layer. Without ``layers_b`` the matrix compares ``layers_a`` with itself: it is exactly
    symmetric, and its diagonal is 1 up to float rounding (about 1e-15; it is not forced).

    ``max_texts``: when n is larger, CKA uses a random subset of that many rows, the same rows in every layer
    of both models, drawn with ``np.random.default_rng(seed)`` (so a seed gives the same subset every time);
    the default None uses all n rows.
    """
    kernels_a, rows = _kernels(layers_a, "layers_a", None, max_texts, seed)
    if layers_b is None:
        size = len(kernels_a)
        out = np.empty((size, size))
        for i in range(size):
            for j in range(i, size):
                out[i, j] = out[j, i] = _inner(kernels_a[i], kernels_a[j])
        return out
    kernels_b, _ = _kernels(layers_b, "layers_b", rows, max_texts, seed)
    return np.array([[_inner(a, b) for b in kernels_b] for a in kernels_a]).reshape(len(kernels_a), len(kernels_b))


def block_influence(h: np.ndarray, h_next: np.ndarray, mask: np.ndarray | None = None) -> float:
    """ShortGPT's Block Influence (Men et al. 2024): the mean over tokens of 1 - cos(h_t, h_next_t).

    h, h_next: (n_tokens, d) token states entering and leaving a block (or any two layers), row t the same
    token in both; ``mask`` (n_tokens,) bool keeps only the tokens marked True (e.g. not padding). 0 when
    the block leaves every state's direction unchanged, up to 2.
    """
    h, h_next = _pair(h, h_next, mask)
    return float(np.mean(1.0 - _row_cosines(h, h_next)))


def angular_distance(h: np.ndarray, h_next: np.ndarray) -> float:
    """Mean over rows of arccos(cos(h_i, h_next_i)) / pi (Gromov et al. 2024, "The Unreasonable
    Ineffectiveness of the Deeper Layers"), with cos clipped to [-1, 1]: 0 for the same direction, 0.5 for
    orthogonal, 1 for opposite. h, h_next: (n, d), usually each text's last token at two depths."""
    h, h_next = _pair(h, h_next, None)
    return float(np.mean(np.arccos(np.clip(_row_cosines(h, h_next), -1.0, 1.0)) / np.pi))


def _states(x: np.ndarray, name: str) -> np.ndarray:
    """x as float64 (n, d), n >= 2, every entry finite."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} has shape {x.shape}; pass a 2-D array (n inputs, d features)")
    if len(x) < 2:
        raise ValueError(f"{name} has {len(x)} row(s); CKA needs at least 2 inputs")
    check_finite_rows(x, name, "CKA")
    return x


def _kernel(x: np.ndarray, form: str | None = None) -> tuple[str, np.ndarray] | None:
    """The centred kernel of x (n, d) scaled to Frobenius norm 1, as ("gram", (n, n)) or as ("states", F (n, d))
    with F F^T the same matrix: ``form``, or by default the smaller one; None when every row of x is the same."""
    xc = x - x.mean(axis=0)
    n, d = xc.shape
    if form == "states" or (form is None and d < n):
        norm = np.linalg.norm(xc.T @ xc)  # ||Xc^T Xc||_F = ||Xc Xc^T||_F
        return ("states", xc / np.sqrt(norm)) if norm > 0 else None
    gram = xc @ xc.T
    norm = np.linalg.norm(gram)
    return ("gram", gram / norm) if norm > 0 else None


def _inner(a: tuple[str, np.ndarray] | None, b: tuple[str, np.ndarray] | None) -> float:
    """Frobenius inner product of two normalised kernels (NaN if either is missing)."""
    if a is None or b is None:
        return float("nan")
    (kind_a, ma), (kind_b, mb) = a, b
    if kind_a == "gram" and kind_b == "gram":
        return float(np.vdot(ma, mb))
    if kind_a == "states" and kind_b == "states":
        return float(np.sum(np.square(mb.T @ ma)))
    gram, states = (ma, mb) if kind_a == "gram" else (mb, ma)
    return float(np.sum((gram @ states) * states))  # tr(F^T G F) = <G, F F^T>


def _kernels(
    layers: Layers, name: str, rows: _Rows | None, max_texts: int | None, seed: int
) -> tuple[list[tuple[str, np.ndarray] | None], _Rows]:
    """Each layer's normalised kernel, read one layer at a time, on ``rows`` (drawn from the first layer read
    when None), and those rows."""
    if callable(layers):
        layers = layers()
    kernels = []
    for index, layer in enumerate(layers):
        x = _states(layer, f"{name}[{index}]")
        if rows is None:
            rows = _Rows.draw(len(x), max_texts, seed)
        if len(x) != rows.n:
            raise ValueError(
                f"{name}[{index}] has {len(x)} rows but the first layer read has {rows.n}; every "
                "layer (of both models) needs the states of the same inputs, in the same order"
            )
        kernels.append(_kernel(x if rows.index is None else x[rows.index]))
    if not kernels:
        raise ValueError(f"{name} holds no layers; pass at least one (n, d) array")
    return kernels, rows


@dataclass(frozen=True)
class _Rows:
    """The rows CKA uses: all ``n`` (``index`` None) or the sorted ``index`` subset of them."""

    n: int
    index: np.ndarray | None

    @classmethod
    def draw(cls, n: int, max_texts: int | None, seed: int) -> _Rows:
        if max_texts is not None and max_texts < 2:
            raise ValueError(f"max_texts={max_texts}; CKA needs at least 2 inputs, so pass 2 or more (or None for all)")
        if max_texts is None or n <= max_texts:
            return cls(n, None)
        return cls(n, np.sort(np.random.default_rng(seed).choice(n, size=max_texts, replace=False)))


def _pair(h: np.ndarray, h_next: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """h, h_next as float64 (n, d) of the same shape, the masked rows only."""
    h = np.asarray(h, dtype=np.float64)
    h_next = np.asarray(h_next, dtype=np.float64)
    if h.ndim != 2 or h.shape != h_next.shape:
        raise ValueError(
            f"h has shape {h.shape} and h_next {h_next.shape}; pass two (n_tokens, d) arrays of the "
            "same shape, row t the same token in both"
        )
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (len(h),):
            raise ValueError(
                f"mask has dtype {mask.dtype} and shape {mask.shape}; pass a bool array of shape "
                f"({len(h)},), True for the tokens to keep"
            )
        h, h_next = h[mask], h_next[mask]
    if len(h) == 0:
        raise ValueError("no token states to compare (empty arrays, or a mask with no True entry)")
    return h, h_next


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """cos(a_i, b_i) for each row: (n, d), (n, d) -> (n,)."""
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise LayerscopeError("token states hold NaN or inf; run the model in float32 and check its weights")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if not (norms > 0).all():
        zero = np.flatnonzero(norms == 0)
        raise LayerscopeError(
            f"{len(zero)} token state(s) are zero vectors (the first is row {zero[0]}), so their "
            "cosine is undefined; leave them out with mask (padding is the usual cause)"
        )
    return np.einsum("nd,nd->n", a, b) / norms
