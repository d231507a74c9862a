"""One streamed pass over texts for the atlas study: every per-layer measure that needs token states is added up
batch by batch, so no token state outlives its batch and memory does not grow with the texts.

    result = atlas_pass(lm, texts)                  # every layer 0..n_layers; layers=[0, 4, ...] for fewer
    result.lens["lens_ce"]                          # (n,) token-weighted logit-lens cross-entropy per layer
    result.block_influence                          # (n_transitions,) mean 1 - cos(h_l, h_l+1) per layer l < L
    result.pooled                                   # (n_texts, n, d) float32: each text's mean-pooled state
    result.massive.massive_ratio                    # (n,) from engine.atlas.massive_profile
    result.spectrum["top1_ratio"]                   # (n,) covariance top-1 share of the token states

Layer ``l < n_layers`` is hidden state ``l`` (the input of decoder block ``l``); at ``l = n_layers`` every measure
reads the last block's output before the final norm (the residual stream, as the anisotropy study's default),
except the logit lens, whose layer ``n_layers`` is the model's own prediction (it applies the final norm to every
layer itself). Block ``l``'s influence compares its input (state ``l``) with its output (state ``l + 1``).

What is summed per batch (float64, on the model's device, read back once per batch: no host sync per layer):

- the logit lens (:mod:`.lens`) on every scored token;
- block influence (ShortGPT, Men et al. 2024): 1 - cos(h_l, h_{l+1}) over every real token, position 0 included,
  and again without position 0 and the massive-activation tokens (:func:`.massive.massive_mask` at any block
  output);
- angular distance (Gromov et al. 2024): arccos(cos(h_l, h_{l+1})) / pi at each text's last token;
- the mean token norm ||h_l||, the mean-pooled vector of each text (``mean`` pooling: a BOS token left out);
- the prompt entropy (Skean et al. 2025): the matrix entropy of each text's token Gram matrix (texts of 2 or more
  tokens; ``convention`` "skean", the authors' code, or "raw"), averaged over texts;
- the token states' covariance (sum x, sum x x^T, shifted by the first batch's mean), for the top-1 share of its
  spectrum as the anisotropy study computes it;
- the massive-activation profile (:mod:`.massive_profile`).

Every sum is also kept per text, for every real token and without position 0 and the massive tokens
(:class:`.atlas_sums.TextStats` in ``result.texts``), so the atlas can resample texts and refit its boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ...errors import ExtractionError
from ...measures.spectrum import CLIP, metrics_from_spectrum
from ...models.info import input_device
from ...models.load import LoadedModel
from ...progress import steps
from ..forward.batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
from ..forward.capture import last_capture, pre_norm_capture
from ..forward.guards import check_finite, encode
from ..forward.head import head_only_last
from ..lenses.logit import Translate
from .massive_profile import MassiveSummary
from .sums import ENTROPY_KEYS, PassSums, TextStats, prompt_entropy_sums

__all__ = ["AtlasPass", "atlas_pass", "prefix_within", "prompt_entropy_sums"]


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
    """(len(transitions),) the same without position 0 and the massive-activation tokens (NaN when no token is
    left)."""
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
    spectrum_kept: dict[str, np.ndarray]
    """The same without position 0 and the massive-activation tokens."""
    massive: MassiveSummary
    massive_tokens: int
    """Real tokens flagged massive at some decoder block output."""
    kept_tokens: int
    """Real tokens that are neither at position 0 nor massive (``block_influence_no_massive``'s tokens)."""
    texts: TextStats
    """Every sum above per text, for both token sets (what a resample of the texts needs)."""
    convention: str = "skean"
    """The prompt entropy's convention (:func:`.atlas_sums.prompt_entropies`)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """``forward_s`` (the model) and ``measures_s`` (the sums above), over all batches."""
    tuned_lens: dict[str, np.ndarray] | None = None
    """:attr:`lens` through the tuned lens the pass was given (None without one)."""


def prefix_within(lengths: Sequence[int], max_tokens: int | None) -> int:
    """How many texts, from the first, have at most ``max_tokens`` tokens together (at least one)."""
    if max_tokens is None:
        return len(lengths)
    total = np.cumsum(lengths)
    return max(1, int(np.searchsorted(total, max_tokens, side="right")))


@torch.inference_mode()
def atlas_pass(lm: LoadedModel, texts: Sequence[str], *, layers: Sequence[int] | None = None,
               batch_size: int | None = None, max_length: int | None = None, max_tokens: int | None = None,
               progress: bool | None = None, convention: str = "skean", tuned: Translate | None = None) -> AtlasPass:
    """Run ``texts`` (the first ones within ``max_tokens`` tokens when given) through ``lm`` once, in
    length-sorted batches, and measure ``layers`` (default: every layer 0..n_layers).

    ``ExtractionError`` before any forward pass for a text longer than the model's positions (``max_length``
    truncates), and after a batch whose states hold NaN or inf, naming layer and text. ``tuned``: a tuned lens's
    ``translate(layer, h)`` (:meth:`.tuned_lens.TunedLens.translate`): the lens metrics are then also measured
    through it (:attr:`AtlasPass.tuned_lens`), from the same states."""
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise ExtractionError("the atlas needs a non-empty list of non-empty texts")
    n_layers = lm.info.n_layers
    layers = sorted(set(range(n_layers + 1) if layers is None else layers))
    if not layers or layers[0] < 0 or layers[-1] > n_layers:
        raise ExtractionError(f"layers {layers} must lie in 0..{n_layers} for model {lm.info.name}")
    ids = encode(lm, texts, max_length)
    n_texts = prefix_within([len(x) for x in ids], max_tokens)
    ids = ids[:n_texts]
    sums = PassSums(lm, layers, n_texts, convention, tuned=tuned)
    seconds = {"forward_s": 0.0, "measures_s": 0.0}
    device = input_device(lm.model)
    budget = memory_budget(lm.model, lm.info.vocab_size, n_layers + 2)
    batches = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget)
    for index in steps(batches, f"atlas {lm.info.name}", "batch") if progress is not False else batches:
        start = time.perf_counter()
        batch_ids = [ids[i] for i in index]
        host = collate(batch_ids, index, pad_id(lm.tokenizer), side="right")
        layout = sums.layout(host, batch_ids).to(device)  # token positions found on the host: no device sync
        batch = host.to(device, non_blocking=True)
        with pre_norm_capture(lm.model) as captured, head_only_last(lm):  # no (B, T, vocab) logits: the lens
            out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)  # makes its own
        states = [h.to(device) for h in out.hidden_states]
        pre_norm = last_capture(captured, lm).to(device)
        del out
        check_finite(lm, texts, index, bad_layers=_nonfinite(states, pre_norm, layout.real))  # one sync
        middle = time.perf_counter()
        sums.add(batch, states, pre_norm, layout)
        seconds["forward_s"] += middle - start
        seconds["measures_s"] += time.perf_counter() - middle
    return _result(sums, n_tokens=sum(len(x) for x in ids), seconds=seconds)


def _nonfinite(states: list[torch.Tensor], pre_norm: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """(B, n_layers + 1) bool: row b holds NaN or inf at a real token of hidden state l (the pre-norm state, the
    last block's output, counts as state n_layers)."""
    bad = torch.stack([((~torch.isfinite(h)).any(dim=-1) & real).any(dim=1) for h in [*states, pre_norm]], 1)
    bad[:, -2] |= bad[:, -1]
    return bad[:, :-1]


def _result(sums: PassSums, n_tokens: int, seconds: dict[str, float]) -> AtlasPass:
    """The pass's means from the per-text sums of ``sums``."""
    counts = sums.counts
    if counts["tokens"] < 2:
        raise ExtractionError(f"the texts hold {counts['tokens']} token(s); the atlas needs at least 2 "
                              "(a covariance, a next token to score); give longer or more texts")
    stats = sums.text_stats()
    means = sums.lens.means()
    pick = [sums.lens.layers.index(layer) for layer in sums.layers]
    tuned = sums.tuned_lens.means() if sums.tuned_lens is not None else None
    tokens = stats.tokens.sum(axis=1)  # (2,)
    usable = ~np.isnan(sums.entropy[0])  # (n, L, 3): texts of 2 or more tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        influence = stats.influence.sum(axis=1) / tokens[:, None]  # (2, T): 0 / 0 = NaN
        entropy = np.where(usable, sums.entropy[0], 0.0).sum(axis=0) / usable.sum(axis=0)  # (L, 3)
    used = int(usable[:, 0, 0].sum())
    spectra = [sums.spectrum(s) for s in (0, 1)]
    spectrum = [_spectrum_metrics(values) for values in spectra]
    return AtlasPass(
        layers=sums.layers, n_layers=sums.n_layers, n_texts=counts["texts"], n_tokens=n_tokens,
        lens={key: value[pick] for key, value in means.items()}, n_scored=sums.lens.tokens[sums.n_layers],
        transitions=sums.transitions, block_influence=influence[0], block_influence_no_massive=influence[1],
        angular_distance=stats.angular[0].mean(axis=0), norm=stats.norm[0].sum(axis=0) / tokens[0],
        prompt_entropy={key: entropy[:, i] for i, key in enumerate(ENTROPY_KEYS)}, prompt_entropy_texts=used,
        pooled=stats.pooled[0], spectrum=spectrum[0], spectrum_kept=spectrum[1], massive=sums.massive.result(),
        massive_tokens=counts["massive"], kept_tokens=counts["kept"], texts=stats, convention=sums.convention,
        seconds={key: round(value, 3) for key, value in seconds.items()},
        tuned_lens={key: value[pick] for key, value in tuned.items()} if tuned is not None else None)


def _spectrum_metrics(values: list[np.ndarray]) -> dict[str, np.ndarray]:
    rows = [metrics_from_spectrum(np.maximum(v, CLIP)) if np.isfinite(v).all() else None for v in values]
    keys = next((list(r) for r in rows if r is not None), ["top1_ratio"])
    return {key: np.array([r[key] if r is not None else np.nan for r in rows]) for key in keys}
