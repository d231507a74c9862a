"""A naive-loop oracle for the family-wise p of sign flips (layerscope.study.sensitivity.sign_flips): for each
ordering of y (all n! of them), every column's r by np.corrcoef, every consecutive pair whose r have
opposite signs, Williams' t by the textbook formula (Steiger 1980, eq. 7), and the largest |t|."""

import itertools

import numpy as np


def williams_t(r12: float, r13: float, r23: float, n: int) -> float:
    """Williams' t of r12 vs r13 (two correlations sharing variable 1), written out term by term."""
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    return (r12 - r13) * np.sqrt((n - 1) * (1 + r23) / (2 * (n - 1) / (n - 3) * det
                                                        + ((r12 + r13) / 2) ** 2 * (1 - r23) ** 3))


def max_t_of(x: np.ndarray, y: np.ndarray) -> float:
    """The largest |Williams' t| over the sign flips of r(x[:, i], y) between consecutive columns (0: none)."""
    rs = [np.corrcoef(x[:, i], y)[0, 1] for i in range(x.shape[1])]
    best = 0.0
    for i in range(len(rs) - 1):
        if rs[i] * rs[i + 1] < 0:
            t = williams_t(rs[i + 1], rs[i], np.corrcoef(x[:, i], x[:, i + 1])[0, 1], len(y))
            best = max(best, abs(t))
    return best


def hand_null(x, y) -> list[float]:
    """The largest |t| of every ordering of y (all n! of them, by itertools.permutations)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return [max_t_of(x, y[list(order)]) for order in itertools.permutations(range(len(y)))]


def hand_random_null(x, y, n_permutations: int, seed: int) -> list[float]:
    """The largest |t| of ``n_permutations`` random orderings of y (``np.random.default_rng(seed)``)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    return [max_t_of(x, y[rng.permutation(len(y))]) for _ in range(n_permutations)]


def hand_p_fwer(x, y, t: float, null: list[float] | None = None) -> float:
    """#{orderings of y whose max |t| >= |t|} / n!, every ordering enumerated (a draw within 1e-6 of |t|,
    relative, is a tie and counts: the observed order is one of the orderings). ``null``: hand_null(x, y)."""
    draws = hand_null(x, y) if null is None else null
    return sum(d >= abs(t) * (1 - 1e-6) for d in draws) / len(draws)
