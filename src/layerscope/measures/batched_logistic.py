"""scikit-learn's L2 logistic regression fitted for many label vectors at once: the probes' C search, refits,
permutation nulls and control tasks.

    theta = fit_batched(z, Y, c=1.0, n_classes=2)   # z (m, r) features, Y (P, m) label codes -> (P, r + 1, k)
    eta = np.einsum("mj,pjk->pmk", np.hstack([z, np.ones((m, 1))]), theta)  # decision values, intercept last
    theta = fit_batched(Z, Y, c=cs, n_classes=2, weights=W, theta0=theta)  # Z (P, m, r): one problem per row,
                                                                           # cs (P,), warm-started at theta0

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
rows (m, d) with d > m and the probe is the same, in m rather than d dimensions (test rows: their standardised
features times V). With one feature matrix per label row (z (P, m, r), zero-padded: padded rows weigh 0, padded
columns stay at 0), problems with different training rows, scalers and C run in one batch.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

FTOL = 64 * np.finfo(np.float64).eps
"""A row also stops when a step lowers its loss by no more than FTOL relative (scipy's L-BFGS-B rule, the ftol
scikit-learn passes)."""
COMPACT = 0.125
"""Finished rows leave the batch's arrays once they are this share of the rows still in it."""


_VECDOT = getattr(np, "vecdot", None)  # numpy >= 2: a ufunc, about twice as fast as einsum on these small rows


def dot(a, b):
    """Per row of (P, ...) arrays: the sum of a * b."""
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return _VECDOT(a, b) if _VECDOT is not None else np.einsum("pi,pi->p", a, b)


