"""The logit lens: read every layer's residual stream through the model's own final norm and output head.

    norm = final_norm(lm)                        # the module mapping the last block's output to the head's input
    sums = LensSums()
    lens_batch(lm, states, batch, sums)          # states: {layer: (B, T, d)}, layer n_layers required
    ...                                          # more batches into the same sums
    sums.layers                                  # [0, 4, ..., n_layers], ascending
    sums.means()["lens_kl"]                      # (len(layers),) float64, token-weighted over every scored token
    layer_logits(lm, 6, h6)                      # (..., vocab) the lens logits of one layer's states (..., d)

The logit lens (nostalgebraist 2020, "interpreting GPT: the logit lens") decodes hidden state ``l`` as if it
were the last one: ``logits_l = transform(head(final_norm(h_l)))``, and compares that distribution with the
model's real one (hidden state ``n_layers``, already normed) on each scored token: token ``t + 1`` is scored
from position ``t`` when both are real, as :func:`~.pooling.token_nll` does. Per layer it accumulates the
cross-entropy of the true next token, the lens entropy, KL(final || lens) and how often the lens's top token
is the model's. The logits are made on the scored tokens only, a chunk of tokens at a time, so no
(tokens x vocab) array larger than one chunk (per layer) ever exists.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ExtractionError
from ..models.info import decoder_layers, input_device, probe_ids
from ..models.load import LoadedModel
from .batching import Batch
from .head import CHUNK_BYTES, transform

METRICS = ("lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree")
"""What :meth:`LensSums.means` returns per layer."""

NORM_SUFFIXES = ("Norm",)
"""Class-name endings of a final norm as transformers names them (``LayerNorm``, ``LlamaRMSNorm``, ...)."""

_PROBE_TEXT = "The lens reads each layer through the final norm of this probe sentence."

_NORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""model -> its verified final norm (forgotten with the model)."""


def final_norm(lm: LoadedModel) -> torch.nn.Module:
    """``norm = final_norm(lm)``: the module that maps the last decoder block's output to the head's input.

    Candidates are the modules outside the decoder blocks whose class name ends in ``Norm`` (``LayerNorm``,
    ``RMSNorm``, ...), latest registered first; the first one whose output on a probe's last-block output equals
    the head's input in the same forward pass is it. A model whose head reads the last block's output unchanged
    gets ``nn.Identity()``. Checked once per model object; ``ExtractionError`` naming the model if none matches.
    """
    key = lm.model
    if key not in _NORMS:
        _NORMS[key] = _find_final_norm(lm)
    return _NORMS[key]


