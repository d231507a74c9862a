"""The covariance sums of the atlas pass and each text's Rayleigh-Ritz sums, kept on the device.

    moments = Moments(n_slots=L, d=d, k=16)
    moments.count += members.sum(dim=1)                   # once per batch: (S,) tokens of each token set
    first, square, ritz = moments.add(j, x_rows, members, text_row, B)   # one layer slot of one batch
    moments.fix_basis(); moments.project(j, rows, members, text_row, B)  # the Ritz directions, then the sums
    ratio, dense = moments.top1([n_all, n_kept])          # (S, L) top-1 share of each covariance (one host sync)
    moments.spectrum(s, n)                                # (L, d) set s's eigenvalues, descending (on request only)

Per token set ``s`` and layer slot ``j``: the token states are measured from ``shift[s, j]`` (the mean of the
first batch's tokens), and ``moment1`` = sum x, ``moment2`` = sum x x^T (float64) over every token so far. Each
text's sums of x and ||x||^2 and, once the Ritz directions ``basis[s, j]`` (d, k) are fixed (the top k eigenvectors
of the covariance so far: exact up to ``RITZ_EXACT_MAX`` dimensions, by block power iteration above,
:func:`top_directions`), of (B'x)(B'x)^T are returned per batch for the caller to read back. A token outside a
set enters as a zero row (``torch.where``), never through a boolean index, so nothing here waits on the host but
the decompositions, once per pass.

The pass reads one number of each covariance C: its top-1 share, largest eigenvalue / trace. The trace is the sum
of C's diagonal; the largest eigenvalue comes from block power iteration with a residual check
(:func:`top_eigenvalues`), and from a dense ``eigvalsh`` only for a matrix whose check fails. No full spectrum is
computed unless :meth:`Moments.spectrum` is called (the pass does not).

Where the first batches hold fewer than ``RITZ_MIN_TOKENS`` tokens, their states are kept (as float32 rows) until
the directions are fixed, and projected then (:meth:`Moments.project_pending`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .layout import to_host

RITZ_K = 16
"""Principal directions each text's second moment is kept in (the top-1 share's resamples)."""
RITZ_MIN_TOKENS = 256
"""Tokens whose covariance fixes those directions: the first batches' until this many are seen."""
EIG_BYTES = 2**30
"""Most bytes of d x d float64 matrices one ``eigh`` or ``eigvalsh`` call takes (the layers are split above it)."""
RITZ_EXACT_MAX = 256
"""Up to this hidden size the Ritz directions are exact eigenvectors (``eigh``); above it :func:`top_directions`."""
RITZ_ITERATIONS = 12
"""Block power iterations of :func:`top_directions`."""
TOP_WIDTH = 8
"""Vectors in :func:`top_eigenvalues`'s block."""
TOP_ITERATIONS = 32
"""Block power iterations of :func:`top_eigenvalues` before its residual check (on SmolLM2-135M-Instruct's covariances
the relative residual is below 1e-12 after 24: the slowest layer's 9th eigenvalue is 0.33 of its largest)."""
TOP_TOL = 1e-9
""":func:`top_eigenvalues` keeps a Ritz value whose residual is at most this share of it (so within 1e-9
relative of an eigenvalue); the others go to the dense ``eigvalsh``."""


