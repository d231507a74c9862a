"""The running sums of one atlas pass, kept per text so that a resample of the texts can rebuild every profile.

    sums = PassSums(lm, layers, n_texts, convention="skean")
    sums.add(batch, states, pre_norm)                     # once per batch
    totals, stats = sums.totals(), sums.text_stats()      # the pass's means; the per-text sums (TextStats)

Two token sets are summed side by side (axis ``s`` of every :class:`TextStats` array): ``s = 0`` every real token
(for mean pooling: a BOS token left out), ``s = 1`` without position 0 and without the massive-activation tokens
(:func:`.massive.massive_mask` at any block output), the set behind the atlas's ``excl_massive`` check.

The covariance top-1 share cannot be split by text exactly without a d x d matrix per text, so its resamples use
Rayleigh-Ritz: each text's second moment is kept in the ``RITZ_K`` leading principal directions of the first
``RITZ_MIN_TOKENS`` tokens (per layer and set), and a resample's top eigenvalue is that of its projected
covariance (exact when the resample's top direction lies in their span; never above it). The trace is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..models.load import LoadedModel
from .batching import Batch
from .lens import LensSums, lens_batch
from .massive import massive_mask
from .massive_profile import MassiveProfile, delimiter_ids, position_class
from .pooling import mean_mask, no_pos0_mask

ENTROPY_KEYS = ("entropy", "normalised_entropy", "effective_rank")
TOKEN_SETS = ("all", "excl_massive")
"""The two token sets of every per-text array (axis 0)."""
RITZ_K = 16
"""Principal directions each text's second moment is kept in (the top-1 share's resamples)."""
RITZ_MIN_TOKENS = 256
"""Tokens whose covariance fixes those directions: the first batches' until this many are seen."""
CONVENTIONS = ("skean", "raw")


@dataclass
class TextStats:
    """Per-text sums of one atlas pass (``s``: token set, :data:`TOKEN_SETS`; ``n`` texts; ``L`` layers;
    ``T`` transitions, the layers below ``n_layers``; ``d`` hidden size; ``k`` :data:`RITZ_K`)."""

    lens: np.ndarray
    """(2, n, L, 4) sums over the text's scored tokens of lens_ce, lens_entropy, lens_kl, lens_top1_agree."""
    scored: np.ndarray
    """(2, n) scored tokens of each text."""
    influence: np.ndarray
    """(2, n, T) sums of 1 - cos(h_l, h_l+1) over the text's tokens."""
    tokens: np.ndarray
    """(2, n) tokens of each text in each set."""
    angular: np.ndarray
    """(2, n, T) the angular distance at the text's last token; NaN in set 1 where that token is left out."""
    norm: np.ndarray
    """(2, n, L) sums of ||h_l|| over the text's tokens."""
    entropy: np.ndarray
    """(2, n, L) the prompt entropy of the text (normalised); NaN where it has fewer than 2 usable tokens."""
    pooled: np.ndarray
    """(2, n, L, d) float32 mean of the text's tokens (set 0: mean pooling, a BOS token left out); NaN where none."""
    massive_ratio: np.ndarray
    """(n, L) the text's top / median |activation| per layer."""
    shift: np.ndarray
    """(2, L, d) the point every token state is measured from below (the first tokens' mean)."""
    first: np.ndarray
    """(2, n, L, d) float32 sums of (h - shift) over the text's tokens."""
    square: np.ndarray
    """(2, n, L) sums of ||h - shift||^2."""
    basis: np.ndarray
    """(2, L, d, k) the Rayleigh-Ritz directions."""
    ritz: np.ndarray
    """(2, n, L, k, k) float32 sums of (B'(h - shift))(B'(h - shift))' with B = basis."""


