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

from ..models.load import LoadedModel
from ..progress import steps
from ..stats import percentile_ci, resample_indices
from .batching import plan_batches, tokenize
from .head import CHUNK_BYTES
from .lens import final_norm, layer_logits
from .lens_rows import final_terms, lens_values
from .tuned_lens import LensError, TunedLens, _head, scored_states

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
                    progress: bool = True) -> LensEvaluation:
    """Cross-entropy (bits/token) and KL(final || lens) (bits/token) of every hidden state 0..n_layers of ``lm``
    on ``texts``, for the logit lens and (with ``lens``) the tuned lens, each with a bootstrap interval over texts.

    Streams: one batch of ``batch_size`` texts (cut to ``max_length`` tokens) at a time, and within it chunks of
    scored tokens whose float32 logits fit ``CHUNK_BYTES``; only per-text sums are kept."""
    n_layers = lm.info.n_layers
    if lens is not None:
        if (lens.d_model, lens.n_layers) != (lm.info.hidden_size, n_layers):
            raise LensError(f"the tuned lens is for d_model={lens.d_model} and {lens.n_layers} layers, but model "
                            f"{lm.info.name} has d_model={lm.info.hidden_size} and {n_layers} layers; use a lens "
                            "trained for this model")
    kinds = KINDS if lens is not None else KINDS[:1]
    head, norm = _head(lm), final_norm(lm)
    device = head.weight.device
    ids = tokenize(lm.tokenizer, texts, max_length)
    sums = torch.zeros(len(kinds), n_layers + 1, len(ids), 2, dtype=torch.float64, device=device)  # ce, kl
    counts = torch.zeros(len(ids), dtype=torch.float64, device=device)
    step = max(1, CHUNK_BYTES // (4 * head.weight.shape[0]))
    batches = plan_batches([len(x) for x in ids], batch_size)
    chosen = steps(batches, desc=f"evaluate lenses {lm.info.name}", unit="batch") if progress else batches
    for index in chosen:
        states, scored = scored_states(lm, [ids[i] for i in index], index)
        counts.index_add_(0, scored.texts, torch.ones_like(scored.texts, dtype=torch.float64))
        for s in range(0, len(scored.rows), step):
            part, targets = slice(s, s + step), scored.targets[s : s + step]
            final = final_terms(layer_logits(lm, n_layers, states[n_layers][part], head=head))
            for layer in range(n_layers + 1):
                for k, kind in enumerate(kinds):
                    h = states[layer][part]
                    logits = (layer_logits(lm, layer, h, head=head, norm=norm) if kind == "logit"
                              else lens.logits(layer, h, lm=lm, head=head, norm=norm))
                    values = lens_values(logits[None], final, targets)[0]  # (n, 4): ce, entropy, kl, agree
                    sums[k, layer].index_add_(0, scored.texts[part], values[:, [0, 2]])
    return _summary(kinds, sums.cpu().numpy(), counts.cpu().numpy(), n_resamples, level, seed)


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
