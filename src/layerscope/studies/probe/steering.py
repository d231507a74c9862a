"""Where pushing the residual stream along a contrast moves the output: the steering half of the probe study.

    out = steer_states(lm, pairs_X, texts, options)    # pairs_X (2 * n_pairs, S, d), rows A0, B0, A1, B1, ...
    out["effect"][s], out["ci"][s], out["band"][s], out["p"][s], out["q"][s], out["effect_neg"][s]

Conventions (the report writes them out):

- The direction at state s is v_s = mean over the training pairs of (h_A - h_B), h the pooled vector the probes
  read (``mean``: a leading BOS left out); state s is the stream entering block s (0: the embeddings' output,
  L: the last block's output, before the final norm).
- alpha * v_s is added at every position of state s of the held-out pairs' texts; a pair's preference is
  NLL(B) - NLL(A), each the mean NLL per scored token; the effect is the mean over held-out pairs of
  preference(steered) - preference(intact), with a percentile bootstrap interval over pairs. Pushing along
  A - B should make A likelier, so a direction the model uses gives a positive effect and -alpha a negative one.
- Control: ``n_random`` directions per state, Gaussian, each scaled to the norm of v_s (seeded); the null band is
  their effects' central ``ci_level`` interval. p asks whether the effect could be one more random direction's: a
  prediction t-test against their effects (:func:`prediction_p`), BH over the states steered. The rank p,
  (1 + #{|random| >= |effect|}) / (1 + n_random), is kept beside it (``p_rank``): with 20 directions it cannot go
  below 1/21, too coarse to survive BH over a dozen states. The random band and p are for the first alpha.
- States: 0, ``every``, 2 * ``every``, ... and L (``--steer-every``; 1: every state).
- Held-out pairs: a seeded share ``holdout`` of the pairs (at most ``max_pairs``); ``holdout`` 0 fits and
  measures on every pair (in-sample: marked so in the table's ``split`` column and the report).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ...engine.steering import Steering
from ...progress import steps
from ...stats import bh_qvalues, percentile_ci, resample_indices


@dataclass(frozen=True)
class SteerOptions:
    alphas: tuple[float, ...]
    n_random: int
    holdout: float
    max_pairs: int
    n_bootstrap: int
    ci_level: float
    seed: int
    every: int = 1
    """Steer at states 0, every, 2 * every, ... and always at the last state L."""
    batch_size: int | None = None
    max_length: int | None = None


def split_pairs(n_pairs: int, holdout: float, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training pairs, held-out pairs), each sorted; ``holdout`` 0: every pair in both (in-sample)."""
    if holdout == 0:
        every = np.arange(n_pairs)
        return every, every
    order = np.random.default_rng(seed).permutation(n_pairs)
    n_test = int(min(max_pairs, max(2, round(holdout * n_pairs)), n_pairs - 2))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def directions(X: np.ndarray, train: np.ndarray) -> np.ndarray:
    """(S, d) float64: per state, the mean over the training pairs of A minus B (rows 2i and 2i + 1 of X)."""
    a, b = X[2 * train].astype(np.float64), X[2 * train + 1].astype(np.float64)
    return (a - b).mean(axis=0)


def random_like(v: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, d) Gaussian directions, each with the norm of ``v``."""
    r = rng.standard_normal((n, v.shape[-1]))
    return r * (np.linalg.norm(v) / np.linalg.norm(r, axis=1, keepdims=True))


def preference(nll: np.ndarray) -> np.ndarray:
    """(..., n_pairs) NLL(B) - NLL(A) from (..., 2 * n_pairs) mean NLL per text, texts A0, B0, A1, B1, ..."""
    return nll[..., 1::2] - nll[..., 0::2]


def boot_ci(diff: np.ndarray, n_bootstrap: int, level: float, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``diff`` (n_pairs,) over pairs."""
    return percentile_ci(diff[resample_indices(len(diff), n_bootstrap, rng)].mean(axis=1), level)


def prediction_p(effect: float, null: np.ndarray) -> float:
    """Two-sided p that ``effect`` comes from the distribution the random directions' effects ``null`` (n,) are a
    sample of: a prediction t-test, t = (effect - mean) / (sd * sqrt(1 + 1/n)) on n - 1 degrees of freedom."""
    n, sd = len(null), float(np.std(null, ddof=1))
    if sd == 0:
        return 1.0 if effect == null[0] else 0.0
    t = (effect - float(np.mean(null))) / (sd * np.sqrt(1 + 1 / n))
    return float(2 * stats.t.sf(abs(t), n - 1))


def steer_states(lm, X: np.ndarray, texts: list[str], options: SteerOptions) -> dict:
    """Steering at every state along the side contrast of a pair dataset: see the module docstring."""
    n_pairs, n_states = len(texts) // 2, X.shape[1]
    train, test = split_pairs(n_pairs, options.holdout, options.max_pairs, options.seed)
    v = directions(X, train)
    rows = np.stack([2 * test, 2 * test + 1], axis=1).ravel()
    steering = Steering(lm, [texts[i] for i in rows], batch_size=options.batch_size, max_length=options.max_length)
    intact = preference(steering.intact())
    rng = np.random.default_rng(options.seed + 1)
    alphas = tuple(options.alphas)
    out = {k: np.full((n_states, len(alphas)), np.nan) for k in ("effect", "ci_lo", "ci_hi", "effect_neg")}
    out.update({k: np.full(n_states, np.nan) for k in ("band_lo", "band_hi", "p", "p_rank")})
    out["norm"] = np.linalg.norm(v, axis=1)
    chosen = sorted({*range(0, n_states, options.every), n_states - 1})
    for s in steps(chosen, "probe: steering per state", "state"):
        signed = (*alphas, *(-a for a in alphas))
        nll = steering.steered(s, v[s][None], alphas=signed)[0]                 # (2 * n_alphas, n_texts)
        effects = preference(nll) - intact                                      # (2 * n_alphas, n_test)
        for j in range(len(alphas)):
            out["effect"][s, j] = effects[j].mean()
            out["ci_lo"][s, j], out["ci_hi"][s, j] = boot_ci(effects[j], options.n_bootstrap, options.ci_level, rng)
            out["effect_neg"][s, j] = effects[len(alphas) + j].mean()
        null = preference(steering.steered(s, random_like(v[s], options.n_random, rng), alphas=alphas[:1])[:, 0])
        null = (null - intact).mean(axis=1)                                     # (n_random,)
        out["band_lo"][s], out["band_hi"][s] = percentile_ci(null, options.ci_level)
        out["p"][s] = prediction_p(out["effect"][s, 0], null)
        out["p_rank"][s] = (1 + np.sum(np.abs(null) >= abs(out["effect"][s, 0]))) / (1 + len(null))
        steering.drop(s)
    out["q"] = bh_qvalues(out["p"])  # NaN (not steered) stays NaN: BH over the states steered
    out.update(alphas=alphas, n_test=len(test), n_train=len(train), in_sample=options.holdout == 0, states=chosen,
               blocks_run=getattr(steering, "blocks_run", None))
    return out
