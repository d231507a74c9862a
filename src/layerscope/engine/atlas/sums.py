"""The running sums of one atlas pass, kept per text so that a resample of the texts can rebuild every profile.

    sums = PassSums(lm, layers, n_texts, convention="skean")
    layout = sums.layout(host_batch, batch_ids).to(device)   # the batch's token positions, found on the host
    sums.add(batch, states, pre_norm, layout)             # once per batch: device work, then one copy back
    sums.store(batch.index, to_host(sums.measure(batch, states, pre_norm, layout)))  # the same, two steps
    stats = sums.text_stats()                             # the per-text sums (TextStats); waits for the entropy
    ratio, dense = sums.top1_ratios()                     # (2, L) covariance top-1 share of each token set

Two token sets are summed side by side (axis ``s`` of every :class:`TextStats` array): ``s = 0`` every real token
(for mean pooling: a BOS token left out), ``s = 1`` without position 0 and without the massive-activation tokens
(:func:`.massive.massive_mask` at any block output), the set behind the atlas's ``excl_massive`` check.

Every per-layer measure of a batch is computed on the model's device into tensors with a layer axis (a token
outside a set enters as a zero, through ``torch.where``, never through a boolean index), and read back to the
host once, at the end of the batch (:func:`.layout.to_host`; the pass adds its finiteness check to the same
copy): one host sync per batch, whatever the number of layers. The prompt entropy's Gram matrices come back in
that copy and are decomposed on the host (:mod:`.entropy`) by one worker thread while the next batch runs; each
batch's entropies are written, in batch order, when the next batch's copy is stored (or by :meth:`PassSums.finish`),
and an error there is raised then. Each text's median |activation| is taken once per layer: a measured layer's
massive-activation flags and profile table come from the same median (:func:`.massive_profile.table_and_flags`).
Once per pass, fixing the Ritz directions and the covariances' top eigenvalues (:mod:`.moments`) wait for their
decompositions.

The covariance top-1 share cannot be split by text exactly without a d x d matrix per text, so its resamples use
Rayleigh-Ritz: each text's second moment is kept in the ``RITZ_K`` leading principal directions of the first
``RITZ_MIN_TOKENS`` tokens (per layer and set), and a resample's top eigenvalue is that of its projected
covariance (exact when the resample's top direction lies in their span; never above it). The trace is exact
(:mod:`.moments`). The whole pass's top-1 share is exact (:meth:`PassSums.top1_ratios`): no other part of the
covariance spectra is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ...models.load import LoadedModel
from ..forward.batching import Batch
from ..forward.massive import massive_mask
from ..lenses.logit import LensSums, Translate, lens_batch
from . import entropy as atlas_entropy
from . import moments as atlas_moments
from .entropy import CONVENTIONS, EntropyGrams, from_host, host_bytes, prompt_entropies, prompt_entropy_sums
from .layout import Layout, to_host
from .massive_profile import MassiveProfile, delimiter_ids, table_and_flags, text_table
from .moments import RITZ_K, Moments

__all__ = ["CONVENTIONS", "ENTROPY_KEYS", "RITZ_K", "RITZ_MIN_TOKENS", "TOKEN_SETS", "PassSums", "TextStats",
           "prompt_entropies", "prompt_entropy_sums"]

ENTROPY_KEYS = ("entropy", "normalised_entropy", "effective_rank")
GRAM_KEYS = ("entropy", "grams", "grams_n", "grams_usable", "wide")
"""What :meth:`.entropy.EntropyGrams.result` puts in a batch's copy, for :func:`.entropy.from_host`."""
TOKEN_SETS = ("all", "excl_massive")
"""The two token sets of every per-text array (axis 0)."""
RITZ_MIN_TOKENS = atlas_moments.RITZ_MIN_TOKENS
"""Tokens whose covariance fixes the Ritz directions: the first batches' until this many are seen (read when a
pass starts)."""


