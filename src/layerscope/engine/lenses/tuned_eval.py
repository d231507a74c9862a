"""Per-state quality of the logit lens and the tuned lens on held-out texts, with bootstrap intervals over texts.

    ev = evaluate_lenses(lm, texts, lens, batch_size=8)      # lens=None: the logit lens only
    ev.states                        # (L + 1,) 0 .. n_layers
    ev.metrics["logit_kl"]           # (L + 1,) KL(final || logit lens) in bits per scored token
    ev.metrics["tuned_ce"]           # (L + 1,) cross-entropy of the true next token in bits per token
    ev.intervals["tuned_kl"]         # (L + 1, 2) the 95 % percentile bootstrap interval over texts
    ev.to_dict()                     # plain lists, for JSON (the lens's record keeps it)

Every number is a token-weighted mean over the scored tokens (token ``t + 1`` predicted from position ``t``, both
real, as the logit lens scores), computed per token in float32 from log-softmaxes (:mod:`.lens_rows`) and summed
in float64 per text; nats are turned into bits (divided by ln 2). The interval resamples texts with replacement
(``n_resamples`` times, seeded) and takes the ratio of the resampled sums, so long texts weigh as their tokens do.
At state ``n_layers`` both lenses are the model itself: KL 0 and the model's own cross-entropy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ...models.load import LoadedModel
from ...progress import steps
from ...stats import percentile_ci, resample_indices
from ..forward.batching import tokenize
from ..forward.head import CHUNK_BYTES
from .logit import final_norm, layer_logits
from .logit_rows import FinalTerms, final_terms
from .tuned import LensError, TunedLens, _head
from .tuned_rows import LensRows, cache_rows

KINDS = ("logit", "tuned")
MEASURES = ("ce", "kl")


@dataclass(frozen=True)
class LensEvaluation:
    """Per-state held-out numbers of :func:`evaluate_lenses`; keys ``"{logit|tuned}_{ce|kl}"``, in bits/token."""

    states: np.ndarray
    """(L + 1,) the hidden states 0 .. n_layers."""
    metrics: dict[str, np.ndarray]
    """{key: (L + 1,) float64}: token-weighted means, bits per scored token."""
    intervals: dict[str, np.ndarray]
    """{key: (L + 1, 2) float64}: the ``level`` percentile bootstrap interval over texts (NaN with < 2 texts)."""
    tokens: int
    """Scored tokens in all."""
    texts: int
    """Texts with at least one scored token (the units the bootstrap resamples)."""
    level: float = 0.95
    units: str = field(default="bits per scored token")

    def to_dict(self) -> dict:
        """Plain lists and numbers, for JSON."""
        return {"states": self.states.tolist(), "units": self.units, "tokens": self.tokens, "texts": self.texts,
                "level": self.level, "metrics": {k: v.tolist() for k, v in self.metrics.items()},
                "intervals": {k: v.tolist() for k, v in self.intervals.items()}}


@torch.no_grad()
def evaluate_lenses(lm: LoadedModel, texts: Sequence[str], lens: TunedLens | None = None, *, batch_size: int = 8,
                    max_length: int | None = None, n_resamples: int = 1000, level: float = 0.95, seed: int = 0,
                    exclude: Sequence[Sequence[int]] | None = None, progress: bool = True) -> LensEvaluation:
    """Cross-entropy (bits/token) and KL(final || lens) (bits/token) of every hidden state 0..n_layers of ``lm``
    on ``texts``, for the logit lens and (with ``lens``) the tuned lens, each with a bootstrap interval over texts.

    ``exclude``: token id lists (a lens's training texts); a position whose prefix starts one of them is not
    scored (:func:`~.tuned_lens_split.unseen_positions`), so the numbers are held out. One forward pass per
    batch of ``batch_size`` texts (cut to ``max_length`` tokens), then :func:`evaluate_rows`."""
    from .tuned_split import unseen_positions

    ids = tokenize(lm.tokenizer, texts, max_length)
    keep = unseen_positions(exclude, ids) if exclude is not None else None
    longest = max((len(x) for x in ids), default=1)
    rows = cache_rows(lm, ids, keep=keep, batch_tokens=max(1, batch_size) * longest, progress=progress)
    return evaluate_rows(lm, rows, lens, n_texts=len(ids), n_resamples=n_resamples, level=level, seed=seed,
                         progress=progress)


@torch.no_grad()
def evaluate_rows(lm: LoadedModel, rows: LensRows, lens: TunedLens | None = None, *, n_texts: int | None = None,
                  n_resamples: int = 1000, level: float = 0.95, seed: int = 0, kinds: Sequence[str] = KINDS,
                  progress: bool = True) -> LensEvaluation:
    """The :class:`LensEvaluation` of cached rows (:func:`~.tuned_lens_rows.cache_rows`): every state's lenses
    read in float32 on the full vocabulary, a chunk of rows whose logits fit ``CHUNK_BYTES`` at a time, summed per
    text (``rows.texts``, ``n_texts`` of them, default its largest + 1); ``kinds``: which lenses of
    :data:`KINDS` (the tuned one needs ``lens``)."""
    n_layers = lm.info.n_layers
    if lens is not None and (lens.d_model, lens.n_layers) != (lm.info.hidden_size, n_layers):
        raise LensError(f"the tuned lens is for d_model={lens.d_model} and {lens.n_layers} layers, but model "
                        f"{lm.info.name} has d_model={lm.info.hidden_size} and {n_layers} layers; use a lens "
                        "trained for this model")
    kinds = [k for k in kinds if k != "tuned" or lens is not None]
    head, norm = _head(lm), final_norm(lm)
    device = head.weight.device
    texts = rows.texts.to(device)
    n_texts = int(texts.max()) + 1 if n_texts is None and len(rows) else (n_texts or 0)
    sums = torch.zeros(len(kinds), n_layers + 1, n_texts, 2, dtype=torch.float64, device=device)  # ce, kl
    counts = torch.zeros(n_texts, dtype=torch.float64, device=device)
    counts.index_add_(0, texts, torch.ones_like(texts, dtype=torch.float64))
    step = max(1, CHUNK_BYTES // (4 * head.weight.shape[0]))
    chunks = range(0, len(rows), step)
    chosen = steps(chunks, desc=f"evaluate lenses {lm.info.name}", unit="chunk") if progress else chunks
    for s in chosen:
        part = slice(s, s + step)
        targets = rows.targets[part].to(device)
        final = final_terms(layer_logits(lm, n_layers, rows.states[n_layers, part], head=head))
        own = torch.stack([-final.log_p.gather(1, targets[:, None]).squeeze(1), torch.zeros_like(targets,
                                                                                              dtype=torch.float32)],
                          dim=1).double()  # state n_layers: both lenses are the model itself, KL exactly 0
        for k in range(len(kinds)):
            sums[k, n_layers].index_add_(0, texts[part], own)
        for layer in range(n_layers):
            h = rows.states[layer, part]
            for k, kind in enumerate(kinds):
                logits = (layer_logits(lm, layer, h, head=head, norm=norm) if kind == "logit"
                          else lens.logits(layer, h, lm=lm, head=head, norm=norm))
                sums[k, layer].index_add_(0, texts[part], ce_and_kl(logits, final, targets))
    return _summary(kinds, sums.cpu().numpy(), counts.cpu().numpy(), n_resamples, level, seed)


def ce_and_kl(logits: torch.Tensor, final: FinalTerms, targets: torch.Tensor) -> torch.Tensor:
    """(n, 2) float64 per row: cross-entropy of ``targets`` and KL(final || lens) in nats, of lens ``logits``
    (n, vocab) against the model's ``final`` terms, in float32 from the log-softmax (what
    :func:`~.lens_rows.lens_values` gives in its columns 0 and 2, without the entropy and agreement passes)."""
    log_q = torch.log_softmax(logits.float(), dim=-1)
    ce = -log_q.gather(1, targets[:, None]).squeeze(1)
    cross = torch.bmm(final.p[:, None, :], log_q[:, :, None]).reshape(-1)  # sum_v p_v log q_v
    return torch.stack([ce, final.neg_entropy - cross], dim=1).double()


def _summary(kinds: Sequence[str], sums: np.ndarray, counts: np.ndarray, n_resamples: int, level: float,
             seed: int) -> LensEvaluation:
    """Means and bootstrap intervals from per-text sums (K, L + 1, n_texts, 2) nats and counts (n_texts,)."""
    keep = counts > 0
    sums, counts = sums[:, :, keep] / math.log(2), counts[keep]
    n_states, n = sums.shape[1], int(keep.sum())
    totals = sums.sum(axis=2)  # (K, L + 1, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = totals / counts.sum()
    draws = None
    if n >= 2 and n_resamples > 0:
        idx = resample_indices(n, n_resamples, np.random.default_rng(seed))
        weights = np.zeros((n_resamples, n))
        np.add.at(weights, (np.arange(n_resamples)[:, None], idx), 1.0)  # (R, n) times each text was drawn
        draws = np.einsum("klnm,rn->klmr", sums, weights) / (weights @ counts)  # (K, L + 1, 2, R)
    metrics, intervals = {}, {}
    for k, kind in enumerate(kinds):
        for m, measure in enumerate(MEASURES):
            key = f"{kind}_{measure}"
            metrics[key] = means[k, :, m]
            intervals[key] = (np.array([percentile_ci(draws[k, s, m], level) for s in range(n_states)])
                              if draws is not None else np.full((n_states, 2), np.nan))
    return LensEvaluation(states=np.arange(n_states), metrics=metrics, intervals=intervals,
                          tokens=int(counts.sum()), texts=n, level=level)
