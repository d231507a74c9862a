"""The logit lens: read every layer's residual stream through the model's own final norm and output head.

    norm = final_norm(lm)                        # the module mapping the last block's output to the head's input
    sums = LensSums()
    lens_batch(lm, states, batch, sums)          # states: {layer: (B, T, d)}, layer n_layers required
    lens_batch(lm, states, batch, sums, scored=scored_tokens(ids, batch.index).to(device))   # no host sync
    ...                                          # more batches into the same sums
    sums.layers                                  # [0, 4, ..., n_layers], ascending
    sums.means()["lens_kl"]                      # (len(layers),) float64, token-weighted over every scored token
    layer_logits(lm, 6, h6)                      # (..., vocab) the lens logits of one layer's states (..., d)

The logit lens (nostalgebraist 2020, "interpreting GPT: the logit lens") decodes hidden state ``l`` as if it
were the last one: ``logits_l = transform(head(final_norm(h_l)))``, and compares that distribution with the
model's real one (hidden state ``n_layers``, already normed) on each scored token: token ``t + 1`` is scored
from position ``t`` when both are real, as :func:`~.pooling.token_nll` does. Per layer it accumulates the
cross-entropy of the true next token, the lens entropy, KL(final || lens) and how often the lens's top token
is the model's. The logits are made on the scored tokens only, in the model's dtype, a chunk of (token, layer)
rows at a time (several layers of the same tokens in one matrix product), so no (rows x vocab) float32 array
larger than one chunk ever exists; each chunk's numbers come from :mod:`.lens_rows` in float32 and every sum
stays on the device (read once, by :meth:`LensSums.means` or the atlas's per-batch copy).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.info import decoder_layers, input_device, probe_ids
from ...models.load import LoadedModel
from ..forward.batching import Batch
from ..forward.head import CHUNK_BYTES, transform
from .logit_rows import METRICS, FinalTerms, Scored, final_terms, final_values, lens_values, scored_tokens

__all__ = ["METRICS", "FinalTerms", "LensSums", "Scored", "final_norm", "final_terms", "layer_logits", "lens_batch",
           "scored_positions", "scored_tokens"]

Translate = Callable[[int, torch.Tensor], torch.Tensor]
"""``translate(layer, h)``: (N, d) -> (N, d), a tuned lens's translator of hidden state ``layer``."""

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