def fit_batched(z: np.ndarray, Y: np.ndarray, c, n_classes: int, weights: np.ndarray | None = None,
                tol: float = 1e-4, max_iter: int = 500, memory: int = 10,
                theta0: np.ndarray | None = None) -> np.ndarray:
    """z (m, r) features shared by every label row, or (P, m, r) one matrix per label row; Y (P, m) label codes
    0 .. n_classes - 1; c a float or (P,) one per row; optional sample weights (P, m) (0 leaves a row out) and
    starting coefficients theta0 (P, r + 1, k) (default 0) -> (P, r + 1, k) coefficients, the intercept last (k = 1
    for two classes, else n_classes); each row of Y fitted on its own, as the module docstring says."""
    Y = np.asarray(Y)
    P, per_row = len(Y), z.ndim == 3
    weights = np.ones((P, z.shape[-2])) if weights is None else np.asarray(weights, dtype=np.float64)
    cs = np.broadcast_to(np.asarray(c, dtype=np.float64), (P,)).copy()
    r = z.shape[-1]
    penalised = np.r_[np.ones(r), 0.0][None, :, None]
    if per_row:  # Böhning's bound with each problem's own weighted rows
        bound = np.concatenate([np.einsum("pm,pmr->pr", weights, z**2), weights.sum(axis=1)[:, None]], axis=1)
        h0 = 1 / (cs[:, None, None] / 4 * bound[..., None] + penalised)
    else:
        h0 = 1 / (cs[:, None, None] / 4 * weights.mean() * np.r_[(z**2).sum(axis=0), len(z)][None, :, None]
                  + penalised)
    used = weights.any(axis=0)  # rows no label row weighs (a test fold's) take no part
    z, Y, weights = z[..., used, :], Y[:, used], weights[:, used]
    m = z.shape[-2]
    k = 1 if n_classes == 2 else n_classes
    zb = np.concatenate([z, np.ones(z.shape[:-1] + (1,))], axis=-1)
    onehot = (Y[..., None] == np.arange(n_classes)).astype(np.float64)  # (P, m, K)
    gtol = tol * cs * weights.sum(axis=1)

    def loss_grad(theta, zb, hot, w, c) -> tuple[np.ndarray, np.ndarray]:
        """Loss (n,) and gradient (n, r + 1, k) of n label rows at their coefficients ``theta`` (n, r + 1, k),
        with their features zb ((m, r + 1) shared or (n, m, r + 1)), one-hot labels, weights and C."""
        n = len(theta)
        if zb.ndim == 2:
            eta = (zb @ theta.transpose(1, 0, 2).reshape(r + 1, -1)).reshape(m, n, k).transpose(1, 0, 2)
        else:
            eta = zb @ theta
        if k == 1:  # binary: log(1 + e^eta) - y eta, residual sigmoid(eta) - y
            eta, y1 = eta[..., 0], hot[..., 1]
            loss = c * ((np.logaddexp(0.0, eta) - y1 * eta) * w).sum(axis=1) + 0.5 * dot(theta * penalised, theta)
            resid = ((expit(eta) - y1) * w)[..., None]
        else:
            top = eta.max(axis=2, keepdims=True)
            exp = np.exp(eta - top)
            total = exp.sum(axis=2, keepdims=True)
            lse = (np.log(total) + top)[..., 0]
            loss = c * ((lse - (eta * hot).sum(axis=2)) * w).sum(axis=1) + 0.5 * dot(theta * penalised, theta)
            resid = (exp / total - hot) * w[..., None]
        if zb.ndim == 2:
            grad = (zb.T @ resid.transpose(1, 0, 2).reshape(m, -1)).reshape(r + 1, n, k).transpose(1, 0, 2)
        else:
            grad = zb.transpose(0, 2, 1) @ resid
        return loss, np.ascontiguousarray(c[:, None, None] * grad + theta * penalised)

    out = np.zeros((P, r + 1, k)) if theta0 is None else np.array(theta0, dtype=np.float64).reshape(P, r + 1, k)
    rows = np.arange(P)  # the label rows still in the batch; theta, loss, grad, done, pairs and data hold theirs

    def data(rows):
        return (zb[rows] if per_row else zb), onehot[rows], weights[rows], cs[rows], h0[rows], gtol[rows]

    now = data(rows)
    theta = out.copy()
    loss, grad = loss_grad(theta, *now[:4])
    done = np.abs(grad).max(axis=(1, 2)) <= now[5]
    pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (s, y, rho) per step, rho 0 where unusable
    for _ in range(max_iter):
        if done.all():
            break
        if done.sum() >= max(1, COMPACT * len(rows)):  # drop finished rows from every array
            keep = ~done
            out[rows[done]] = theta[done]
            rows, theta, loss, grad, done = rows[keep], theta[keep], loss[keep], grad[keep], done[keep]
            pairs = [(s[keep], y[keep], rho[keep]) for s, y, rho in pairs]
            now = data(rows)
        direction = -_two_loop(grad, pairs, now[4])
        direction[done] = 0.0
        step, slope = np.ones(len(rows)), dot(grad, direction)
        new = theta + direction
        new_loss, new_grad = loss_grad(new, *now[:4])
        bad = new_loss > loss + 1e-4 * step * slope
        for _ in range(39):  # Armijo backtracking, 40 evaluations at most, only the refused rows again
            if not bad.any():
                break
            b = np.flatnonzero(bad)
            step[b] /= 2
            new[b] = theta[b] + step[b, None, None] * direction[b]
            new_loss[b], new_grad[b] = loss_grad(new[b], now[0][b] if per_row else now[0], *(a[b] for a in now[1:4]))
            bad[b] = new_loss[b] > loss[b] + 1e-4 * step[b] * slope[b]
        new[bad], new_loss[bad], new_grad[bad] = theta[bad], loss[bad], grad[bad]  # stalled: stay, and stop
        s, y = new - theta, new_grad - grad
        sy = dot(s, y)
        pairs = (pairs + [(s, y, np.where(sy > 1e-12, 1 / np.where(sy > 1e-12, sy, 1), 0.0))])[-memory:]
        flat = loss - new_loss <= FTOL * np.maximum(np.maximum(np.abs(loss), np.abs(new_loss)), 1.0)
        theta, loss, grad = new, new_loss, new_grad
        done |= bad | flat | (np.abs(grad).max(axis=(1, 2)) <= now[5])
    out[rows] = theta
    return out


def _two_loop(grad, pairs, h0) -> np.ndarray:
    """L-BFGS's two-loop recursion, per row: the approximate inverse Hessian (initial: h0 (n, r + 1, 1), scaled)
    times ``grad``."""
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
