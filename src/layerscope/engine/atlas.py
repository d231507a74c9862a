"""One streamed pass over texts for the atlas study: every per-layer measure that needs token states is added up
batch by batch, so no token state outlives its batch and memory does not grow with the texts.

    result = atlas_pass(lm, texts)                  # every layer 0..n_layers; layers=[0, 4, ...] for fewer
    result.lens["lens_ce"]                          # (n,) token-weighted logit-lens cross-entropy per layer
    result.block_influence                          # (n_transitions,) mean 1 - cos(h_l, h_l+1) per layer l < L
    result.pooled                                   # (n_texts, n, d) float32: each text's mean-pooled state
    result.massive.massive_ratio                    # (n,) from engine.massive_profile
    result.spectrum["top1_ratio"]                   # (n,) covariance top-1 share of the token states

Layer ``l < n_layers`` is hidden state ``l`` (the input of decoder block ``l``); at ``l = n_layers`` every measure
reads the last block's output before the final norm (the residual stream, as the anisotropy study's default),
except the logit lens, whose layer ``n_layers`` is the model's own prediction (it applies the final norm to every
layer itself). Block ``l``'s influence compares its input (state ``l``) with its output (state ``l + 1``).

What is summed per batch (float64, on the model's device):

- the logit lens (:mod:`.lens`) on every scored token;
- block influence (ShortGPT, Men et al. 2024): 1 - cos(h_l, h_{l+1}) over every real token, position 0 included,
  and again without the massive-activation tokens (:func:`.massive.massive_mask` at any block output);
- angular distance (Gromov et al. 2024): arccos(cos(h_l, h_{l+1})) / pi at each text's last token;
- the mean token norm ||h_l||, the mean-pooled vector of each text (``mean`` pooling: a BOS token left out);
- the prompt entropy (Skean et al. 2025): the matrix entropy of each text's token Gram matrix (texts of 2 or more
  tokens), averaged over texts;
- the token states' covariance (sum x, sum x x^T, shifted by the first batch's mean), for the top-1 share of its
  spectrum as the anisotropy study computes it;
- the massive-activation profile (:mod:`.massive_profile`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ExtractionError
from ..measures.spectrum import CLIP, metrics_from_spectrum
from ..models.info import input_device
from ..models.load import LoadedModel
from ..progress import steps
from .batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_batches
from .capture import last_capture, pre_norm_capture
from .guards import check_finite, encode
from .lens import LensSums, lens_batch
from .massive import massive_mask
from .massive_profile import MassiveProfile, MassiveSummary, delimiter_ids, position_class
from .pooling import mean_mask

ENTROPY_KEYS = ("entropy", "normalised_entropy", "effective_rank")


@dataclass
class AtlasPass:
    """What :func:`atlas_pass` measured on one model; arrays follow ``layers`` (or ``transitions``)."""

    layers: list[int]
    """The layers measured, ascending (``n_layers`` = the last block's output before the final norm)."""
    n_layers: int
    n_texts: int
    """Texts passed (all of them, or the first ones that fit ``max_tokens``)."""
    n_tokens: int
    """Real tokens of those texts."""
    lens: dict[str, np.ndarray]
    """{metric: (len(layers),)} from :meth:`.lens.LensSums.means`; layer ``n_layers`` is the model's own output."""
    n_scored: int
    """Tokens the lens scored (a next token to predict)."""
    transitions: list[int]
    """The layers ``l < n_layers`` of ``layers``: block ``l`` maps state ``l`` to state ``l + 1``."""
    block_influence: np.ndarray
    """(len(transitions),) mean over every real token of 1 - cos(h_l, h_{l+1})."""
    block_influence_no_massive: np.ndarray
    """(len(transitions),) the same without the massive-activation tokens (NaN when every token is one)."""
    angular_distance: np.ndarray
    """(len(transitions),) mean over texts of arccos(cos(h_l, h_{l+1})) / pi at the text's last token."""
    norm: np.ndarray
    """(len(layers),) mean ||h_l|| over every real token."""
    prompt_entropy: dict[str, np.ndarray]
    """{"entropy", "normalised_entropy", "effective_rank": (len(layers),)} means over texts of 2 or more tokens."""
    prompt_entropy_texts: int
    pooled: np.ndarray
    """(n_texts, len(layers), d) float32: mean pooling of each text's tokens (a BOS token left out)."""
    spectrum: dict[str, np.ndarray]
    """{metric: (len(layers),)} from :func:`~layerscope.measures.spectrum.metrics_from_spectrum` of the covariance
    of every real token's state (``top1_ratio`` is the anisotropy study's measure)."""
    massive: MassiveSummary
    massive_tokens: int
    """Real tokens flagged massive at some decoder block output (left out of ``block_influence_no_massive``)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """``forward_s`` (the model) and ``measures_s`` (the sums above), over all batches."""


def prefix_within(lengths: Sequence[int], max_tokens: int | None) -> int:
    """How many texts, from the first, have at most ``max_tokens`` tokens together (at least one)."""
    if max_tokens is None:
        return len(lengths)
    total = np.cumsum(lengths)
    return max(1, int(np.searchsorted(total, max_tokens, side="right")))


@torch.inference_mode()
def atlas_pass(lm: LoadedModel, texts: Sequence[str], *, layers: Sequence[int] | None = None,
               batch_size: int | None = None, max_length: int | None = None, max_tokens: int | None = None,
               progress: bool | None = None) -> AtlasPass:
    """Run ``texts`` (the first ones within ``max_tokens`` tokens when given) through ``lm`` once, in
    length-sorted batches, and measure ``layers`` (default: every layer 0..n_layers).

    ``ExtractionError`` before any forward pass for a text longer than the model's positions (``max_length``
    truncates), and after a batch whose states hold NaN or inf, naming layer and text."""
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise ExtractionError("the atlas needs a non-empty list of non-empty texts")
    n_layers = lm.info.n_layers
    layers = sorted(set(range(n_layers + 1) if layers is None else layers))
    if not layers or layers[0] < 0 or layers[-1] > n_layers:
        raise ExtractionError(f"layers {layers} must lie in 0..{n_layers} for model {lm.info.name}")
    ids = encode(lm, texts, max_length)
    n_texts = prefix_within([len(x) for x in ids], max_tokens)
    ids = ids[:n_texts]
    sums = _Sums(lm, layers, n_texts)
    device = input_device(lm.model)
    budget = memory_budget(lm.model, lm.info.vocab_size, n_layers + 2)
    batches = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget)
    for index in steps(batches, f"atlas {lm.info.name}", "batch") if progress is not False else batches:
        start = time.perf_counter()
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        with pre_norm_capture(lm.model) as captured:
            out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
        states = [h.to(device) for h in out.hidden_states]
        pre_norm = last_capture(captured, lm).to(device)
        del out
        real = batch.attention_mask.bool()
        bad = torch.stack([((~torch.isfinite(h)).any(dim=-1) & real).any(dim=1) for h in [*states, pre_norm]], 1)
        bad[:, -2] |= bad[:, -1]  # the pre-norm state is the last block's output: hidden state n_layers
        check_finite(lm, texts, index, bad_layers=bad[:, :-1])
        middle = time.perf_counter()
        sums.add(batch, states, pre_norm)
        sums.seconds["forward_s"] += middle - start
        sums.seconds["measures_s"] += time.perf_counter() - middle
    return sums.result(n_tokens=sum(len(x) for x in ids))


class _Sums:
    """The running sums of :func:`atlas_pass` for one model."""

    def __init__(self, lm: LoadedModel, layers: list[int], n_texts: int):
        self.lm, self.layers, self.n_texts = lm, layers, n_texts
        self.n_layers = lm.info.n_layers
        self.transitions = [layer for layer in layers if layer < self.n_layers]
        self.delimiters = delimiter_ids(lm.tokenizer)
        self.lens, self.massive = LensSums(), MassiveProfile()
        self.pooled = np.zeros((n_texts, len(layers), lm.info.hidden_size), dtype=np.float32)
        self.totals: dict[str, torch.Tensor] = {}
        self.shift: list[torch.Tensor | None] = [None] * len(layers)
        self.moment1: list[torch.Tensor | None] = [None] * len(layers)
        self.moment2: list[torch.Tensor | None] = [None] * len(layers)
        self.counts = {"tokens": 0, "texts": 0, "entropy_texts": 0, "massive": 0}
        self.seconds = {"forward_s": 0.0, "measures_s": 0.0}

    def _add(self, key: str, values: torch.Tensor) -> None:
        values = values.double()
        self.totals[key] = self.totals[key] + values if key in self.totals else values.clone()

    def add(self, batch: Batch, states: list[torch.Tensor], pre_norm: torch.Tensor) -> None:
        """One batch: ``states`` the model's hidden states 0..n_layers (B, T, d) each, ``pre_norm`` (B, T, d)."""
        n_layers, real = self.n_layers, batch.attention_mask.bool()
        residual = [*states[:n_layers], pre_norm]  # state n_layers: before the final norm
        lens_states = {layer: states[layer] for layer in self.layers if layer < n_layers}
        lens_batch(self.lm, {**lens_states, n_layers: states[n_layers]}, batch, self.lens)
        massive = torch.zeros_like(real)
        for layer in range(1, n_layers + 1):
            massive |= massive_mask(residual[layer], real)
        self.counts["massive"] += int(massive.sum())
        self.counts["tokens"] += int(real.sum())
        self.counts["texts"] += len(batch.index)
        self._add_transitions(batch, residual, real, real & ~massive)
        classes = position_class(batch, self.delimiters)
        pool_mask = mean_mask(batch, self.lm.tokenizer.bos_token_id)
        pool_mask = torch.where(pool_mask.any(dim=1, keepdim=True), pool_mask, real)  # a BOS-only text: itself
        weights = pool_mask.float() / pool_mask.sum(dim=1, keepdim=True)
        norms, entropies = [], []
        for j, layer in enumerate(self.layers):
            hidden = residual[layer]
            h = hidden.float()
            norms.append(torch.where(real, h.norm(dim=-1), 0.0).double().sum())
            self.pooled[batch.index, j] = torch.einsum("bt,btd->bd", weights, h).cpu().numpy()
            entropy, used = prompt_entropy_sums(h, real)
            entropies.append(entropy)
            self._add_moments(j, h[real])
            self.massive.update(layer, hidden, batch, classes)
        self.counts["entropy_texts"] += used
        self._add("norm", torch.stack(norms))
        self._add("entropy", torch.stack(entropies))  # (len(layers), 3)

    def _add_transitions(self, batch: Batch, residual: list[torch.Tensor], real: torch.Tensor,
                         kept: torch.Tensor) -> None:
        rows = torch.arange(len(batch.index), device=real.device)
        influence, kept_influence, angular = [], [], []
        for layer in self.transitions:
            cos = F.cosine_similarity(residual[layer].float(), residual[layer + 1].float(), dim=-1)  # (B, T)
            influence.append(torch.where(real, 1 - cos, 0.0).double().sum())
            kept_influence.append(torch.where(kept, 1 - cos, 0.0).double().sum())
            last = cos[rows, batch.last.to(real.device)].double().clamp(-1.0, 1.0)
            angular.append((torch.arccos(last) / math.pi).sum())
        if self.transitions:
            self._add("block_influence", torch.stack(influence))
            self._add("block_influence_no_massive", torch.stack(kept_influence))
            self._add("angular_distance", torch.stack(angular))
        self._add("kept_tokens", kept.sum())

    def _add_moments(self, j: int, x: torch.Tensor) -> None:
        """Add (N, d) token states to layer slot ``j``'s covariance sums (shifted by the first batch's mean)."""
        x = x.double()
        if self.shift[j] is None:
            self.shift[j] = x.mean(dim=0)
            self.moment1[j] = torch.zeros_like(self.shift[j])
            self.moment2[j] = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=x.device)
        x = x - self.shift[j]
        self.moment1[j] += x.sum(dim=0)
        self.moment2[j] += x.T @ x

    def _spectrum(self) -> dict[str, np.ndarray]:
        n = self.counts["tokens"]
        rows = []
        for j in range(len(self.layers)):
            mean = self.moment1[j] / n
            covariance = (self.moment2[j] - n * torch.outer(mean, mean)) / (n - 1)
            values = torch.linalg.eigvalsh(covariance).cpu().numpy()[::-1]
            rows.append(metrics_from_spectrum(np.maximum(values, CLIP)))
        return {key: np.array([r[key] for r in rows]) for key in rows[0]}

    def result(self, n_tokens: int) -> AtlasPass:
        if self.counts["tokens"] < 2:
            raise ExtractionError(f"the texts hold {self.counts['tokens']} token(s); the atlas needs at least 2 "
                                  "(a covariance, a next token to score); give longer or more texts")
        means = self.lens.means()
        pick = [self.lens.layers.index(layer) for layer in self.layers]
        totals = {key: value.cpu().numpy() for key, value in self.totals.items()}
        texts, tokens = self.counts["texts"], self.counts["tokens"]
        kept = float(totals["kept_tokens"])
        empty = np.zeros(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            entropy = totals["entropy"] / self.counts["entropy_texts"]  # 0 / 0: NaN where every text has 1 token
        return AtlasPass(
            layers=self.layers, n_layers=self.n_layers, n_texts=texts, n_tokens=n_tokens,
            lens={key: value[pick] for key, value in means.items()}, n_scored=self.lens.tokens[self.n_layers],
            transitions=self.transitions,
            block_influence=totals.get("block_influence", empty) / tokens,
            block_influence_no_massive=(totals.get("block_influence_no_massive", empty) / kept if kept
                                        else np.full(len(self.transitions), np.nan)),
            angular_distance=totals.get("angular_distance", empty) / texts,
            norm=totals["norm"] / tokens,
            prompt_entropy={key: entropy[:, i] for i, key in enumerate(ENTROPY_KEYS)},
            prompt_entropy_texts=self.counts["entropy_texts"], pooled=self.pooled,
            spectrum=self._spectrum(), massive=self.massive.result(), massive_tokens=self.counts["massive"],
            seconds={key: round(value, 3) for key, value in self.seconds.items()})


def prompt_entropy_sums(hidden: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``sums, n = prompt_entropy_sums(hidden, real)``: (3,) float64 sums over the batch's texts of 2 or more real
    tokens (``n`` of them) of :func:`layerscope.measures.entropy.matrix_entropy`'s entropy, normalised entropy and
    effective rank, each text's token Gram spectrum taken batched; ``hidden`` (B, T, d), ``real`` (B, T) bool.
    The same rule as ``matrix_entropy``: eigenvalues below lambda_max max(n, d) eps count as 0."""
    z = torch.where(real[..., None], hidden, 0.0).double()  # padding rows are zero: they add zero eigenvalues
    d = z.shape[-1]
    gram = z @ z.transpose(1, 2) if z.shape[1] <= d else z.transpose(1, 2) @ z
    values = torch.linalg.eigvalsh(gram)  # (B, k) ascending
    n = real.sum(dim=1)
    largest = values[:, -1]
    used = (n >= 2) & (largest > 0)
    tolerance = largest * torch.clamp(n, min=d).double() * torch.finfo(torch.float64).eps
    values = torch.where(values >= tolerance[:, None], values, 0.0)
    p = values / values.sum(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.where(p > 0, p * p.log(), 0.0).sum(dim=1)
    bound = torch.log(torch.clamp(n, max=d).double())
    per_text = torch.stack([entropy, entropy / torch.where(bound > 0, bound, 1.0), entropy.exp()], dim=1)
    return torch.where(used[:, None], per_text, 0.0).sum(dim=0), int(used.sum())
