"""scikit-learn's L2 logistic regression fitted for many label vectors at once: the permutation nulls of probes.

    theta = fit_batched(z, Y, c=1.0, n_classes=2)   # z (m, r) features, Y (P, m) label codes -> (P, r + 1, k)
    eta = np.einsum("mj,pjk->pmk", np.hstack([z, np.ones((m, 1))]), theta)  # decision values, intercept last

The objective is scikit-learn's (``LogisticRegression(C=c)``, lbfgs, ``sample_weight``): C * the weighted sum of
log-losses + |W|^2 / 2, intercept unpenalised, binary (k = 1 coefficient column, of class 1) for two classes and
multinomial (k = K columns) for more. Each label row runs its own L-BFGS (memory 10, Armijo backtracking, initial
inverse Hessian the diagonal of Böhning's bound C/4 z'z + I, scaled as usual) and stops at max |gradient| <= tol * C
* (its total weight), the gradient rule of scikit-learn's lbfgs, so the coefficients agree with scikit-learn's to
its tolerance. Rows share only the matrix products: 200 permutations of a 200-row fold cost about as much as a
few scikit-learn fits.

An L2 fit lies in the row space of its training features: pass z = U S from the SVD of the standardised training
rows (m, d) with d > m and the probe is the same, in m rather than d dimensions.
"""

from __future__ import annotations

import numpy as np

FTOL = 64 * np.finfo(np.float64).eps
"""A row also stops when a step lowers its loss by no more than FTOL relative (scipy's L-BFGS-B rule, the ftol
scikit-learn passes)."""

def fit_batched(z: np.ndarray, Y: np.ndarray, c: float, n_classes: int, weights: np.ndarray | None = None,
                tol: float = 1e-4, max_iter: int = 500, memory: int = 10) -> np.ndarray:
    """z (m, r) features, Y (P, m) label codes 0 .. n_classes - 1, optional sample weights (P, m) (0 leaves a row
    out) -> (P, r + 1, k) coefficients, the intercept last (k = 1 for two classes, else n_classes); each row of Y
    fitted on its own, as the module docstring says."""
    m, r = z.shape
    P, k = len(Y), 1 if n_classes == 2 else n_classes
    weights = np.ones((P, m)) if weights is None else np.asarray(weights, dtype=np.float64)
    zb = np.hstack([z, np.ones((m, 1))])
    onehot = (Y[..., None] == np.arange(n_classes)).astype(np.float64)  # (P, m, K)
    penalised = np.r_[np.ones(r), 0.0][None, :, None]
    h0 = (1 / (c / 4 * weights.mean() * np.r_[(z**2).sum(axis=0), m] + penalised[0, :, 0]))[None, :, None]
    gtol = tol * c * weights.sum(axis=1)

    def dot(a, b):
        return (a * b).sum(axis=(1, 2))

    def loss_grad(theta):
        eta = (zb @ theta.transpose(1, 0, 2).reshape(r + 1, -1)).reshape(m, P, k).transpose(1, 0, 2)
        logits = np.concatenate([np.zeros((P, m, 1)), eta], axis=2) if k == 1 else eta
        exp = np.exp(logits - logits.max(axis=2, keepdims=True))
        total = exp.sum(axis=2, keepdims=True)
        lse = (np.log(total) + logits.max(axis=2, keepdims=True))[..., 0]
        loss = c * ((lse - (logits * onehot).sum(axis=2)) * weights).sum(axis=1) + 0.5 * dot(theta * penalised, theta)
        resid = (exp / total - onehot)[..., -k:] * weights[..., None]     # (P, m, k)
        grad = (zb.T @ resid.transpose(1, 0, 2).reshape(m, -1)).reshape(r + 1, P, k).transpose(1, 0, 2)
        return loss, c * grad + theta * penalised

    theta = np.zeros((P, r + 1, k))
    loss, grad = loss_grad(theta)
    pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (s, y, rho) per step, rho 0 where unusable
    done = np.abs(grad).max(axis=(1, 2)) <= gtol
    for _ in range(max_iter):
        if done.all():
            break
        direction = -_two_loop(grad, pairs, h0, dot)
        direction[done] = 0.0
        step, slope = np.ones(P), dot(grad, direction)
        for _ in range(40):
            new = theta + step[:, None, None] * direction
            new_loss, new_grad = loss_grad(new)
            bad = new_loss > loss + 1e-4 * step * slope
            if not bad.any():
                break
            step = np.where(bad, step / 2, step)
        new[bad], new_loss[bad], new_grad[bad] = theta[bad], loss[bad], grad[bad]  # stalled: stay, and stop
        s, y = new - theta, new_grad - grad
        sy = dot(s, y)
        pairs = (pairs + [(s, y, np.where(sy > 1e-12, 1 / np.where(sy > 1e-12, sy, 1), 0.0))])[-memory:]
        flat = loss - new_loss <= FTOL * np.maximum(np.maximum(np.abs(loss), np.abs(new_loss)), 1.0)
        theta, loss, grad = new, new_loss, new_grad
        done |= bad | flat | (np.abs(grad).max(axis=(1, 2)) <= gtol)
    return theta


def _two_loop(grad, pairs, h0, dot) -> np.ndarray:
    """L-BFGS's two-loop recursion, per row: the approximate inverse Hessian times ``grad``."""
    q, alphas = grad.copy(), []
    for s, y, rho in reversed(pairs):
        alphas.append(rho * dot(s, q))
        q -= alphas[-1][:, None, None] * y
    gamma = np.ones(len(grad))
    if pairs:
        s, y, rho = pairs[-1]
        yhy = dot(y, h0 * y)
        gamma = np.where((rho > 0) & (yhy > 0), dot(s, y) / np.where(yhy > 0, yhy, 1), 1.0)
    q *= h0 * gamma[:, None, None]
    for (s, y, rho), alpha in zip(pairs, reversed(alphas), strict=True):
        q += (alpha - rho * dot(y, q))[:, None, None] * s
    return q