def _norm_candidates(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Modules outside the decoder blocks whose class name ends in a :data:`NORM_SUFFIXES` entry, last first."""
    inside = {id(m) for m in decoder_layers(model).modules()}
    found = [m for _, m in model.named_modules()
             if id(m) not in inside and type(m).__name__.endswith(NORM_SUFFIXES)]
    return found[::-1]


@torch.inference_mode()
def _probe_pre_and_head_input(lm: LoadedModel) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, d) the last block's output and (T, d) the head's input, from one forward pass on a probe text."""
    head = lm.model.get_output_embeddings()
    if head is None:
        raise ExtractionError(f"model {lm.info.name} has no output head (get_output_embeddings() is None), so the "
                              "logit lens cannot read its layers; layerscope supports decoder-only causal LMs")
    got: dict[str, torch.Tensor] = {}

    def after_last(_module, _args, output):
        got["pre"] = output[0] if isinstance(output, (tuple, list)) else output

    def before_head(_module, args):
        got["head"] = args[0]

    handles = [decoder_layers(lm.model)[-1].register_forward_hook(after_last),
               head.register_forward_pre_hook(before_head)]
    try:
        ids = torch.tensor([probe_ids(lm.model, lm.tokenizer, _PROBE_TEXT)], device=input_device(lm.model))
        lm.model(input_ids=ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    if "pre" not in got or "head" not in got:
        raise ExtractionError(f"model {lm.info.name} ran without calling its last decoder layer or its output "
                              "head, so its final norm cannot be found; layerscope supports decoder-only causal "
                              "LMs from transformers")
    return got["pre"][0], got["head"][0]


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.shape != want.shape:
        return False
    return bool(torch.allclose(got.float(), want.float().to(got.device), rtol=1e-4, atol=1e-5))


@torch.inference_mode()
def _find_final_norm(lm: LoadedModel) -> torch.nn.Module:
    pre, head_input = _probe_pre_and_head_input(lm)
    if torch.equal(pre, head_input.to(pre.device)):
        return torch.nn.Identity()
    for norm in _norm_candidates(lm.model):
        try:
            out = norm(pre)
        except (RuntimeError, TypeError, ValueError):  # a norm of another width or signature: not this one
            continue
        if isinstance(out, torch.Tensor) and _same(out, head_input):
            return norm
    raise ExtractionError(f"model {lm.info.name}: no module outside its decoder blocks whose class name ends in "
                          "'Norm' maps the last block's output to the output head's input, so the logit lens "
                          "cannot apply its final norm; layerscope supports decoder-only causal LMs from "
                          "transformers whose final norm is such a module")


@dataclass(frozen=True)
class FinalTerms:
    """What every layer's lens metrics need of the final logits (N, vocab), computed once per chunk."""

    log_p: torch.Tensor
    """(N, vocab) float32 log-softmax."""
    p: torch.Tensor
    """(N, vocab) its probabilities."""
    neg_entropy: torch.Tensor
    """(N,) sum p log p (0 log 0 = 0)."""
    top: torch.Tensor
    """(N,) the argmax token."""


def final_terms(final_logits: torch.Tensor) -> FinalTerms:
    """``terms = final_terms(final_logits)``: the :class:`FinalTerms` of (N, vocab) final logits."""
    log_p = F.log_softmax(final_logits.float(), dim=-1)
    p = log_p.exp()
    neg_entropy = torch.where(p > 0, p * log_p, 0.0).sum(dim=-1)  # as the cross term below: KL(final || final) = 0
    return FinalTerms(log_p=log_p, p=p, neg_entropy=neg_entropy, top=log_p.argmax(dim=-1))


class LensSums:
    """Running float64 sums of the logit-lens metrics per layer, over chunks of scored tokens (baukit style).

        sums = LensSums()
        sums.update(layer, lens_logits, final_logits, targets)   # (N, vocab), (N, vocab), (N,) for N tokens
        sums.means()            # {"lens_ce": (L,), "lens_entropy": (L,), "lens_kl": (L,), "lens_top1_agree": (L,)}
        sums.layers, sums.tokens  # the L layers (ascending) the means are ordered by, {layer: tokens seen}

    Each chunk is taken in float32 (``log_softmax`` of the logits); per-token values are summed in float64.
    ``lens_ce``: -log p_lens(true next token); ``lens_entropy``: -sum p_lens log p_lens; ``lens_kl``:
    KL(final || lens) = sum p_final (log p_final - log p_lens); ``lens_top1_agree``: 1 where the lens's argmax
    is the final argmax. A term with probability 0 counts 0 (no NaN from a logit of -inf).
    """

    def __init__(self, n_texts: int | None = None):
        self._sums: dict[int, torch.Tensor] = {}
        self.tokens: dict[int, int] = {}
        self.n_texts = n_texts
        self.per_text: dict[int, torch.Tensor] = {}
        """With ``n_texts``: {layer: (2, n_texts, 5) float64}: per text, the sums of the 4 metrics and the count of
        its scored tokens, over every scored token (``[0]``) and over those marked ``kept`` (``[1]``)."""

    @property
    def layers(self) -> list[int]:
        return sorted(self._sums)

    @torch.inference_mode()
    def update(self, layer: int, lens_logits: torch.Tensor, final_logits: torch.Tensor | FinalTerms,
               targets: torch.Tensor, texts: torch.Tensor | None = None, kept: torch.Tensor | None = None) -> None:
        """Add one chunk of ``N`` scored tokens at ``layer``: logits (N, vocab) each, ``targets`` (N,) token ids.
        ``final_logits`` may be given as :func:`final_terms` of them, computed once for every layer of a chunk.
        With ``n_texts`` set, ``texts`` (N,) says which text each token belongs to (0..n_texts-1) and ``kept`` (N,)
        bool which tokens count in the second per-text set (:attr:`per_text`)."""
        final = final_logits if isinstance(final_logits, FinalTerms) else final_terms(final_logits)
        if lens_logits.shape != final.log_p.shape or lens_logits.shape[:1] != targets.shape:
            raise ValueError(f"lens logits {tuple(lens_logits.shape)}, final logits {tuple(final.log_p.shape)} "
                             f"and targets {tuple(targets.shape)} must be (N, vocab), (N, vocab), (N,)")
        lens = F.log_softmax(lens_logits.float(), dim=-1)
        targets = targets.to(lens.device)
        ce = -lens.gather(1, targets[:, None]).squeeze(1)
        entropy = torch.special.entr(lens.exp()).sum(dim=-1)  # -p log p, 0 where p = 0
        cross = torch.where(final.p > 0, final.p * lens, 0.0).sum(dim=-1)  # sum p_final log p_lens
        kl = final.neg_entropy - cross  # sum p_final (log p_final - log p_lens)
        agree = lens.argmax(dim=-1) == final.top
        chunk = torch.stack([ce.double().sum(), entropy.double().sum(), kl.double().sum(), agree.double().sum()])
        if layer not in self._sums:
            self._sums[layer] = torch.zeros(len(METRICS), dtype=torch.float64, device=chunk.device)
            self.tokens[layer] = 0
        self._sums[layer] += chunk.to(self._sums[layer].device)
        self.tokens[layer] += len(targets)
        if self.n_texts is not None and texts is not None:
            values = torch.stack([ce.double(), entropy.double(), kl.double(), agree.double(),
                                  torch.ones_like(ce, dtype=torch.float64)], dim=1)  # (N, 5)
            if layer not in self.per_text:
                self.per_text[layer] = torch.zeros(2, self.n_texts, 5, dtype=torch.float64, device=values.device)
            texts = texts.to(values.device)
            self.per_text[layer][0].index_add_(0, texts, values)
            if kept is not None:
                kept = kept.to(values.device)
                self.per_text[layer][1].index_add_(0, texts[kept], values[kept])

    def means(self) -> dict[str, np.ndarray]:
        """{metric: (L,) float64} per layer of :attr:`layers`, each the mean over every token seen there."""
        layers = self.layers
        if not layers:
            return {name: np.zeros(0) for name in METRICS}
        totals = np.stack([self._sums[layer].cpu().numpy() for layer in layers])  # (L, 4)
        counts = np.array([self.tokens[layer] for layer in layers], dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = totals / counts[:, None]  # 0 / 0 = NaN for a layer with no token
        return {name: means[:, i] for i, name in enumerate(METRICS)}


def layer_logits(lm: LoadedModel, layer: int, hidden: torch.Tensor, *, head: torch.nn.Module | None = None,
                 norm: torch.nn.Module | None = None) -> torch.Tensor:
    """``logits = layer_logits(lm, layer, h)``: (..., vocab) the lens logits of hidden state ``layer`` (..., d).

    ``transform(lm, head(final_norm(lm)(h)))`` for ``layer < n_layers``; at ``n_layers`` ``h`` is the head's input,
    already normed, and only ``transform(lm, head(h))`` is applied. ``head`` and ``norm`` may be passed to skip
    looking them up (a loop over chunks); ``h`` is moved to the head's device."""
    if head is None:
        head = lm.model.get_output_embeddings()
        if head is None:
            raise ExtractionError(f"model {lm.info.name} has no output head (get_output_embeddings() is None), so "
                                  "the logit lens cannot read its layers; layerscope supports decoder-only causal LMs")
    hidden = hidden.to(head.weight.device)
    if layer == lm.info.n_layers:
        return transform(lm, head(hidden))
    return transform(lm, head((norm if norm is not None else final_norm(lm))(hidden)))


def scored_positions(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rows, cols, targets = scored_positions(batch)``: (N,) each; token ``cols + 1`` of text ``rows`` is
    scored from position ``cols`` (both real tokens), its id is ``targets``."""
    real = batch.attention_mask.bool()
    scored = real[:, 1:] & real[:, :-1]  # (B, T-1): position t predicts t + 1
    rows, cols = scored.nonzero(as_tuple=True)
    return rows, cols, batch.input_ids[rows, cols + 1]


@torch.inference_mode()
def lens_batch(lm: LoadedModel, states: Mapping[int, torch.Tensor], batch: Batch, sums: LensSums,
               chunk_tokens: int | None = None, kept: torch.Tensor | None = None) -> None:
    """``lens_batch(lm, {0: h0, 6: h6, n_layers: h_n}, batch, sums)``: add one batch's logit-lens metrics to ``sums``.

    ``states``: {layer: (B, T, d)} hidden states as :func:`~.capture.capture_states` hands them over (layer
    ``l < n_layers``: the input of decoder block ``l``, before the final norm, which is applied here;
    ``n_layers``: the head's input, already normed, required: it gives the final logits). The lens logits are
    ``transform(lm, head(final_norm(h)))`` (nostalgebraist 2020, "interpreting GPT: the logit lens"), made on
    the scored tokens of ``batch`` only, ``chunk_tokens`` tokens at a time (default: as many as fit float32
    logits of ``CHUNK_BYTES``). Per-text sums (``LensSums(n_texts)``) go to ``batch.index``'s texts; ``kept``
    (B, T) bool marks the predicting positions that count in the second per-text set.
    """
    n_layers = lm.info.n_layers
    if n_layers not in states:
        raise ValueError(f"lens_batch needs hidden state {n_layers} (the head's input) in states for the final "
                         f"logits; got layers {sorted(states)}")
    bad = [layer for layer in states if not (isinstance(layer, int) and 0 <= layer <= n_layers)]
    if bad:
        raise ValueError(f"states has layers {bad} outside 0..{n_layers}")
    head = lm.model.get_output_embeddings()
    if head is None:
        raise ExtractionError(f"model {lm.info.name} has no output head (get_output_embeddings() is None), so the "
                              "logit lens cannot read its layers; layerscope supports decoder-only causal LMs")
    norm = final_norm(lm) if any(layer < n_layers for layer in states) else None
    device = head.weight.device
    rows, cols, targets = scored_positions(batch.to(device))
    step = chunk_tokens or max(1, CHUNK_BYTES // (4 * head.weight.shape[0]))
    layers = sorted(states)

    def logits(layer: int, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        state = states[layer]
        h = state[r.to(state.device), c.to(state.device)].to(device)  # (chunk, d)
        return layer_logits(lm, layer, h, head=head, norm=norm)

    texts = torch.as_tensor(batch.index, dtype=torch.long, device=device)[rows]  # (N,) each token's text
    keep = kept.to(device)[rows, cols] if kept is not None else None
    for s in range(0, len(rows), step):
        r, c, t = rows[s : s + step], cols[s : s + step], targets[s : s + step]
        final = logits(n_layers, r, c)
        terms = final_terms(final)
        k = keep[s : s + step] if keep is not None else None
        for layer in layers:
            sums.update(layer, final if layer == n_layers else logits(layer, r, c), terms, t, texts[s : s + step], k)
