"""Every hidden state's rows of a corpus, from one forward pass per batch: what the tuned lens trains on.

    rows = cache_rows(lm, ids, index)          # ids: token id lists; index: each text's number in the corpus
    rows.states                                # (L + 1, N, d) states 0 .. n_layers of the N scored tokens
    rows.pre_norm                              # (N, d) the last block's output (the least-squares target)
    rows.texts, rows.positions                 # (N,) each row's text number and position in it
    terms = target_terms(lm, rows, top_k=8)    # what the KL needs of the model's own distribution, per row
    part = rows.select(mask)                   # the rows of a boolean (N,) mask

A scored token is position ``t`` of a text whose token ``t + 1`` is real (as the logit lens scores). ``keep``:
an optional (len(ids),) list of boolean arrays, one per text, of the positions to keep (the held-out positions
whose prefix no training text shares, :func:`~.tuned_lens_split.unseen_positions`). Rows are kept in the
model's dtype on the head's device; memory is ``(n_layers + 2) x N x d`` of it (SmolLM2-135M-Instruct, 30k tokens:
2.1 GB in float32).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ...models.load import LoadedModel
from ...progress import steps
from ..forward.batching import Batch, collate, pad_id, plan_batches
from ..forward.capture import PRE_NORM, capture_states
from ..forward.head import CHUNK_BYTES, head_only_last
from .logit_rows import scored_tokens

BATCH_TOKENS = 4096
"""Most padded tokens one caching batch holds."""


@dataclass(frozen=True)
class LensRows:
    """The scored tokens of a set of texts: every hidden state's row of each, and where it came from."""

    states: torch.Tensor
    """(L + 1, N, d) hidden states 0 .. n_layers (``n_layers``: the head's input), the model's dtype."""
    pre_norm: torch.Tensor
    """(N, d) the last decoder block's output, before the final norm."""
    texts: torch.Tensor
    """(N,) int64: the caller's index of each row's text."""
    positions: torch.Tensor
    """(N,) int64: the row's position in its text (0: the first token)."""
    targets: torch.Tensor
    """(N,) int64: the next token's id."""

    def __len__(self) -> int:
        return int(self.texts.shape[0])

    def select(self, which: torch.Tensor | np.ndarray) -> LensRows:
        """The rows of a boolean (N,) mask or an index array, in that order."""
        which = torch.as_tensor(which, device=self.texts.device)
        return replace(self, states=self.states[:, which.to(self.states.device)],
                       pre_norm=self.pre_norm[which.to(self.pre_norm.device)], texts=self.texts[which],
                       positions=self.positions[which], targets=self.targets[which])


