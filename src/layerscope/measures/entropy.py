"""Matrix entropy of a prompt's token states ("prompt entropy").

    m = matrix_entropy(z)               # z: (n_tokens, d) one text's states at one layer, the authors' convention
    m = matrix_entropy(z, "raw")        # the formula on the raw states
    m.entropy, m.normalised_entropy, m.effective_rank
    mean = mean_prompt_entropy(states)  # states: an iterable of (n_tokens, d) arrays, one per text
    h = gram_entropy(k[np.ix_(u, u)], d)    # the same from a subset of one raw Gram matrix k = z z^T (n <= d)
    mean.entropy, mean.normalised_entropy, mean.effective_rank, mean.n_texts, mean.n_skipped

The alpha = 1 matrix entropy of Skean et al. 2025 ("Layer by Layer: Uncovering Hidden Representations in
Language Models"): a Gram matrix K of the token states (float64), its eigenvalues lambda >= 0 normalised to
p = lambda / sum(lambda), and S = -sum p log p (natural log, 0 log 0 = 0). Low S: the tokens share a few
directions (compressed); high S: they spread over many.

Two conventions for K (``CONVENTIONS``):

- ``"skean"`` (the default): what the authors' released code computes (their ``metric_utils`` in the
  ``information_flow`` repository): centre the tokens on their mean, scale every row to unit length, K = z z^T
  (z^T z when there are more tokens than dimensions, N > D), negative entries clamped to 0. Values match the
  paper's figures; a token equal to the mean has no direction and is an error.
- ``"raw"``: K = z z^T of the states as given (not centred, not normalised), the paper's formula read literally;
  layerscope's convention before 0.x. Values differ several-fold from the authors' (one huge outlier dimension
  dominates raw states), so say which one a number is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import LayerscopeError


@dataclass(frozen=True)
class MatrixEntropy:
    """``entropy`` S in nats; ``normalised_entropy`` S / log(min(n, d)), in [0, 1] (min(n, d) bounds the rank;
    0 when min(n, d) = 1, where S is 0 too); ``effective_rank`` exp(S), in [1, min(n, d)]."""

    entropy: float
    normalised_entropy: float
    effective_rank: float


@dataclass(frozen=True)
class MeanPromptEntropy:
    """The mean of each :class:`MatrixEntropy` number over ``n_texts`` texts; ``n_skipped`` one-token texts
    were left out."""

    entropy: float
    normalised_entropy: float
    effective_rank: float
    n_texts: int
    n_skipped: int


CONVENTIONS = ("skean", "raw")


def matrix_entropy(z: np.ndarray, convention: str = "skean") -> MatrixEntropy:
    """The matrix entropy of z (n, d) in ``convention`` (module docstring). In the raw convention from the smaller
    of z z^T (n x n) and z^T z (d x d), which share their nonzero eigenvalues. Negative eigenvalues from rounding,
    and positive ones below lambda_max max(n, d) eps (numpy's ``matrix_rank`` tolerance), count as 0: round-off
    adds no tiny p to a rank-deficient z."""
    if convention not in CONVENTIONS:
        raise ValueError(f"matrix entropy convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or 0 in z.shape:
        raise ValueError(f"z has shape {z.shape}; pass a non-empty 2-D array (n tokens, d features)")
    if not np.isfinite(z).all():
        raise LayerscopeError(
            "token states hold NaN or inf; a matrix entropy needs finite states, so run the "
            "model in float32 and check its weights"
        )
    n, d = z.shape
    if convention == "skean":
        z = z - z.mean(axis=0)
        norms = np.linalg.norm(z, axis=1)
        if not (norms > 0).all():
            raise ValueError("a token state equals the mean of the tokens, so it has no direction to normalise "
                             "(two identical tokens in a 2-token text?); use convention='raw' or longer texts")
        z = z / norms[:, None]
    gram = z @ z.T if n <= d else z.T @ z
    if convention == "skean":
        gram = np.clip(gram, 0.0, None)
    eigenvalues = np.linalg.eigvalsh(gram)
    largest = eigenvalues.max()
    if largest <= 0:
        raise ValueError(
            "z is all zeros, so its Gram matrix has no spectrum to take an entropy of; check where the states come from"
        )
    eigenvalues[eigenvalues < largest * max(n, d) * np.finfo(np.float64).eps] = 0.0
    p = eigenvalues[eigenvalues > 0] / eigenvalues.sum()
    entropy = float(-np.sum(p * np.log(p)))
    bound = np.log(min(n, d))
    return MatrixEntropy(entropy, entropy / bound if bound > 0 else 0.0, float(np.exp(entropy)))


def gram_entropy(k: np.ndarray, d: int, convention: str = "skean") -> float:
    """The normalised matrix entropy of m states in ``d`` dimensions from their raw (m, m) Gram matrix k = z z^T,
    without the states: the same number as ``matrix_entropy(z, convention).normalised_entropy`` when m <= d (for
    many subsets of one set of states, each costs an m x m eigenproblem and no product with d). The authors'
    convention centres (k - row means - column means + mean) and scales by the diagonal before the clamp. NaN
    where the entropy is undefined (all zeros; a state equal to the mean). m > d in the authors' convention needs
    the d x d matrix: pass the states to :func:`matrix_entropy`."""
    k = np.asarray(k, dtype=np.float64)
    m = len(k)
    if convention == "skean":
        if m > d:
            raise ValueError(f"{m} states in {d} dimensions: the authors' convention uses z^T z, so pass the states "
                             "to matrix_entropy")
        k = k - k.mean(axis=0) - k.mean(axis=1)[:, None] + k.mean()
        scale = np.sqrt(np.clip(np.diag(k), 0.0, None))
        if not (scale > 0).all():
            return float("nan")
        k = np.clip(k / np.outer(scale, scale), 0.0, None)
    elif convention != "raw":
        raise ValueError(f"matrix entropy convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")
    values = np.linalg.eigvalsh(k)
    largest = values[-1]
    if not largest > 0 or min(m, d) < 2:
        return float("nan") if not largest > 0 else 0.0
    values = np.where(values >= largest * max(m, d) * np.finfo(np.float64).eps, values, 0.0)
    p = values[values > 0] / values.sum()
    return float(-(p * np.log(p)).sum() / np.log(min(m, d)))


def mean_prompt_entropy(texts_states: Iterable[np.ndarray], convention: str = "skean") -> MeanPromptEntropy:
    """:func:`matrix_entropy`'s three numbers averaged over texts, each text's (n_tokens, d) states at one layer.

    A text with a single token has one eigenvalue and entropy 0 whatever its state, so it says nothing about
    spread: it is skipped and counted in ``n_skipped``. Raises ValueError when no text has 2 or more tokens.
    """
    sums = np.zeros(3)
    used = skipped = 0
    for z in texts_states:
        if np.ndim(z) == 2 and np.shape(z)[0] == 1:
            skipped += 1
            continue
        m = matrix_entropy(z, convention)
        sums += (m.entropy, m.normalised_entropy, m.effective_rank)
        used += 1
    if used == 0:
        raise ValueError(
            f"no text has 2 or more tokens ({skipped} one-token texts skipped); a prompt entropy "
            "needs several token states per text, so pass longer texts"
        )
    mean = sums / used
    return MeanPromptEntropy(float(mean[0]), float(mean[1]), float(mean[2]), used, skipped)
