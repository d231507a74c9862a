"""One streamed pass over texts for the atlas study: every per-layer measure that needs token states is added up
batch by batch, so no token state outlives its batch and memory does not grow with the texts.

    result = atlas_pass(lm, texts)                  # every layer 0..n_layers; layers=[0, 4, ...] for fewer
    result.lens["lens_ce"]                          # (n,) token-weighted logit-lens cross-entropy per layer
    result.block_influence                          # (n_transitions,) mean 1 - cos(h_l, h_l+1) per layer l < L
    result.pooled                                   # (n_texts, n, d) float32: each text's mean-pooled state
    result.massive.massive_ratio                    # (n,) from engine.atlas.massive_profile
    result.spectrum["top1_ratio"]                   # (n,) covariance top-1 share of the token states (its only key)

Layer ``l < n_layers`` is hidden state ``l`` (the input of decoder block ``l``); at ``l = n_layers`` every measure
reads the last block's output before the final norm (the residual stream, as the anisotropy study's default),
except the logit lens, whose layer ``n_layers`` is the model's own prediction (it applies the final norm to every
layer itself). Block ``l``'s influence compares its input (state ``l``) with its output (state ``l + 1``).

What is summed per batch (float64, on the model's device, read back once per batch with the batch's finiteness
check: one host sync per batch, none per layer):

- the logit lens (:mod:`.lens`) on every scored token;
- block influence (ShortGPT, Men et al. 2024): 1 - cos(h_l, h_{l+1}) over every real token, position 0 included,
  and again without position 0 and the massive-activation tokens (:func:`.massive.massive_mask` at any block
  output);
- angular distance (Gromov et al. 2024): arccos(cos(h_l, h_{l+1})) / pi at each text's last token;
- the mean token norm ||h_l||, the mean-pooled vector of each text (``mean`` pooling: a BOS token left out);
- the prompt entropy (Skean et al. 2025): the matrix entropy of each text's token Gram matrix (texts of 2 or more
  tokens; ``convention`` "skean", the authors' code, or "raw"), averaged over texts; the Grams are decomposed on
  the host by a worker thread while the next batch runs;
- the token states' covariance (sum x, sum x x^T, shifted by the first batch's mean), for its top-1 share (largest
  eigenvalue / trace, as the anisotropy study's ``top1_ratio``), the one number of its spectrum computed: the
  trace from the diagonal, the largest eigenvalue by block power iteration with a residual check and a dense
  ``eigvalsh`` only where that fails (:func:`.moments.top_eigenvalues`);
- the massive-activation profile (:mod:`.massive_profile`).

Every sum is also kept per text, for every real token and without position 0 and the massive tokens
(:class:`.sums.TextStats` in ``result.texts``), so the atlas can resample texts and refit its boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.info import input_device
from ...models.load import LoadedModel
from ...progress import steps
from ..forward.batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
from ..forward.capture import last_capture, pre_norm_capture
from ..forward.guards import check_finite, encode
from ..forward.head import head_only_last
from ..lenses.logit import Translate
from .layout import to_host
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
    """{"top1_ratio": (len(layers),)} the largest eigenvalue of the covariance of every real token's state over its
    trace (the anisotropy study's measure; NaN with fewer than 2 tokens): the one number of the spectrum the
    atlas reads, and the only one computed."""
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
    """The prompt entropy's convention (:func:`.entropy.prompt_entropies`)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """``forward_s`` (the model) and ``measures_s`` (the sums above, their copy back and storing), over all batches:
    wall time on the CPU; on a GPU the times between CUDA events recorded at the same points (read once, at the
    end), so that the forward's share ends when its kernels do, not when the host has queued them."""
    top1_dense: int = 0
    """Covariances (token sets x layers) whose largest eigenvalue needed the dense ``eigvalsh`` (the block power
    iteration's residual check failed)."""
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
    device = input_device(lm.model)
    clock = _Clock(device)
    budget = memory_budget(lm.model, lm.info.vocab_size, n_layers + 2)
    batches = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget)
    try:
        for index in steps(batches, f"atlas {lm.info.name}", "batch") if progress is not False else batches:
            start = clock.mark()
            batch_ids = [ids[i] for i in index]
            host = collate(batch_ids, index, pad_id(lm.tokenizer), side="right")
            layout = sums.layout(host, batch_ids).to(device)  # token positions found on the host: no device sync
            batch = host.to(device, non_blocking=True)
            with pre_norm_capture(lm.model) as captured, head_only_last(lm):  # no (B, T, vocab) logits: the lens
                out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)  # makes its own
            states = [h.to(device) for h in out.hidden_states]
            pre_norm = last_capture(captured, lm).to(device)
            del out
            middle = clock.mark()
            measured = sums.measure(batch, states, pre_norm, layout)
            measured["nonfinite"] = _nonfinite(states, pre_norm, layout.real)
            copied = to_host(measured)  # the batch's one host sync
            _check_finite(lm, texts, index, copied.pop("nonfinite"))
            sums.store(index, copied)
            clock.add(start, middle, clock.mark())
        sums.finish()
    finally:
        sums.close()
    return _result(sums, n_tokens=sum(len(x) for x in ids), seconds=clock.seconds())


