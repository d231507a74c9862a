"""The logit lens's per-token numbers from a chunk of logits, on the logits' device, with no host sync.

    final = final_terms(final_logits)              # (N, vocab) the model's own logits, any dtype
    values = lens_values(lens_logits, final, t)    # (G, N, 4) float64: ce, entropy, kl, top-1 agree per row
    values = final_values(final, t)                # (N, 4) the same for the model's own logits (kl 0, agree 1)
    scored = scored_tokens(ids, index)             # which positions a batch scores, found on the host

Each chunk is taken in float32: ``lp = log_softmax(x)`` of the logits ``x`` and ``p = exp(lp)``, then per row

- ``ce`` = -lp[target];
- ``entropy`` = -sum p lp;
- ``kl`` = KL(final || lens) = sum p_f lp_f - sum p_f lp;
- ``agree`` = 1 where the lens's argmax is the model's.

The sums run over the log-probabilities, not the raw logits: ``lse - sum p x`` equals the entropy, but on logits
of +-30 (SmolLM2) it loses about 4e-4 of it to float32 rounding, where ``-sum p lp`` keeps 2e-5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

METRICS = ("lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree")
"""The four per-row values, in the order of the last axis of :func:`lens_values`."""


@dataclass(frozen=True)
class FinalTerms:
    """What every layer's lens metrics need of the model's own logits (N, vocab), computed once per chunk."""

    log_p: torch.Tensor
    """(N, vocab) float32 log-softmax."""
    p: torch.Tensor
    """(N, vocab) its probabilities."""
    neg_entropy: torch.Tensor
    """(N,) sum p log p."""
    top: torch.Tensor
    """(N,) the argmax token."""


def final_terms(final_logits: torch.Tensor) -> FinalTerms:
    """``terms = final_terms(final_logits)``: the :class:`FinalTerms` of (N, vocab) logits (any float dtype)."""
    log_p = torch.log_softmax(final_logits.float(), dim=-1)
    p = log_p.exp()
    return FinalTerms(log_p=log_p, p=p, neg_entropy=(p * log_p).sum(dim=-1), top=log_p.argmax(dim=-1))


def lens_values(lens_logits: torch.Tensor, final: FinalTerms, targets: torch.Tensor) -> torch.Tensor:
    """``values = lens_values(logits, final, targets)``: (G, N, 4) float64 per row of ``lens_logits`` (G, N, vocab)
    (G layers of the same N tokens, any float dtype): ce, entropy, KL(final || lens) and top-1 agreement
    (:data:`METRICS`), against the model's ``final`` terms of those N tokens and their ``targets`` (N,) ids."""
    G, N, _ = lens_logits.shape
    lens = torch.log_softmax(lens_logits.float(), dim=-1)  # (G, N, vocab)
    ce = -lens.gather(2, targets.expand(G, N)[..., None]).squeeze(2)
    entropy = -(lens.exp() * lens).sum(dim=-1)
    kl = final.neg_entropy - (final.p * lens).sum(dim=-1)  # sum p_f (log p_f - log p_lens)
    agree = lens.argmax(dim=-1) == final.top
    return torch.stack([ce.double(), entropy.double(), kl.double(), agree.double()], dim=-1)


def final_values(final: FinalTerms, targets: torch.Tensor) -> torch.Tensor:
    """``values = final_values(final, targets)``: (N, 4) float64, :func:`lens_values` of the model's own logits
    without a second log-softmax: KL is exactly 0 and the top-1 agreement 1."""
    ce = -final.log_p.gather(1, targets[:, None]).squeeze(1)
    zero, one = torch.zeros_like(ce, dtype=torch.float64), torch.ones_like(ce, dtype=torch.float64)
    return torch.stack([ce.double(), (-final.neg_entropy).double(), zero, one], dim=1)


@dataclass(frozen=True)
class Scored:
    """The tokens a batch scores: token ``cols + 1`` of batch row ``rows`` is predicted from position ``cols``
    (both real tokens); (N,) each, row-major (as ``nonzero`` of the (B, T - 1) mask lists them)."""

    rows: torch.Tensor
    cols: torch.Tensor
    targets: torch.Tensor
    """(N,) the predicted token ids."""
    texts: torch.Tensor
    """(N,) the caller's index of each token's text (``batch.index[rows]``)."""

    def to(self, device: torch.device | str, non_blocking: bool = True) -> Scored:
        """The same tokens on ``device`` (by default without waiting for the device's queued work)."""
        return Scored(*(t.to(device, non_blocking=non_blocking) for t in (self.rows, self.cols, self.targets,
                                                                          self.texts)))


def scored_tokens(ids: Sequence[Sequence[int]], index: Sequence[int] | np.ndarray) -> Scored:
    """``scored = scored_tokens(ids, batch.index)``: the :class:`Scored` tokens of a right-padded batch of the token
    id lists ``ids`` (what :func:`~.batching.collate` pads), found on the host from the lengths alone (CPU tensors;
    move them with ``.to(device)``)."""
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    n_scored = np.maximum(lengths - 1, 0)  # (B,) a text of n tokens scores n - 1
    rows = np.repeat(np.arange(len(ids)), n_scored)
    cols = np.arange(int(n_scored.sum())) - np.repeat(np.cumsum(n_scored) - n_scored, n_scored)
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    targets = flat[np.repeat(np.cumsum(lengths) - lengths, n_scored) + cols + 1]
    texts = np.asarray(index, dtype=np.int64)[rows]
    return Scored(*(torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)) for a in (rows, cols, targets, texts)))