class LensSums:
    """Running float64 sums of the logit-lens metrics per layer, on the device, over chunks of scored tokens.

        sums = LensSums()                        # LensSums(n_texts): also per text (the atlas)
        sums.update(layer, lens_logits, final_logits, targets)   # (N, vocab), (N, vocab), (N,) for N tokens
        sums.add(layers, values, texts, kept)    # (G, N, 4) rows of .lens_rows.lens_values for G layers at once
        sums.means()            # {"lens_ce": (L,), "lens_entropy": (L,), "lens_kl": (L,), "lens_top1_agree": (L,)}
        sums.layers, sums.tokens  # the L layers (ascending) the means are ordered by, {layer: tokens seen}

    ``lens_ce``: -log p_lens(true next token); ``lens_entropy``: -sum p_lens log p_lens; ``lens_kl``:
    KL(final || lens) = sum p_final (log p_final - log p_lens); ``lens_top1_agree``: 1 where the lens's argmax
    is the final argmax (:mod:`.lens_rows`: float32 log-softmax per token, summed in float64). A probability that
    underflows to 0 counts 0 (the logits are finite: the atlas checks its states first). Nothing is read back to
    the host before :meth:`means`.
    """

    def __init__(self, n_texts: int | None = None):
        self.tokens: dict[int, int] = {}
        self.n_texts = n_texts
        self.per_text: dict[int, torch.Tensor] = {}
        """{layer: (2, n_texts, 5) float64}: per text, the sums of the 4 metrics and the count of its scored tokens,
        over every scored token (``[0]``) and over those marked ``kept`` (``[1]``); without ``n_texts`` one row
        (index 0) holds every token."""

    @property
    def layers(self) -> list[int]:
        return sorted(self.per_text)

    @torch.inference_mode()
    def update(self, layer: int, lens_logits: torch.Tensor, final_logits: torch.Tensor | FinalTerms,
               targets: torch.Tensor, texts: torch.Tensor | None = None, kept: torch.Tensor | None = None) -> None:
        """Add one chunk of ``N`` scored tokens at ``layer``: logits (N, vocab) each, ``targets`` (N,) token ids.
        ``final_logits`` may be given as :func:`final_terms` of them, computed once for every layer of a chunk.
        With ``n_texts`` set, ``texts`` (N,) says which text each token belongs to (0..n_texts-1) and ``kept`` (N,)
        bool which tokens count in the second per-text set (:attr:`per_text`)."""
        final = final_logits if isinstance(final_logits, FinalTerms) else final_terms(final_logits)
        if lens_logits.shape != final.p.shape or lens_logits.shape[:1] != targets.shape:
            raise ValueError(f"lens logits {tuple(lens_logits.shape)}, final logits {tuple(final.p.shape)} "
                             f"and targets {tuple(targets.shape)} must be (N, vocab), (N, vocab), (N,)")
        values = lens_values(lens_logits[None], final, targets.to(lens_logits.device))
        self.add([layer], values, texts, kept)

    def add(self, layers: list[int], values: torch.Tensor, texts: torch.Tensor | None = None,
            kept: torch.Tensor | None = None) -> None:
        """Add ``values`` (G, N, 4) float64 of ``layers`` (G of them) for the same ``N`` tokens: ``texts`` (N,) their
        texts (with ``n_texts``), ``kept`` (N,) bool the tokens of the second per-text set."""
        rows = torch.cat([values, torch.ones_like(values[..., :1])], dim=-1)  # (G, N, 5): the count last
        for g, layer in enumerate(layers):
            table = self._table(layer, rows.device)
            self.tokens[layer] += rows.shape[1]
            if self.n_texts is None or texts is None:
                table[0, 0] += rows[g].sum(dim=0)
                continue
            texts = texts.to(rows.device)
            table[0].index_add_(0, texts, rows[g])
            if kept is not None:
                table[1].index_add_(0, texts, torch.where(kept.to(rows.device)[:, None], rows[g], 0.0))

    def _table(self, layer: int, device: torch.device) -> torch.Tensor:
        if layer not in self.per_text:
            self.per_text[layer] = torch.zeros(2, self.n_texts or 1, 5, dtype=torch.float64, device=device)
            self.tokens[layer] = 0
        return self.per_text[layer]

    def means(self) -> dict[str, np.ndarray]:
        """{metric: (L,) float64} per layer of :attr:`layers`, each the mean over every token seen there (one copy
        to the host)."""
        layers = self.layers
        if not layers:
            return {name: np.zeros(0) for name in METRICS}
        totals = torch.stack([self.per_text[layer][0].sum(dim=0) for layer in layers]).cpu().numpy()  # (L, 5)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = totals[:, :4] / totals[:, 4:]  # 0 / 0 = NaN for a layer with no token
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
    scored from position ``cols`` (both real tokens), its id is ``targets``. ``nonzero`` on the batch's device (a
    host sync off the CPU): :func:`scored_tokens` finds the same positions on the host."""
    real = batch.attention_mask.bool()
    scored = real[:, 1:] & real[:, :-1]  # (B, T-1): position t predicts t + 1
    rows, cols = scored.nonzero(as_tuple=True)
    return rows, cols, batch.input_ids[rows, cols + 1]


def _scored(batch: Batch, device: torch.device) -> Scored:
    rows, cols, targets = scored_positions(batch.to(device))
    texts = torch.as_tensor(np.asarray(batch.index), dtype=torch.long)[rows.cpu()].to(device)
    return Scored(rows=rows, cols=cols, targets=targets, texts=texts)


def _check_states(lm: LoadedModel, states: Mapping[int, torch.Tensor]) -> torch.nn.Module:
    """The model's head, after checking ``states`` holds layer ``n_layers`` and only layers 0..n_layers."""
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
    return head