class Moments:
    """Shifted first and second moments per token set and layer slot, and each text's Ritz sums (module docstring).
    Allocated on the device of the first rows added."""

    def __init__(self, n_slots: int, d: int, k: int = RITZ_K, n_sets: int = 2):
        self.n_slots, self.d, self.k, self.n_sets = n_slots, d, min(k, d), n_sets
        self.shift: torch.Tensor | None = None
        """(S, L, d) float64."""
        self.moment1: torch.Tensor | None = None
        """(S, L, d) float64 sum of (x - shift)."""
        self.moment2: torch.Tensor | None = None
        """(S, L, d, d) float64 sum of (x - shift)(x - shift)^T."""
        self.count: torch.Tensor | None = None
        """(S,) float64 tokens of each set so far (on the device)."""
        self.seen = np.zeros(n_slots, dtype=bool)
        self.basis: torch.Tensor | None = None
        """(S, L, d, k) float64 Ritz directions, largest first, once fixed."""
        self.pending: list[tuple[np.ndarray, torch.Tensor, torch.Tensor, list[torch.Tensor]]] = []
        """Batches waiting for the directions: (index, text_row (N,), members (S, N), rows (N, d) float32 per slot)."""
        self.pending_tokens = 0

    def _allocate(self, device: torch.device) -> None:
        S, L, d = self.n_sets, self.n_slots, self.d
        self.shift = torch.zeros(S, L, d, dtype=torch.float64, device=device)
        self.moment1 = torch.zeros(S, L, d, dtype=torch.float64, device=device)
        self.moment2 = torch.zeros(S, L, d, d, dtype=torch.float64, device=device)
        self.count = torch.zeros(S, dtype=torch.float64, device=device)

    def shifted(self, j: int, rows: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
        """(S, N, d) float64: ``rows`` (N, d) minus set ``s``'s shift at slot ``j``, zero outside ``members`` (S, N)."""
        return torch.where(members[..., None], rows.double()[None] - self.shift[:, j, None], 0.0)

    def add(self, j: int, rows: torch.Tensor, members: torch.Tensor, text_row: torch.Tensor,
            n_texts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Add one batch's token states ``rows`` (N, d) at slot ``j``; ``members`` (S, N) bool says which set each
        token is in, ``text_row`` (N,) its text (0 .. ``n_texts`` - 1). Returns each text's sums (float64) of x
        (S, n_texts, d) and of ||x||^2 (S, n_texts), and its Ritz sums (S, n_texts, k, k) once the directions are
        fixed (else None)."""
        if self.shift is None:
            self._allocate(rows.device)
        if not self.seen[j]:  # the first batch's mean of each set (0 for a set with no token)
            total = torch.where(members[..., None], rows.double()[None], 0.0).sum(dim=1)  # (S, d)
            n = members.sum(dim=1, keepdim=True)
            self.shift[:, j] = torch.where(n > 0, total / n.clamp(min=1), 0.0)
            self.seen[j] = True
        x = self.shifted(j, rows, members)  # (S, N, d)
        self.moment1[:, j] += x.sum(dim=1)
        self.moment2[:, j].baddbmm_(x.transpose(1, 2), x)
        first = torch.zeros(self.n_sets, n_texts, self.d, dtype=torch.float64, device=x.device)
        first.index_add_(1, text_row, x)
        square = torch.zeros(self.n_sets, n_texts, dtype=torch.float64, device=x.device)
        square.index_add_(1, text_row, (x * x).sum(dim=-1))
        return first, square, (self._ritz(j, x, text_row, n_texts) if self.basis is not None else None)

    def _ritz(self, j: int, x: torch.Tensor, text_row: torch.Tensor, n_texts: int) -> torch.Tensor:
        """(S, n_texts, k, k) float64: each text's sums of (B'x)(B'x)^T for shifted states ``x`` (S, N, d)."""
        y = x @ self.basis[:, j]  # (S, N, k)
        outer = (y[..., :, None] * y[..., None, :]).flatten(2)  # (S, N, k * k)
        sums = torch.zeros(self.n_sets, n_texts, self.k * self.k, dtype=torch.float64, device=x.device)
        return sums.index_add_(1, text_row, outer).view(self.n_sets, n_texts, self.k, self.k)

    def project(self, j: int, rows: torch.Tensor, members: torch.Tensor, text_row: torch.Tensor,
                n_texts: int) -> torch.Tensor:
        """(S, n_texts, k, k) the Ritz sums of a batch already added (its ``rows`` at slot ``j`` again)."""
        return self._ritz(j, self.shifted(j, rows, members), text_row, n_texts)

    def keep(self, index: np.ndarray, text_row: torch.Tensor, members: torch.Tensor,
             rows: list[torch.Tensor]) -> None:
        """Keep a batch's float32 ``rows`` (N, d) per slot until the directions are fixed."""
        self.pending.append((index, text_row, members, [r.float() for r in rows]))

    def fix_basis(self) -> None:
        """Fix the Ritz directions: the top ``k`` eigenvectors of each set's and slot's covariance so far (batched
        ``eigh`` calls of at most :data:`EIG_BYTES`, or above :data:`RITZ_EXACT_MAX` dimensions
        :func:`top_directions`); the identity's first columns where nothing was seen."""
        if self.moment1 is None:
            self.basis = torch.eye(self.d, self.k, dtype=torch.float64)[None, None].expand(
                self.n_sets, self.n_slots, self.d, self.k).clone()
            return
        self.basis = torch.empty(self.n_sets, self.n_slots, self.d, self.k, dtype=torch.float64,
                                 device=self.moment1.device)
        for s in range(self.n_sets):
            for slots in self._groups():
                covariance = self._covariance(s, slots, self.count[s])
                # non-finite states: the pass raises after this batch's copy, and eigh must not fail first
                covariance = covariance.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
                if self.d > RITZ_EXACT_MAX:
                    self.basis[s, slots] = top_directions(covariance, self.k)
                else:
                    self.basis[s, slots] = torch.linalg.eigh(covariance)[1][..., -self.k:].flip(-1)  # largest first

    def _groups(self) -> list[slice]:
        """Runs of layer slots whose d x d float64 matrices fit :data:`EIG_BYTES` together."""
        step = max(1, EIG_BYTES // (8 * self.d * self.d))
        return [slice(j, min(j + step, self.n_slots)) for j in range(0, self.n_slots, step)]

    def _covariance(self, s: int, slots: slice, n: torch.Tensor | float) -> torch.Tensor:
        """(G, d, d) float64: sum x x^T - n m m^T of set ``s`` at ``slots``, m = sum x / max(n, 1) (unscaled)."""
        n = n.clamp(min=1) if isinstance(n, torch.Tensor) else max(n, 1)
        mean = self.moment1[s, slots] / n  # (G, d)
        return self.moment2[s, slots] - n * (mean[:, :, None] * mean[:, None, :])

    def project_pending(self) -> list[tuple[np.ndarray, torch.Tensor]]:
        """[(index, Ritz sums (S, B, L, k, k))] of every kept batch, projected on the fixed directions; forgets
        them."""
        pending, self.pending = self.pending, []
        out = []
        for index, text_row, members, rows in pending:
            sums = [self.project(j, r, members, text_row, len(index)) for j, r in enumerate(rows)]
            out.append((index, torch.stack(sums, dim=2)))
        return out

    def top1(self, n: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``ratio, dense = moments.top1([n_all, n_kept])``: (S, L) float64 on the host, each set's covariance
        top-1 share per slot (largest eigenvalue / trace, :func:`top_eigenvalues`, every set and slot in one
        batch: one host sync, more only where the dense fallback runs), and (S, L) bool, True where it ran.
        NaN where set ``s`` has fewer than 2 tokens (``n[s]``, host ints), nothing was seen, or the trace is 0."""
        shape = (self.n_sets, self.n_slots)
        if self.moment1 is None:
            return np.full(shape, np.nan), np.zeros(shape, dtype=bool)
        count = torch.tensor(n, dtype=torch.float64, device=self.moment1.device).clamp(min=1)[:, None]  # (S, 1)
        top = top_eigenvalues(self.moment2, self.moment1 / count[..., None], count)  # unscaled: n - 1 cancels
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(top.trace > 0, top.value / top.trace, np.nan)
        few = (np.asarray(n) < 2)[:, None] | ~self.seen[None]
        return np.where(few, np.nan, ratio), top.dense

    def spectrum(self, s: int, n: int) -> torch.Tensor:
        """(L, d) float64 on the CPU: set ``s``'s covariance eigenvalues per slot, descending (batched ``eigvalsh``
        calls of at most :data:`EIG_BYTES`, one copy back); NaN where the set has fewer than 2 tokens (``n``, a host
        int) or nothing was seen. Not called by the pass, which reads the top-1 share alone (:meth:`top1`): these
        dense decompositions were most of a GPU pass's time for a large model, about 0.1 s per layer and set at
        d = 4096 on an H200 (cuSOLVER's ``syevd``; no faster on several streams at once, nor in float32, and 8
        times slower through MAGMA)."""
        if self.moment1 is None or n < 2:
            return torch.full((self.n_slots, self.d), torch.nan, dtype=torch.float64)
        out = torch.empty(self.n_slots, self.d, dtype=torch.float64, device=self.moment1.device)
        for slots in self._groups():
            out[slots] = torch.linalg.eigvalsh(self._covariance(s, slots, n) / (n - 1)).flip(-1)
        return out.cpu()


def top_directions(covariance: torch.Tensor, k: int, iterations: int | None = None) -> torch.Tensor:
    """``basis = top_directions(c, 16)``: (G, d, k) float64 orthonormal approximations of the top ``k`` eigenvectors
    of each symmetric positive semi-definite (G, d, d) matrix, largest first: block power iteration from a fixed
    random block of ``2k`` columns (``iterations``, default :data:`RITZ_ITERATIONS`, re-orthonormalised by QR), then
    Rayleigh-Ritz on the block; one host sync (the small ``eigh``). A d x d ``eigh`` takes about 0.11 s per matrix
    at d = 4096 on an H200, this 0.12 s for 33 of them; on the covariances of an 8B-shaped model's 460 texts the
    top direction agreed with ``eigh``'s to |cos| = 1 - 1e-12 and the 16th to 0.994 or closer."""
    G, d, _ = covariance.shape
    width = min(d, 2 * k)
    generator = torch.Generator(device=covariance.device).manual_seed(0)
    block = torch.randn(d, width, dtype=torch.float64, device=covariance.device, generator=generator)
    block = torch.linalg.qr(block.expand(G, d, width))[0]
    for _ in range(RITZ_ITERATIONS if iterations is None else iterations):
        block = torch.linalg.qr(covariance @ block)[0]
    _, vectors = torch.linalg.eigh(block.transpose(1, 2) @ covariance @ block)  # (G, width, width) ascending
    return (block @ vectors[..., -k:]).flip(-1)


@dataclass(frozen=True)
class TopEigen:
    """:func:`top_eigenvalues`'s answer, on the host; each array shaped like the matrices' leading dimensions."""

    value: np.ndarray
    """float64 largest eigenvalue of each matrix."""
    trace: np.ndarray
    """float64 trace (the sum of the diagonal)."""
    dense: np.ndarray
    """bool: the residual check failed and ``value`` came from the dense ``eigvalsh``."""


def top_eigenvalues(second: torch.Tensor, mean: torch.Tensor | None = None, count: torch.Tensor | None = None, *,
                    width: int = TOP_WIDTH, iterations: int = TOP_ITERATIONS, tol: float = TOP_TOL) -> TopEigen:
    """``top = top_eigenvalues(c)``: the largest eigenvalue and the trace of each symmetric positive semi-definite
    matrix C = ``second`` - ``count`` * ``mean`` ``mean``^T (``second`` (..., d, d) float64 on any device; ``mean``
    (..., d) and ``count`` (...) or broadcastable to it, or both None: C = ``second``); C is never formed but for
    the dense fallback.

    Block power iteration from a fixed random block of ``width`` columns (``iterations`` steps, each
    re-orthonormalised by QR), then Rayleigh-Ritz on the block: top Ritz value t and unit vector v = B y. Its
    residual r = ||C v - t v|| = ||R y||, R = C B - B (B^T C B), comes from the (width, width) matrices B^T C B and
    R^T R, which go to the host with the traces in one copy: one host sync for every matrix. t is kept where
    r <= ``tol`` * t; any other matrix goes to a dense ``eigvalsh`` (``TopEigen.dense``; batched, at most
    :data:`EIG_BYTES` a call).

    Why the check is on r alone: for a symmetric C some eigenvalue lies within r of t (Weyl), and t <= lambda_max
    (a Rayleigh quotient), so a kept t is within ``tol`` relative of lambda_max unless the random start block had no
    component along the top eigenvector. The error is usually far smaller, about r^2 / gap, but a block cannot
    certify the gap to eigenvalues it has not seen; the bound without it also holds for a near-degenerate top pair,
    whose eigenvector is ill-determined while its value is not (any unit vector in the pair's span has a residual of
    at most half their difference). What fails the check is a top cluster wider than the block whose values differ
    by more than ``tol`` (a flat spectrum): it converges slowly."""
    lead, d = second.shape[:-2], second.shape[-1]
    width = min(width, d)

    def apply(block: torch.Tensor) -> torch.Tensor:  # (..., d, width) C @ block
        out = second @ block
        if mean is None:
            return out
        return out - (count[..., None, None] * mean[..., :, None]) @ (mean[..., None, :] @ block)

    generator = torch.Generator(device=second.device).manual_seed(0)
    start = torch.randn(d, width, dtype=torch.float64, device=second.device, generator=generator)
    block = torch.linalg.qr(start)[0].expand(*lead, d, width)
    for _ in range(iterations):
        block = torch.linalg.qr(apply(block))[0]
    z = apply(block)
    h = block.mT @ z
    h = (h + h.mT) / 2  # (..., width, width) B^T C B
    r = z - block @ h  # (..., d, width)
    trace = second.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    if mean is not None:
        trace = trace - count * (mean * mean).sum(dim=-1)
    host = to_host({"h": h, "rr": r.mT @ r, "trace": trace.expand(lead).contiguous()})  # the one sync
    value, kept = _checked_ritz(host["h"], host["rr"], tol)
    dense = ~kept
    if dense.any():
        value[dense] = _dense_largest(second, mean, count, np.flatnonzero(dense))
    return TopEigen(value=value, trace=host["trace"], dense=dense)


def _checked_ritz(h: np.ndarray, rr: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """``value, kept = _checked_ritz(h, rr, tol)``: (...) the top Ritz value of each ``h`` (..., w, w) and whether
    its residual sqrt(y^T ``rr`` y) (y its unit eigenvector) is at most ``tol`` times it (False where ``h`` or
    ``rr`` holds NaN or inf)."""
    finite = np.isfinite(h).all(axis=(-2, -1)) & np.isfinite(rr).all(axis=(-2, -1))
    theta, vectors = np.linalg.eigh(np.where(finite[..., None, None], h, 0.0))
    top, y = theta[..., -1], vectors[..., -1]
    residual = np.sqrt(np.maximum(np.einsum("...i,...ij,...j->...", y, rr, y), 0.0))
    return top.copy(), finite & (residual <= tol * top)


def _dense_largest(second: torch.Tensor, mean: torch.Tensor | None, count: torch.Tensor | None,
                   rows: np.ndarray) -> np.ndarray:
    """(len(rows),) float64 on the host: the largest eigenvalue by ``eigvalsh`` of the matrices C of
    :func:`top_eigenvalues` at flat indices ``rows`` of the leading dimensions, :data:`EIG_BYTES` at a time."""
    lead, d = second.shape[:-2], second.shape[-1]
    flat = second.reshape(-1, d, d)
    step = max(1, EIG_BYTES // (8 * d * d))
    out = []
    for start in range(0, len(rows), step):
        index = torch.as_tensor(rows[start : start + step], device=second.device)
        c = flat.index_select(0, index)
        if mean is not None:
            m = mean.expand(*lead, d).reshape(-1, d).index_select(0, index)
            n = count.expand(lead).reshape(-1).index_select(0, index)
            c = c - n[:, None, None] * (m[:, :, None] * m[:, None, :])
        out.append(torch.linalg.eigvalsh(c)[:, -1])
    return torch.cat(out).cpu().numpy()