@torch.no_grad()
def cache_rows(lm: LoadedModel, ids: Sequence[Sequence[int]], index: Sequence[int] | np.ndarray | None = None, *,
               keep: Sequence[np.ndarray] | None = None, batch_tokens: int = BATCH_TOKENS,
               progress: bool = True) -> LensRows:
    """The :class:`LensRows` of the texts ``ids`` (token id lists; ``index``: their numbers, default 0..n-1), one
    forward pass per batch of similar-length texts of at most ``batch_tokens`` padded tokens; ``keep``: per text,
    a boolean array over its scored positions (len - 1), only those kept."""
    n_layers = lm.info.n_layers
    device = lm.model.get_output_embeddings().weight.device
    index = np.arange(len(ids)) if index is None else np.asarray(index)
    lengths = [len(x) for x in ids]
    batches = plan_batches(lengths, max(1, batch_tokens // max(1, max(lengths, default=1))), batch_tokens)
    batches = [b for b in batches if any(lengths[i] >= 2 for i in b)]
    parts: list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    chosen = steps(batches, desc=f"hidden states of {lm.info.name}", unit="batch") if progress else batches
    for b in chosen:
        sub = [ids[i] for i in b]
        scored = scored_tokens(sub, index[b])
        mask = (torch.from_numpy(np.concatenate([np.asarray(keep[i], bool) for i in b]))
                if keep is not None else torch.ones(len(scored.rows), dtype=torch.bool))
        if keep is not None and len(mask) != len(scored.rows):
            raise ValueError("keep must hold one boolean per scored position (len - 1) of each text")
        rows, cols = scored.rows[mask], scored.cols[mask]
        kept: dict[int | str, torch.Tensor] = {}

        def on_state(layer, hidden, rows=rows, cols=cols, kept=kept):
            kept[layer] = hidden[rows.to(hidden.device), cols.to(hidden.device)].to(device)

        batch: Batch = collate(sub, np.asarray(b), pad_id=pad_id(lm.tokenizer), side="right")
        batch = batch.to(lm.model.get_input_embeddings().weight.device)
        with capture_states(lm, range(n_layers), on_state, pre_norm=True), head_only_last(lm) as head:
            lm.model(**batch.model_inputs(), use_cache=False)
        kept[n_layers] = head.hidden[rows.to(head.hidden.device), cols.to(head.hidden.device)].to(device)
        parts.append(([kept[layer] for layer in range(n_layers + 1)], kept[PRE_NORM], scored.texts[mask], cols,
                      scored.targets[mask]))
    d = lm.info.hidden_size
    dtype = lm.model.get_output_embeddings().weight.dtype
    if not parts:
        empty = torch.zeros(0, dtype=torch.long)
        return LensRows(torch.zeros(n_layers + 1, 0, d, dtype=dtype, device=device),
                        torch.zeros(0, d, dtype=dtype, device=device), empty, empty, empty)
    states = torch.cat([torch.stack(p[0]) for p in parts], dim=1)
    return LensRows(states=states, pre_norm=torch.cat([p[1] for p in parts]), texts=torch.cat([p[2] for p in parts]),
                    positions=torch.cat([p[3] for p in parts]), targets=torch.cat([p[4] for p in parts]))


@dataclass(frozen=True)
class TargetTerms:
    """What KL(final || lens) needs of the model's own next-token distribution ``p`` of each row.

    With plain logits ``z = W x`` (no head bias, no soft-capping), ``KL = sum p log p - mu . x + logsumexp(W x)``
    for a lens's head input ``x``, where ``mu = sum_v p_v W_v``: the target enters the loss only through
    ``neg_entropy`` and ``mu``, so only the normaliser ``logsumexp`` needs the vocabulary."""

    neg_entropy: torch.Tensor
    """(N,) float32 sum_v p_v log p_v."""
    mu: torch.Tensor
    """(N, d) float32 sum_v p_v W_v: the head's rows averaged under ``p``."""
    top: torch.Tensor
    """(N, k) int64 the ``k`` most likely next tokens."""
    unigram: torch.Tensor
    """(vocab,) float64 the mean of ``p`` over the rows: the proposal of the sampled negatives."""


@torch.no_grad()
def target_terms(head_weight: torch.Tensor, final_inputs: torch.Tensor, top_k: int = 8,
                 progress: bool = False) -> TargetTerms:
    """The :class:`TargetTerms` of rows whose head input is ``final_inputs`` (N, d), the head ``head_weight``
    (vocab, d) read in float32, a chunk of rows at a time."""
    weight = head_weight.float()
    vocab, d = weight.shape
    n = final_inputs.shape[0]
    step = max(1, CHUNK_BYTES // (8 * vocab))
    neg_entropy = torch.zeros(n, device=weight.device)
    mu = torch.zeros(n, d, device=weight.device)
    top = torch.zeros(n, top_k, dtype=torch.long, device=weight.device)
    unigram = torch.zeros(vocab, dtype=torch.float64, device=weight.device)
    chunks = range(0, n, step)
    for s in steps(chunks, desc="target distributions", unit="chunk") if progress else chunks:
        x = final_inputs[s : s + step].to(weight.device, torch.float32)
        log_p = torch.log_softmax(x @ weight.T, dim=-1)
        p = log_p.exp()
        neg_entropy[s : s + step] = (p * log_p).sum(-1)
        mu[s : s + step] = p @ weight
        top[s : s + step] = log_p.topk(top_k, dim=-1).indices
        unigram += p.sum(0, dtype=torch.float64)
    return TargetTerms(neg_entropy=neg_entropy, mu=mu, top=top, unigram=unigram / max(1, n))