class PassSums:
    """The running sums of :func:`.atlas.atlas_pass` for one model (module docstring)."""

    def __init__(self, lm: LoadedModel, layers: list[int], n_texts: int, convention: str = "skean"):
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown entropy convention {convention!r}; use {' or '.join(CONVENTIONS)}")
        self.lm, self.layers, self.n_texts, self.convention = lm, layers, n_texts, convention
        self.n_layers = lm.info.n_layers
        self.transitions = [layer for layer in layers if layer < self.n_layers]
        self.delimiters = delimiter_ids(lm.tokenizer)
        self.lens, self.massive = LensSums(n_texts), MassiveProfile()
        n, n_l, n_t, d = n_texts, len(layers), len(self.transitions), lm.info.hidden_size
        self.k = min(RITZ_K, d)
        self.influence = np.zeros((2, n, n_t))
        self.angular = np.full((2, n, n_t), np.nan)
        self.tokens = np.zeros((2, n))
        self.norm = np.zeros((2, n, n_l))
        self.entropy = np.full((2, n, n_l, len(ENTROPY_KEYS)), np.nan)
        self.pooled = np.zeros((2, n, n_l, d), dtype=np.float32)
        self.first = np.zeros((2, n, n_l, d), dtype=np.float32)
        self.square = np.zeros((2, n, n_l))
        self.ritz = np.zeros((2, n, n_l, self.k, self.k), dtype=np.float32)
        self.basis: list[list[torch.Tensor]] | None = None
        self.pending: list[tuple[np.ndarray, list[list[tuple[torch.Tensor, torch.Tensor]]]]] = []
        self.pending_tokens = 0
        self.shift: list[list[torch.Tensor | None]] = [[None] * n_l, [None] * n_l]
        self.moment1: list[list[torch.Tensor | None]] = [[None] * n_l, [None] * n_l]
        self.moment2: list[list[torch.Tensor | None]] = [[None] * n_l, [None] * n_l]
        self.counts = {"tokens": 0, "texts": 0, "massive": 0, "kept": 0}

    def add(self, batch: Batch, states: list[torch.Tensor], pre_norm: torch.Tensor) -> None:
        """One batch: ``states`` the model's hidden states 0..n_layers (B, T, d) each, ``pre_norm`` (B, T, d)."""
        n_layers, real = self.n_layers, batch.attention_mask.bool()
        residual = [*states[:n_layers], pre_norm]  # state n_layers: before the final norm
        massive = torch.zeros_like(real)
        for layer in range(1, n_layers + 1):
            massive |= massive_mask(residual[layer], real)
        kept = no_pos0_mask(batch).to(real.device) & ~massive
        masks = (real, kept)
        index = batch.index
        lens_states = {layer: states[layer] for layer in self.layers if layer < n_layers}
        lens_batch(self.lm, {**lens_states, n_layers: states[n_layers]}, batch, self.lens, kept=kept)
        self.counts["massive"] += int(massive.sum())
        self.counts["kept"] += int(kept.sum())
        self.counts["tokens"] += int(real.sum())
        self.counts["texts"] += len(index)
        for s, mask in enumerate(masks):
            self.tokens[s, index] = mask.sum(dim=1).cpu().numpy()
        self._add_transitions(batch, residual, masks)
        classes = position_class(batch, self.delimiters)
        pool = mean_mask(batch, self.lm.tokenizer.bos_token_id)
        pool = torch.where(pool.any(dim=1, keepdim=True), pool, real)  # a BOS-only text: itself
        ritz_states = []
        for j, layer in enumerate(self.layers):
            h = residual[layer].float()
            per_set = []
            for s, mask in enumerate(masks):
                self.norm[s, index, j] = torch.where(mask, h.norm(dim=-1), 0.0).double().sum(dim=1).cpu().numpy()
                weights = (pool if s == 0 else mask).float()
                weights = weights / weights.sum(dim=1, keepdim=True)  # a text without such tokens: NaN
                self.pooled[s, index, j] = torch.einsum("bt,btd->bd", weights, h).cpu().numpy()
                self.entropy[s, index, j] = prompt_entropies(h, mask, self.convention).cpu().numpy()
                per_set.append(self._add_moments(s, j, h, mask, index))
            ritz_states.append(per_set)
            self.massive.update(layer, residual[layer], batch, classes)
        self._add_ritz(index, ritz_states)

    def _add_transitions(self, batch: Batch, residual: list[torch.Tensor], masks: tuple[torch.Tensor, ...]) -> None:
        rows = torch.arange(len(batch.index), device=masks[0].device)
        last = batch.last.to(masks[0].device)
        last_kept = masks[1][rows, last].cpu().numpy()
        for i, layer in enumerate(self.transitions):
            cos = F.cosine_similarity(residual[layer].float(), residual[layer + 1].float(), dim=-1)  # (B, T)
            for s, mask in enumerate(masks):
                self.influence[s, batch.index, i] = torch.where(mask, 1 - cos, 0.0).double().sum(dim=1).cpu().numpy()
            angle = (torch.arccos(cos[rows, last].double().clamp(-1.0, 1.0)) / math.pi).cpu().numpy()
            self.angular[0, batch.index, i] = angle
            self.angular[1, batch.index, i] = np.where(last_kept, angle, np.nan)

    def _add_moments(self, s: int, j: int, h: torch.Tensor, mask: torch.Tensor,
                     index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Add set ``s``'s token states at layer slot ``j`` to the covariance sums (shifted by the first tokens'
        mean) and to each text's shifted sums; returns (the shifted states (N, d), their text rows (N,))."""
        x = h[mask].double()
        if self.shift[s][j] is None:
            self.shift[s][j] = x.mean(dim=0) if len(x) else torch.zeros(h.shape[-1], dtype=torch.float64,
                                                                          device=h.device)
            self.moment1[s][j] = torch.zeros_like(self.shift[s][j])
            self.moment2[s][j] = torch.zeros(h.shape[-1], h.shape[-1], dtype=torch.float64, device=h.device)
        x = x - self.shift[s][j]
        self.moment1[s][j] += x.sum(dim=0)
        self.moment2[s][j] += x.T @ x
        rows = mask.nonzero(as_tuple=True)[0]
        first = torch.zeros(len(index), x.shape[1], dtype=torch.float64, device=x.device).index_add_(0, rows, x)
        self.first[s, index, j] = first.cpu().numpy()
        self.square[s, index, j] = torch.zeros(len(index), dtype=torch.float64, device=x.device).index_add_(
            0, rows, (x * x).sum(dim=1)).cpu().numpy()
        return x, rows

    def _add_ritz(self, index: np.ndarray, states: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Project each text's shifted states on the Ritz directions, once they are fixed (module docstring)."""
        if self.basis is None:
            self.pending.append((index, [[(x.float().cpu(), r.cpu()) for x, r in per] for per in states]))
            self.pending_tokens += len(states[0][0][1]) if states else 0
            if self.pending_tokens >= RITZ_MIN_TOKENS:
                self._fix_basis()
            return
        self._project(index, states)

    def _fix_basis(self) -> None:
        self.basis = [[self._top_directions(s, j) for j in range(len(self.layers))] for s in range(2)]
        pending, self.pending = self.pending, []
        for index, states in pending:
            self._project(index, states)

    def _top_directions(self, s: int, j: int) -> torch.Tensor:
        seen = self.moment1[s][j]
        d = self.lm.info.hidden_size
        if seen is None:
            return torch.eye(d, self.k, dtype=torch.float64)
        count = self.counts["tokens"] if s == 0 else self.counts["kept"]
        mean = seen / max(count, 1)
        covariance = self.moment2[s][j] - count * torch.outer(mean, mean)
        _, vectors = torch.linalg.eigh(covariance)
        return vectors[:, -self.k:].flip(1)  # (d, k), largest first

    def _project(self, index: np.ndarray, states: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        for j, per_set in enumerate(states):
            for s, (x, rows) in enumerate(per_set):
                basis = self.basis[s][j].to(x.device, torch.float64)
                y = x.double() @ basis  # (N, k)
                outer = (y[:, :, None] * y[:, None, :]).flatten(1)
                sums = torch.zeros(len(index), self.k * self.k, dtype=torch.float64, device=y.device)
                sums.index_add_(0, rows.to(y.device), outer)
                self.ritz[s, index, j] = sums.reshape(len(index), self.k, self.k).cpu().numpy()

    def spectrum(self, s: int) -> list[np.ndarray]:
        """Set ``s``'s covariance eigenvalues per layer slot, descending (float64)."""
        n = self.counts["tokens"] if s == 0 else self.counts["kept"]
        out = []
        for j in range(len(self.layers)):
            if self.moment1[s][j] is None or n < 2:
                out.append(np.full(self.lm.info.hidden_size, np.nan))
                continue
            mean = self.moment1[s][j] / n
            covariance = (self.moment2[s][j] - n * torch.outer(mean, mean)) / (n - 1)
            out.append(torch.linalg.eigvalsh(covariance).cpu().numpy()[::-1])
        return out

    def text_stats(self) -> TextStats:
        """The per-text sums (:class:`TextStats`); fixes the Ritz directions if fewer tokens than needed came."""
        if self.basis is None:
            self._fix_basis()
        lens = np.zeros((2, self.n_texts, len(self.layers), 4))
        scored = np.zeros((2, self.n_texts))
        for j, layer in enumerate(self.layers):
            if layer in self.lens.per_text:
                values = self.lens.per_text[layer].cpu().numpy()
                lens[:, :, j] = values[..., :4]
                scored = values[..., 4]
        massive = self.massive.result()
        ratio = np.full((self.n_texts, len(self.layers)), np.nan)
        if massive.text_ratio is not None and len(massive.texts):
            for j, layer in enumerate(self.layers):
                row = np.flatnonzero(massive.layers == layer)
                if len(row):
                    ratio[massive.texts, j] = massive.text_ratio[row[0]]
        d = self.lm.info.hidden_size
        shift = np.stack([np.stack([(v.cpu().numpy() if v is not None else np.zeros(d)) for v in per])
                          for per in self.shift])
        basis = np.stack([np.stack([b.cpu().numpy() for b in per]) for per in self.basis])
        return TextStats(lens=lens, scored=scored, influence=self.influence, tokens=self.tokens,
                         angular=self.angular, norm=self.norm, entropy=self.entropy[..., 1], pooled=self.pooled,
                         massive_ratio=ratio, shift=shift, first=self.first, square=self.square, basis=basis,
                         ritz=self.ritz)


def prompt_entropies(hidden: torch.Tensor, mask: torch.Tensor, convention: str = "raw") -> torch.Tensor:
    """``values = prompt_entropies(hidden, mask, "skean")``: (B, 3) float64 per text of ``hidden`` (B, T, d) over
    its ``mask`` (B, T) tokens: the matrix entropy, normalised entropy and effective rank of
    :func:`layerscope.measures.entropy.matrix_entropy` in that ``convention``, every text's Gram spectrum taken
    batched; NaN for a text with fewer than 2 tokens (or, in the ``skean`` convention, a token equal to the
    text's mean). Eigenvalues below lambda_max max(n, d) eps count as 0."""
    z = torch.where(mask[..., None], hidden, 0.0).double()  # rows outside the mask are zero: zero eigenvalues
    n = mask.sum(dim=1)
    d = z.shape[-1]
    usable = n >= 2
    if convention == "skean":  # Skean et al. 2025's code: centre the text's tokens, unit rows, clamp the Gram
        mean = z.sum(dim=1, keepdim=True) / n.clamp(min=1)[:, None, None]
        z = torch.where(mask[..., None], z - mean, 0.0)
        norms = z.norm(dim=-1)
        usable &= ~((norms == 0) & mask).any(dim=1)
        z = z / torch.where(norms > 0, norms, 1.0)[..., None]
    if convention == "skean":  # the clamp makes the T x T and d x d Grams differ: each text gets theirs
        values = torch.linalg.eigvalsh((z @ z.transpose(1, 2)).clamp(min=0))  # (B, T) ascending
        for row in (usable & (n > d)).nonzero(as_tuple=True)[0].tolist():  # their code: Z'Z for N > D
            small = torch.linalg.eigvalsh((z[row].T @ z[row]).clamp(min=0))
            values[row] = F.pad(small, (values.shape[1] - d, 0))
    else:  # the same nonzero eigenvalues either way: the smaller matrix
        values = torch.linalg.eigvalsh(z @ z.transpose(1, 2) if z.shape[1] <= d else z.transpose(1, 2) @ z)
    largest = values[:, -1]
    usable &= largest > 0
    tolerance = largest * torch.clamp(n, min=d).double() * torch.finfo(torch.float64).eps
    values = torch.where(values >= tolerance[:, None], values, 0.0)
    p = values / values.sum(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.where(p > 0, p * p.log(), 0.0).sum(dim=1)
    bound = torch.log(torch.clamp(n, max=d).double())
    per_text = torch.stack([entropy, entropy / torch.where(bound > 0, bound, 1.0), entropy.exp()], dim=1)
    return torch.where(usable[:, None], per_text, torch.nan)


def prompt_entropy_sums(hidden: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``sums, n = prompt_entropy_sums(hidden, real)``: (3,) float64 sums over the batch's texts of 2 or more real
    tokens (``n`` of them) of :func:`prompt_entropies` in the raw convention; ``hidden`` (B, T, d), ``real``
    (B, T) bool."""
    values = prompt_entropies(hidden, real, "raw")
    used = ~values[:, 0].isnan()
    return torch.where(used[:, None], values, 0.0).sum(dim=0), int(used.sum())
