"""scikit-learn's L2 logistic regression fitted for many label vectors at once: the permutation nulls of probes.

    theta = fit_batched(z, Y, c=1.0, n_classes=2)   # z (m, r) features, Y (P, m) label codes -> (P, r + 1, k)
    eta = np.einsum("mj,pjk->pmk", np.hstack([z, np.ones((m, 1))]), theta)  # decision values, intercept last

The objective is scikit-learn's (``LogisticRegression(C=c)``, lbfgs, ``sample_weight``): C * the weighted sum of
log-losses + |W|^2 / 2, intercept unpenalised, binary (k = 1 coefficient column, of class 1) for two classes and
multinomial (k = K columns) for more. Each label row runs its own L-BFGS (memory 10, Armijo backtracking, initial
inverse Hessian the diagonal of Böhning's bound C/4 z'z + I, scaled as usual) and stops at max |gradient| <= tol * C
* (its total weight), the gradient rule of scikit-learn's lbfgs, so the coefficients agree with scikit-learn's to
its tolerance. Rows share only the matrix products: 200 permutations of a 200-row fold cost about as much as a
few scikit-learn fits. A row that has converged leaves the batch (its coefficients are final), a backtracking step
re-evaluates only the rows whose step was refused, and feature rows no label row weighs (a test fold's) are
dropped, so the work follows the rows still moving.

An L2 fit lies in the row space of its training features: pass z = U S from the SVD of the standardised training
rows (m, d) with d > m and the probe is the same, in m rather than d dimensions.
"""

from __future__ import annotations

import numpy as np

FTOL = 64 * np.finfo(np.float64).eps
"""A row also stops when a step lowers its loss by no more than FTOL relative (scipy's L-BFGS-B rule, the ftol
scikit-learn passes)."""
COMPACT = 0.125
"""Finished rows leave the batch's arrays once they are this share of the rows still in it."""


def dot(a, b):
    """Per row of (P, ...) arrays: the sum of a * b."""
    return np.einsum("pi,pi->p", a.reshape(len(a), -1), b.reshape(len(b), -1))


def fit_batched(z: np.ndarray, Y: np.ndarray, c: float, n_classes: int, weights: np.ndarray | None = None,
                tol: float = 1e-4, max_iter: int = 500, memory: int = 10) -> np.ndarray:
    """z (m, r) features, Y (P, m) label codes 0 .. n_classes - 1, optional sample weights (P, m) (0 leaves a row
    out) -> (P, r + 1, k) coefficients, the intercept last (k = 1 for two classes, else n_classes); each row of Y
    fitted on its own, as the module docstring says."""
    weights = np.ones((len(Y), len(z))) if weights is None else np.asarray(weights, dtype=np.float64)
    r = z.shape[1]
    penalised = np.r_[np.ones(r), 0.0][None, :, None]
    h0 = (1 / (c / 4 * weights.mean() * np.r_[(z**2).sum(axis=0), len(z)] + penalised[0, :, 0]))[None, :, None]
    used = weights.any(axis=0)  # rows no label row weighs (a test fold's) take no part
    z, Y, weights = z[used], Y[:, used], weights[:, used]
    m, r = z.shape
    P, k = len(Y), 1 if n_classes == 2 else n_classes
    zb = np.hstack([z, np.ones((m, 1))])
    onehot = (Y[..., None] == np.arange(n_classes)).astype(np.float64)  # (P, m, K)
    gtol = tol * c * weights.sum(axis=1)

    def loss_grad(theta: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Loss (n,) and gradient (n, r + 1, k) of the label rows ``rows`` at their coefficients ``theta``."""
        n = len(rows)
        hot, w = onehot[rows], weights[rows]
        eta = (zb @ theta.transpose(1, 0, 2).reshape(r + 1, -1)).reshape(m, n, k).transpose(1, 0, 2)
        logits = np.concatenate([np.zeros((n, m, 1)), eta], axis=2) if k == 1 else eta
        top = logits.max(axis=2, keepdims=True)
        exp = np.exp(logits - top)
        total = exp.sum(axis=2, keepdims=True)
        lse = (np.log(total) + top)[..., 0]
        loss = c * ((lse - (logits * hot).sum(axis=2)) * w).sum(axis=1) + 0.5 * dot(theta * penalised, theta)
        resid = (exp / total - hot)[..., -k:] * w[..., None]
        grad = (zb.T @ resid.transpose(1, 0, 2).reshape(m, -1)).reshape(r + 1, n, k).transpose(1, 0, 2)
        return loss, np.ascontiguousarray(c * grad + theta * penalised)

    out = np.zeros((P, r + 1, k))
    rows = np.arange(P)  # the label rows still in the batch; theta, loss, grad, done and pairs hold theirs
    theta = out.copy()
    loss, grad = loss_grad(theta, rows)
    done = np.abs(grad).max(axis=(1, 2)) <= gtol[rows]
    pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (s, y, rho) per step, rho 0 where unusable
    for _ in range(max_iter):
        if done.all():
            break
        if done.sum() >= max(1, COMPACT * len(rows)):  # drop finished rows from every array
            keep = ~done
            out[rows[done]] = theta[done]
            rows, theta, loss, grad, done = rows[keep], theta[keep], loss[keep], grad[keep], done[keep]
            pairs = [(s[keep], y[keep], rho[keep]) for s, y, rho in pairs]
        direction = -_two_loop(grad, pairs, h0)
        direction[done] = 0.0
        step, slope = np.ones(len(rows)), dot(grad, direction)
        new = theta + direction
        new_loss, new_grad = loss_grad(new, rows)
        bad = new_loss > loss + 1e-4 * step * slope
        for _ in range(39):  # Armijo backtracking, 40 evaluations at most, only the refused rows again
            if not bad.any():
                break
            b = np.flatnonzero(bad)
            step[b] /= 2
            new[b] = theta[b] + step[b, None, None] * direction[b]
            new_loss[b], new_grad[b] = loss_grad(new[b], rows[b])
            bad[b] = new_loss[b] > loss[b] + 1e-4 * step[b] * slope[b]
        new[bad], new_loss[bad], new_grad[bad] = theta[bad], loss[bad], grad[bad]  # stalled: stay, and stop
        s, y = new - theta, new_grad - grad
        sy = dot(s, y)
        pairs = (pairs + [(s, y, np.where(sy > 1e-12, 1 / np.where(sy > 1e-12, sy, 1), 0.0))])[-memory:]
        flat = loss - new_loss <= FTOL * np.maximum(np.maximum(np.abs(loss), np.abs(new_loss)), 1.0)
        theta, loss, grad = new, new_loss, new_grad
        done |= bad | flat | (np.abs(grad).max(axis=(1, 2)) <= gtol[rows])
    out[rows] = theta
    return out


def _two_loop(grad, pairs, h0) -> np.ndarray:
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