@torch.inference_mode()
def lens_batch(lm: LoadedModel, states: Mapping[int, torch.Tensor], batch: Batch, sums: LensSums,
               chunk_tokens: int | None = None, kept: torch.Tensor | None = None,
               scored: Scored | None = None, translate: Translate | None = None) -> None:
    """``lens_batch(lm, {0: h0, 6: h6, n_layers: h_n}, batch, sums)``: add one batch's logit-lens metrics to ``sums``.

    ``states``: {layer: (B, T, d)} hidden states as :func:`~.capture.capture_states` hands them over (layer
    ``l < n_layers``: the input of decoder block ``l``, before the final norm, which is applied here;
    ``n_layers``: the head's input, already normed, required: it gives the final logits). The lens logits are
    ``transform(lm, head(final_norm(h)))`` (nostalgebraist 2020, "interpreting GPT: the logit lens") in the
    model's dtype, made on the scored tokens of ``batch`` only: ``chunk_tokens`` tokens at a time (default: as
    many as fit float32 logits of ``CHUNK_BYTES``), and for each such chunk as many layers in one matrix product as
    fit the same bytes. Per-text sums (``LensSums(n_texts)``) go to ``batch.index``'s texts; ``kept`` (B, T) bool
    marks the predicting positions that count in the second per-text set. ``scored``: the batch's
    :func:`scored_tokens` already on the head's device (else found by ``nonzero``, a host sync off the CPU).
    ``translate(layer, h)``: a tuned lens's translator (:meth:`.tuned_lens.TunedLens.translate`), applied to each
    layer's rows ``h`` (N, d) before the final norm and cast to the head's dtype, as the tuned lens's own logits
    are made; the model's output (layer ``n_layers``) is never translated.
    """
    head = _check_states(lm, states)
    n_layers = lm.info.n_layers
    norm = final_norm(lm) if any(layer < n_layers for layer in states) else None
    device = head.weight.device
    scored = scored if scored is not None else _scored(batch, device)
    vocab = head.weight.shape[0]
    rows_per_chunk = max(1, CHUNK_BYTES // (4 * vocab))
    step = max(1, min(chunk_tokens or rows_per_chunk, rows_per_chunk))
    group = max(1, rows_per_chunk // step)  # layers per matrix product
    layers = sorted(layer for layer in states if layer != n_layers)
    n = len(scored.rows)
    values = torch.empty(len(layers) + 1, n, 4, dtype=torch.float64, device=device)  # layers, then n_layers
    for s in range(0, n, step):
        r, c, t = scored.rows[s : s + step], scored.cols[s : s + step], scored.targets[s : s + step]
        final_logits = layer_logits(lm, n_layers, _rows(states[n_layers], r, c), head=head)
        final = final_terms(final_logits)
        values[-1, s : s + step] = final_values(final, t)
        del final_logits
        for g in range(0, len(layers), group):
            chosen = layers[g : g + group]
            h = torch.stack([_moved(states[layer], r, c, layer, translate, head) for layer in chosen])  # (G, chunk, d)
            logits = layer_logits(lm, chosen[0], h, head=head, norm=norm)  # (G, chunk, vocab), the model's dtype
            values[g : g + len(chosen), s : s + step] = lens_values(logits, final, t)
    keep = kept.to(device)[scored.rows, scored.cols] if kept is not None else None
    sums.add([*layers, n_layers], values, scored.texts, keep)


def _moved(state: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, layer: int, translate: Translate | None,
           head: torch.nn.Module) -> torch.Tensor:
    """(N, d) the rows of ``state`` at (``rows``, ``cols``), through ``translate`` when given (the head's dtype)."""
    h = _rows(state, rows, cols)
    return h if translate is None else translate(layer, h).to(head.weight.dtype)


def _rows(state: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(N, d) the states of ``state`` (B, T, d) at (``rows``, ``cols``), gathered on the state's device."""
    return state[rows.to(state.device), cols.to(state.device)]