class _Clock:
    """``forward_s`` and ``measures_s`` of a pass without a host sync per batch: wall time on the CPU, CUDA events on
    a GPU (their times read once, by :meth:`seconds`)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.marks: list[tuple] = []

    def mark(self):
        """A point in time: ``perf_counter()``, or a CUDA event recorded on the device's current stream."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def add(self, start, middle, end) -> None:
        """One batch: forward from ``start`` to ``middle``, measures from ``middle`` to ``end``."""
        self.marks.append((start, middle, end))

    def seconds(self) -> dict[str, float]:
        """{"forward_s", "measures_s"} summed over the batches (on a GPU, after waiting for the last event)."""
        if self.cuda and self.marks:
            self.marks[-1][2].synchronize()
        spans = [(self._span(a, b), self._span(b, c)) for a, b, c in self.marks]
        return {"forward_s": sum(f for f, _ in spans), "measures_s": sum(m for _, m in spans)}

    def _span(self, a, b) -> float:
        return a.elapsed_time(b) / 1000 if self.cuda else b - a


def _check_finite(lm: LoadedModel, texts: Sequence[str], index: np.ndarray, bad: np.ndarray) -> None:
    """Raise :func:`.guards.check_finite`'s error, naming layer and text, where the host copy of :func:`_nonfinite`
    (B, n_layers + 1) holds a True (no host sync: the flags are already on the host)."""
    if bad.any():
        check_finite(lm, texts, index, bad_layers=torch.from_numpy(bad))


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
    top1, dense = sums.top1_ratios()  # (2, L)
    return AtlasPass(
        layers=sums.layers, n_layers=sums.n_layers, n_texts=counts["texts"], n_tokens=n_tokens,
        lens={key: value[pick] for key, value in means.items()}, n_scored=sums.lens.tokens[sums.n_layers],
        transitions=sums.transitions, block_influence=influence[0], block_influence_no_massive=influence[1],
        angular_distance=stats.angular[0].mean(axis=0), norm=stats.norm[0].sum(axis=0) / tokens[0],
        prompt_entropy={key: entropy[:, i] for i, key in enumerate(ENTROPY_KEYS)}, prompt_entropy_texts=used,
        pooled=stats.pooled[0], spectrum={"top1_ratio": top1[0]}, spectrum_kept={"top1_ratio": top1[1]},
        massive=sums.massive.result(), top1_dense=int(dense.sum()),
        massive_tokens=counts["massive"], kept_tokens=counts["kept"], texts=stats, convention=sums.convention,
        seconds={key: round(value, 3) for key, value in seconds.items()},
        tuned_lens={key: value[pick] for key, value in tuned.items()} if tuned is not None else None)