@dataclass
class TextStats:
    """Per-text sums of one atlas pass (``s``: token set, :data:`TOKEN_SETS`; ``n`` texts; ``L`` layers;
    ``T`` transitions, the layers below ``n_layers``; ``d`` hidden size; ``k`` :data:`RITZ_K`)."""

    lens: np.ndarray
    """(2, n, L, 4) sums over the text's scored tokens of lens_ce, lens_entropy, lens_kl, lens_top1_agree."""
    tuned_lens: np.ndarray | None
    """The same through the tuned lens (None when the pass had none)."""
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

    def __init__(self, lm: LoadedModel, layers: list[int], n_texts: int, convention: str = "skean",
                 tuned: Translate | None = None):
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown entropy convention {convention!r}; use {' or '.join(CONVENTIONS)}")
        self.lm, self.layers, self.n_texts, self.convention = lm, layers, n_texts, convention
        self.n_layers = lm.info.n_layers
        self.transitions = [layer for layer in layers if layer < self.n_layers]
        self.delimiters = delimiter_ids(lm.tokenizer)
        self.lens, self.massive = LensSums(n_texts), MassiveProfile()
        self.tuned = tuned
        self.tuned_lens = LensSums(n_texts) if tuned is not None else None
        n, n_l, n_t, d = n_texts, len(layers), len(self.transitions), lm.info.hidden_size
        self.moments = Moments(n_l, d, RITZ_K)
        self.ritz_min_tokens = RITZ_MIN_TOKENS  # read here, so that a test may set it for a pass
        self.k = self.moments.k
        self.influence = np.zeros((2, n, n_t))
        self.angular = np.full((2, n, n_t), np.nan)
        self.tokens = np.zeros((2, n))
        self.norm = np.zeros((2, n, n_l))
        self.entropy = np.full((2, n, n_l, len(ENTROPY_KEYS)), np.nan)
        self.pooled = np.zeros((2, n, n_l, d), dtype=np.float32)
        self.first = np.zeros((2, n, n_l, d), dtype=np.float32)
        self.square = np.zeros((2, n, n_l))
        self.ritz = np.zeros((2, n, n_l, self.k, self.k), dtype=np.float32)
        self.counts = {"tokens": 0, "texts": 0, "massive": 0, "kept": 0}
        self._worker: ThreadPoolExecutor | None = None
        self._entropy_job: tuple[np.ndarray, Future] | None = None
        """The last stored batch's texts and its prompt entropies (K, B, 3), decomposing on the worker."""

    def layout(self, host: Batch, ids: Sequence[Sequence[int]]) -> Layout:
        """The :class:`.layout.Layout` of a right-padded ``host`` batch (on the CPU) of the id lists ``ids``."""
        return Layout.build(host, ids, self.lm.tokenizer.bos_token_id, self.delimiters)

    def add(self, batch: Batch, states: list[torch.Tensor], pre_norm: torch.Tensor,
            layout: Layout | None = None) -> None:
        """One batch: ``states`` the model's hidden states 0..n_layers (B, T, d) each, ``pre_norm`` (B, T, d), all on
        one device with ``batch`` and ``layout`` (:meth:`layout`; found from ``batch``, a host copy, when None):
        :meth:`measure`, one copy to the host, :meth:`store`."""
        self.store(batch.index, to_host(self.measure(batch, states, pre_norm, layout)))

    def measure(self, batch: Batch, states: list[torch.Tensor], pre_norm: torch.Tensor,
                layout: Layout | None = None) -> dict[str, torch.Tensor]:
        """One batch's sums as device tensors (arguments of :meth:`add`), for :meth:`store` once read back: no
        host sync, but once per pass where the batch fixes the Ritz directions."""
        layout = layout if layout is not None else self._layout_of(batch, states[0].device)
        residual = [*states[: self.n_layers], pre_norm]  # state n_layers: before the final norm
        tables, massive = self._massive(residual, layout)
        masks = torch.stack([layout.real, layout.kept_base & ~massive])  # (2, B, T) the two token sets
        lens_states = {layer: states[layer] for layer in self.layers if layer < self.n_layers}
        lens_states[self.n_layers] = states[self.n_layers]
        lens_batch(self.lm, lens_states, batch, self.lens, kept=masks[1], scored=layout.scored)
        if self.tuned_lens is not None:
            lens_batch(self.lm, lens_states, batch, self.tuned_lens, kept=masks[1], scored=layout.scored,
                       translate=self.tuned)
        return {"tokens": masks.sum(dim=2), "massive": massive.sum(), **self._transitions(residual, masks, layout),
                **self._layer_sums(residual, masks, layout, batch.index, tables)}

    def _massive(self, residual: list[torch.Tensor], layout: Layout) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
        """``tables, massive = self._massive(residual, layout)``: each measured layer's (B, 10) profile table
        (:func:`.massive_profile.text_table`) and the (B, T) tokens massive at any block output (layers
        1..n_layers), each text's median taken once per layer: from one median for a layer that needs both."""
        massive = torch.zeros_like(layout.real)
        tables = {}
        for layer in sorted(set(self.layers) | set(range(1, self.n_layers + 1))):
            hidden = residual[layer]
            if layer not in self.layers:
                massive |= massive_mask(hidden, layout.real, known=massive)
            elif layer == 0:  # the embeddings: never a block output
                tables[layer] = text_table(hidden, layout.real, layout.classes)
            else:
                tables[layer], flags = table_and_flags(hidden, layout.real, layout.classes)
                massive |= flags
        return tables, massive

    def _layout_of(self, batch: Batch, device: torch.device) -> Layout:
        host = batch.to("cpu")
        lengths = host.attention_mask.sum(dim=1).tolist()
        ids = [row[:length] for row, length in zip(host.input_ids.tolist(), lengths, strict=True)]
        return self.layout(host, ids).to(device)

    def _transitions(self, residual: list[torch.Tensor], masks: torch.Tensor, layout: Layout) -> dict:
        """{"influence": (2, B, T_n) sums of 1 - cos(h_l, h_l+1) per text, "angular": (2, B, T_n) at its last
        token (NaN in set 1 where that token is left out)} for the transitions ``l``."""
        B = masks.shape[1]
        if not self.transitions:
            empty = torch.zeros(2, B, 0, dtype=torch.float64, device=masks.device)
            return {"influence": empty, "angular": empty}
        cos = torch.stack([F.cosine_similarity(residual[layer].float(), residual[layer + 1].float(), dim=-1)
                           for layer in self.transitions])  # (T_n, B, T)
        influence = torch.where(masks[:, None], 1 - cos[None], 0.0).double().sum(dim=-1)  # (2, T_n, B)
        angle = torch.arccos(cos[:, layout.rows, layout.last].double().clamp(-1.0, 1.0)) / math.pi  # (T_n, B)
        kept_last = masks[1, layout.rows, layout.last]  # (B,)
        angular = torch.stack([angle, torch.where(kept_last, angle, torch.nan)])  # (2, T_n, B)
        return {"influence": influence.transpose(1, 2), "angular": angular.transpose(1, 2)}

    def _layer_sums(self, residual: list[torch.Tensor], masks: torch.Tensor, layout: Layout,
                    index: np.ndarray, tables: dict[int, torch.Tensor]) -> dict:
        """Every per-layer sum of one batch, as device tensors with a layer axis (names of :meth:`store`);
        ``tables`` each layer's (B, 10) massive-profile table."""
        B, d = masks.shape[1], self.lm.info.hidden_size
        members = masks.flatten(1)[:, layout.flat]  # (2, N): each real token's sets
        weights = torch.stack([layout.pool, masks[1]]).float()
        weights = weights / weights.sum(dim=2, keepdim=True)  # (2, B, T); a text without such tokens: NaN
        size = host_bytes(2 * len(self.layers), B, masks.shape[2], d, self.convention)
        grams = EntropyGrams(self.convention, d, on_host=size <= atlas_entropy.HOST_GRAM_BYTES)
        moments = self.moments
        pending = moments.basis is None and moments.pending_tokens + len(layout.flat) < self.ritz_min_tokens
        norms, pooled, first, square, ritz, kept_rows = [], [], [], [], [], []
        for j, layer in enumerate(self.layers):
            h = residual[layer].float()  # (B, T, d)
            norms.append(h.norm(dim=-1))
            pooled.append(torch.einsum("sbt,btd->sbd", weights, h))  # (2, B, d)
            for s in range(2):
                grams.add(h, masks[s])
            rows = h.flatten(0, 1).index_select(0, layout.flat)  # (N, d) the real tokens
            sums = moments.add(j, rows, members, layout.text_row, B)
            first.append(sums[0].float())
            square.append(sums[1])
            ritz.append(sums[2])
            kept_rows.append(rows if pending else None)
        moments.count += members.sum(dim=1)
        out = {"norm": torch.where(masks[:, None], torch.stack(norms)[None], 0.0).double().sum(-1).transpose(1, 2),
               "pooled": torch.stack(pooled, dim=2), "first": torch.stack(first, dim=2),
               "square": torch.stack(square, dim=2), "tables": torch.stack([tables[layer] for layer in self.layers])}
        ritz = self._ritz(ritz, kept_rows, residual, members, layout, index)
        if ritz is not None:
            out["ritz"] = ritz
        return {**out, **grams.result()}  # last: on the device path eigvalsh waits for every measure queued

    def _ritz(self, ritz: list, kept_rows: list, residual: list[torch.Tensor], members: torch.Tensor,
              layout: Layout, index: np.ndarray) -> torch.Tensor | None:
        """(2, B, L, k, k) float32 Ritz sums of this batch, or None while its states wait for the directions."""
        moments = self.moments
        if moments.basis is not None and ritz[0] is not None:
            return torch.stack(ritz, dim=2).float()
        moments.pending_tokens += len(layout.flat)
        if moments.pending_tokens < self.ritz_min_tokens:
            moments.keep(index, layout.text_row, members, kept_rows)
            return None
        moments.fix_basis()
        self._store_pending()
        B = layout.rows.shape[0]
        return torch.stack([moments.project(j, residual[layer].float().flatten(0, 1).index_select(0, layout.flat),
                                            members, layout.text_row, B)
                            for j, layer in enumerate(self.layers)], dim=2).float()

    def _store_pending(self) -> None:
        """Project the batches kept for the Ritz directions and write their sums (one copy back)."""
        done = self.moments.project_pending()
        host = to_host({str(i): ritz.float() for i, (_, ritz) in enumerate(done)})
        for i, (index, _) in enumerate(done):
            rows = torch.from_numpy(np.asarray(index, dtype=np.int64))
            torch.from_numpy(self.ritz).index_copy_(1, rows, torch.from_numpy(host[str(i)]))

    def store(self, index: np.ndarray, host: dict[str, np.ndarray]) -> None:
        """Write one batch's sums (:meth:`measure`, read back) at its texts ``index``; its prompt entropies go to
        the worker thread, and the previous batch's are written first (their errors raised here)."""
        grams = {key: host.pop(key) for key in GRAM_KEYS if key in host}
        self._collect_entropy()
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="atlas-entropy")
        self._entropy_job = (index, self._worker.submit(from_host, grams, self.lm.info.hidden_size))
        rows = torch.from_numpy(np.asarray(index, dtype=np.int64))
        for name in ("tokens", "influence", "angular", "norm", "pooled", "first", "square", "ritz"):
            if name in host:  # torch's index_copy_ spreads the copy over the CPU's threads
                into = torch.from_numpy(getattr(self, name))
                into.index_copy_(1, rows, torch.from_numpy(host[name]).to(into.dtype))
        for j, layer in enumerate(self.layers):
            self.massive.add_table(layer, host["tables"][j], index)
        self.counts["massive"] += int(host["massive"])
        self.counts["kept"] += int(host["tokens"][1].sum())
        self.counts["tokens"] += int(host["tokens"][0].sum())
        self.counts["texts"] += len(index)

    def _collect_entropy(self) -> None:
        """Wait for the worker's last job and write its (K, B, 3) prompt entropies at its texts."""
        if self._entropy_job is None:
            return
        index, job = self._entropy_job
        self._entropy_job = None
        entropy = job.result().view(len(self.layers), 2, len(index), 3).permute(1, 2, 0, 3)  # (2, B, L, 3)
        rows = torch.from_numpy(np.asarray(index, dtype=np.int64))
        torch.from_numpy(self.entropy).index_copy_(1, rows, entropy.to(torch.float64))

    def finish(self) -> None:
        """Write the last batch's prompt entropies and stop the worker thread (a second call does nothing)."""
        try:
            self._collect_entropy()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the worker thread, dropping a job not collected (a pass that stopped on an error)."""
        self._entropy_job = None
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker = None

    def top1_ratios(self) -> tuple[np.ndarray, np.ndarray]:
        """``ratio, dense = sums.top1_ratios()``: (2, L) float64 covariance top-1 share of each token set per layer
        slot, and (2, L) bool where it needed the dense ``eigvalsh`` (:meth:`.moments.Moments.top1`)."""
        return self.moments.top1([self.counts["tokens"], self.counts["kept"]])

    def text_stats(self) -> TextStats:
        """The per-text sums (:class:`TextStats`); fixes the Ritz directions if fewer tokens than needed came, and
        waits for the last batch's prompt entropies (:meth:`finish`)."""
        self.finish()
        if self.moments.basis is None:
            self.moments.fix_basis()
            self._store_pending()
        d = self.lm.info.hidden_size
        moments = self.moments
        shift = moments.shift if moments.shift is not None else torch.zeros(2, len(self.layers), d, dtype=torch.float64)
        sums = {"lens": self.lens, "tuned": self.tuned_lens}
        present = {key: [layer for layer in self.layers if layer in lens.per_text]
                   for key, lens in sums.items() if lens is not None}
        host = to_host({"shift": shift, "basis": moments.basis,  # one copy to the host
                        **{key: torch.stack([sums[key].per_text[layer] for layer in layers])
                           for key, layers in present.items() if layers}})
        lens, scored = self._lens_array(host.get("lens"), present["lens"])
        tuned = self._lens_array(host.get("tuned"), present["tuned"])[0] if "tuned" in present else None
        return TextStats(lens=lens, tuned_lens=tuned, scored=scored, influence=self.influence, tokens=self.tokens,
                         angular=self.angular, norm=self.norm, entropy=self.entropy[..., 1], pooled=self.pooled,
                         massive_ratio=self._massive_ratio(), shift=host["shift"].astype(np.float64),
                         first=self.first, square=self.square, basis=host["basis"], ritz=self.ritz)

    def _lens_array(self, stacked: np.ndarray | None, present: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(2, n, L, 4) the per-text metric sums of a :class:`LensSums` (``stacked``: (len(present), 2, n, 5), its
        layers ``present``) by layer slot, and (2, n) each text's scored tokens."""
        lens = np.zeros((2, self.n_texts, len(self.layers), 4))
        scored = np.zeros((2, self.n_texts))
        for i, layer in enumerate(present):
            lens[:, :, self.layers.index(layer)] = stacked[i][..., :4]
            scored = stacked[i][..., 4]
        return lens, scored

    def _massive_ratio(self) -> np.ndarray:
        """(n, L) each text's top / median |activation| per layer slot."""
        massive = self.massive.result()
        ratio = np.full((self.n_texts, len(self.layers)), np.nan)
        if massive.text_ratio is not None and len(massive.texts):
            for j, layer in enumerate(self.layers):
                row = np.flatnonzero(massive.layers == layer)
                if len(row):
                    ratio[massive.texts, j] = massive.text_ratio[row[0]]
        return ratio

