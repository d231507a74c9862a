"""Massive-activation profile of a model: how large its largest activations are, where and in which dimensions.

    delims = delimiter_ids(tokenizer)                     # frozenset of token ids: ".", ",", ..., "\\n"
    profile = MassiveProfile()
    for batch in batches:
        out = model(**batch.model_inputs(), output_hidden_states=True)
        classes = position_class(batch, delims)           # (B, T) int8: 0 start, 1 first delimiter, 2 other, -1 pad
        for layer, hidden in enumerate(out.hidden_states):
            profile.update(layer, hidden, batch, classes)  # hidden (B, T, d)
    summary = profile.result()                            # MassiveSummary: arrays with one row per layer seen
    table, flags = table_and_flags(hidden, real, classes)  # (B, 10) one layer's table, (B, T) its massive tokens

The measure follows Sun et al. 2024 ("Massive activations in large language models"): per layer and text, the
largest |activation| over the text's real tokens and all dimensions (its "top"), divided by the text's median
|activation| over the same values (the textbook median, as in :mod:`layerscope.engine.forward.massive`; padding never
counts, whatever it holds). For each layer the profile keeps the per-text ratios top / median, which position
class carries the top (the start token, the first delimiter, any other token) and in which dimension it sits,
and, per position class, the mean over texts of that class's largest |activation| / the text's median.
The |activations| are compared in the states' own precision (float32 at least, so a bfloat16 model's values
are exact); the ratios are computed in float64. Each :meth:`MassiveProfile.update` is one set of tensor
operations on the whole (B, T, d) batch, on the states' device (:func:`text_table`, no host sync), and one copy
of a (B, 10) table to the CPU; a caller that reads several layers' tables in one copy hands each to
:meth:`MassiveProfile.add_table`. :func:`table_and_flags` gives the same table and the layer's massive-activation
flags (:func:`~layerscope.engine.forward.massive.massive_mask`'s) from one median per text: the atlas takes each
text's median once per layer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from layerscope.engine.forward.batching import Batch
from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask
from layerscope.errors import ExtractionError

CLASSES = ("start", "first_delimiter", "other")
"""Position classes, by their code in :func:`position_class` (padding is -1)."""

PUNCTUATION = frozenset({".", ",", ";", ":", "!", "?"})
"""A token is a delimiter when its decoded text, stripped of spaces, is one of these, or it contains a newline."""


def is_delimiter(text: str) -> bool:
    """``is_delimiter(" .")`` -> True: ``text`` (one token's decoded text) stripped of spaces is in
    :data:`PUNCTUATION`, or ``text`` contains ``"\\n"``."""
    return "\n" in text or text.strip(" ") in PUNCTUATION


def delimiter_ids(tokenizer) -> frozenset[int]:
    """``delims = delimiter_ids(tokenizer)``: ids of every vocabulary token (``range(len(tokenizer))``, added
    tokens included) that :func:`is_delimiter` accepts once decoded on its own: ``"."``, ``","``, ``";"``,
    ``":"``, ``"!"``, ``"?"`` with or without surrounding spaces (``" ."``), and any token containing ``"\\n"``
    (``"\\n"``, ``"\\n\\n"``, ``".\\n"``)."""
    ids = list(range(len(tokenizer)))
    texts = tokenizer.batch_decode([[i] for i in ids])
    return frozenset(i for i, text in zip(ids, texts, strict=True) if is_delimiter(text))


def position_class(batch: Batch, delimiters: frozenset[int]) -> torch.Tensor:
    """``classes = position_class(batch, delims)``: (B, T) int8 on ``batch.input_ids``' device, per position
    0 = the text's first real token (the start token, BOS or not), 1 = the text's first delimiter (the first
    real position after the first whose id is in ``delimiters``; a text may have none), 2 = any other real
    token, -1 = padding. Names in :data:`CLASSES`."""
    ids, real = batch.input_ids, batch.attention_mask.bool()
    columns = torch.arange(ids.shape[1], device=ids.device)
    first = batch.first.to(ids.device)[:, None]
    lookup = torch.tensor(sorted(delimiters), dtype=ids.dtype, device=ids.device)
    candidate = real & (columns > first) & torch.isin(ids, lookup)
    at = candidate.int().argmax(dim=1, keepdim=True)  # (B, 1) the first True; 0 (the start) where there is none
    first_delimiter = torch.zeros_like(candidate).scatter_(1, at, candidate.any(dim=1, keepdim=True))
    classes = torch.full(ids.shape, 2, dtype=torch.int8, device=ids.device)
    classes.masked_fill_(first_delimiter, 1)  # masked_fill, not mask indexing: no host sync off the CPU
    classes.masked_fill_(columns == first, 0)
    return classes.masked_fill_(~real, -1)


def _empty_text(text) -> ExtractionError:
    return ExtractionError(f"text {int(text)} has no tokens; drop empty texts before profiling activations")


RATIO, CLASS_RATIO, HAS_CLASS, TOP_CLASS, TOP_DIM, TOKENS = 0, slice(1, 4), slice(4, 7), 7, 8, 9
"""Columns of :func:`text_table`'s (B, 10) table."""


def text_table(hidden: torch.Tensor, real: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """``table = text_table(hidden, real, classes)``: (B, 10) float64 on ``hidden``'s device, one row per text:
    top / median, each class's largest |activation| / median (3; meaningless where the text lacks the class),
    whether the text has each class (3; 0 or 1), the class code and the dimension of the top, the text's real
    tokens (columns named by :data:`RATIO` ... :data:`TOKENS`). ``hidden`` (B, T, d) with T, d > 0, ``real``
    (B, T) bool, ``classes`` (B, T) codes.

    Padding is never read: a padded position's peak is -1 (below every |activation|) and its values are NaN
    for the median. The top is the first maximum in (position, dimension) order: the first position whose peak
    is the largest, then the first dimension there holding it (``argmax`` returns the first maximum)."""
    return table_and_flags(hidden, real, classes, ratio=None)[0]


def table_and_flags(hidden: torch.Tensor, real: torch.Tensor, classes: torch.Tensor,
                    ratio: float | None = MASSIVE_RATIO) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``table, flags = table_and_flags(hidden, real, classes)``: :func:`text_table`'s (B, 10) table and
    :func:`~layerscope.engine.forward.massive.massive_mask`'s (B, T) bool flags (None when ``ratio`` is None),
    both from one median per text.

    The two middle values of each text's |activations| are found once (:func:`_middle_values`); the table takes
    their mean in float64, the flags in float32 as ``np.median`` does on float32 values, by massive_mask's rule
    ``real & (peak > ratio * median) & ~unusable`` (a text with a NaN among its real values flags nothing).
    States wider than float32 (float64) get their flags from ``massive_mask`` itself, which compares float32
    values: a second median there."""
    mag = hidden.to(torch.promote_types(hidden.dtype, torch.float32)).abs()  # (B, T, d), a new tensor
    peak = mag.amax(dim=-1)  # (B, T); NaN where a token holds NaN
    unusable = (peak.isnan() & real).any(dim=1)  # (B,) np.median of values holding NaN is NaN: no flag
    peak = peak.masked_fill_(~real, -1.0)
    tokens = real.sum(dim=1)  # (B,)
    n = tokens * hidden.shape[-1]
    padding = torch.zeros_like(peak).masked_fill_(~real, torch.nan)[..., None]  # (B, T, 1): 0, NaN at padding
    lower, upper = _middle_values(mag.add_(padding).flatten(1), n)  # |h| + 0 is |h|
    table = _table(mag, peak, real, classes, tokens, (lower.double() + upper.double()) / 2)
    if ratio is None:
        return table, None
    if mag.dtype != torch.float32:
        return table, massive_mask(hidden, real, ratio)
    median = torch.where(n % 2 == 1, lower, (lower + upper) / 2)  # (B,) float32, as np.median
    return table, real & (peak > ratio * median[:, None]) & ~unusable[:, None]


def _table(mag: torch.Tensor, peak: torch.Tensor, real: torch.Tensor, classes: torch.Tensor, tokens: torch.Tensor,
           median: torch.Tensor) -> torch.Tensor:
    """(B, 10) :func:`text_table` from |activations| ``mag`` (B, T, d), token peaks ``peak`` (B, T) (-1 at
    padding), ``real`` and ``classes`` (B, T), real ``tokens`` (B,) and each text's ``median`` (B,) float64."""
    position = peak.argmax(dim=1)  # (B,) a real position: real peaks are >= 0
    rows = torch.arange(len(peak), device=peak.device)
    top = peak[rows, position]  # (B,)
    dim = mag[rows, position].argmax(dim=1)  # (B,) in that position's (B, d) values
    member = (classes[..., None] == torch.arange(len(CLASSES), device=classes.device)) & real[..., None]
    class_peak = peak[..., None].masked_fill(~member, -1.0).amax(dim=1)  # (B, 3)
    return torch.cat([
        (top.double() / median)[:, None],
        class_peak.double() / median[:, None],
        member.any(dim=1).double(),
        classes.gather(1, position[:, None]).double(),
        dim[:, None].double(),
        tokens[:, None].double(),
    ], dim=1)


def _middle_values(values: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``lower, upper = _middle_values(values, n)``: (B,) each, per row of ``values`` (B, N) (float32 or float64,
    >= 0 or NaN) the lower and upper middle values of its ``n`` (B,) non-NaN values (equal for an odd count): the
    textbook median is their mean, as ``np.median``.

    ``nanmedian`` gives the lower middle value; the upper one is the lower one when more than half the values
    are at most it, else the smallest value above it."""
    lower = values.nanmedian(dim=1).values  # (B,)
    at_most = n - (values > lower[:, None]).sum(dim=1)  # NaN > x is False
    upper = torch.where(at_most >= n // 2 + 1, lower, _smallest_above(values, lower))
    return lower, upper


def _smallest_above(values: torch.Tensor, lower: torch.Tensor) -> torch.Tensor:
    """``_smallest_above(values, lower)``: (B,) per row of ``values`` (B, N) (NaN where no value) its smallest
    value above ``lower`` (B,); inf where there is none."""
    return torch.where(values > lower[:, None], values, torch.inf).amin(dim=1)  # NaN > x is False


@dataclass
class _LayerStats:
    ratios: list[float] = field(default_factory=list)
    """Per text: top |activation| / median |activation|."""
    texts: list[int] = field(default_factory=list)
    """The caller's index of each text of ``ratios``."""
    top_class: np.ndarray = field(default_factory=lambda: np.zeros(len(CLASSES), dtype=np.int64))
    """(3,) texts whose top sits on each position class."""
    top_dims: Counter = field(default_factory=Counter)
    """Dimension of each text's top -> number of texts."""
    class_sum: np.ndarray = field(default_factory=lambda: np.zeros(len(CLASSES)))
    """(3,) sum over texts having the class of its largest |activation| / the text's median."""
    class_texts: np.ndarray = field(default_factory=lambda: np.zeros(len(CLASSES), dtype=np.int64))
    """(3,) texts having the class."""


@dataclass(frozen=True)
class MassiveSummary:
    """``summary.massive_ratio[i]`` is layer ``summary.layers[i]``'s median over texts of top / median; every
    array has one row per layer seen, in ``layers`` order; columns of (n_layers, 3) arrays follow
    :data:`CLASSES`. ``summary.per_layer()`` gives the same as one dict per layer."""

    layers: np.ndarray
    """(n_layers,) the layers seen, ascending."""
    n_texts: np.ndarray
    """(n_layers,) texts seen at each layer."""
    massive_ratio: np.ndarray
    """(n_layers,) median over texts of the text's top |activation| / its median |activation|."""
    massive_ratio_max: np.ndarray
    """(n_layers,) the largest of those ratios."""
    top_share: np.ndarray
    """(n_layers, 3) share of texts whose top |activation| sits on each position class (rows sum to 1)."""
    fixed_dim: np.ndarray
    """(n_layers,) the most common dimension of the texts' tops (the smallest such dimension on a tie)."""
    fixed_dim_share: np.ndarray
    """(n_layers,) share of texts whose top sits in ``fixed_dim``."""
    class_map: np.ndarray
    """(n_layers, 3) mean over texts having each class of that class's largest |activation| / the text's
    median; NaN where no text had the class (a text without a delimiter has no first delimiter)."""
    texts: np.ndarray | None = None
    """(n,) the texts seen at the first layer, ascending by the caller's index."""
    text_ratio: np.ndarray | None = None
    """(n_layers, n) each of those texts' top / median ratio per layer (NaN where a layer did not see it)."""

    def per_layer(self) -> dict[int, dict]:
        """``summary.per_layer()[5]["top_share"]["start"]``: the summary as plain Python values per layer."""
        out = {}
        for i, layer in enumerate(self.layers.tolist()):
            out[layer] = {
                "n_texts": int(self.n_texts[i]),
                "massive_ratio": float(self.massive_ratio[i]),
                "massive_ratio_max": float(self.massive_ratio_max[i]),
                "top_share": dict(zip(CLASSES, self.top_share[i].tolist(), strict=True)),
                "fixed_dim": int(self.fixed_dim[i]),
                "fixed_dim_share": float(self.fixed_dim_share[i]),
                "class_map": dict(zip(CLASSES, self.class_map[i].tolist(), strict=True)),
            }
        return out


class MassiveProfile:
    """Accumulates the massive-activation profile one layer of one batch at a time (ratios in float64)::

        profile = MassiveProfile()
        profile.update(layer, hidden, batch, classes)   # hidden (B, T, d); classes from position_class (B, T)
        summary = profile.result()                      # MassiveSummary

    Texts count where ``batch.attention_mask`` is 1; padding is never read. A text's top is its largest
    |activation|; on a tie, the first in (position, dimension) order."""

    def __init__(self) -> None:
        self._layers: dict[int, _LayerStats] = {}

    def update(self, layer: int, hidden: torch.Tensor, batch: Batch, classes: torch.Tensor) -> None:
        """Add the texts of ``batch`` at ``layer``: ``hidden`` (B, T, d) that layer's states, ``classes`` (B, T)
        from :func:`position_class` for the same batch."""
        real = batch.attention_mask.to(hidden.device).bool()
        classes = classes.to(hidden.device)
        if hidden.dim() != 3 or hidden.shape[:2] != real.shape or classes.shape != real.shape:
            raise ValueError(
                f"hidden {tuple(hidden.shape)}, classes {tuple(classes.shape)} and the batch's "
                f"attention mask {tuple(real.shape)} disagree; pass hidden (B, T, d) and classes (B, T) "
                "of this batch"
            )
        if hidden.shape[0] == 0:
            self._layers.setdefault(int(layer), _LayerStats())
            return
        if hidden.shape[1] == 0:
            raise _empty_text(batch.index[0])
        self.add_table(layer, text_table(hidden, real, classes).cpu().numpy(), batch.index)  # the one copy

    def add_table(self, layer: int, table: np.ndarray, texts: np.ndarray) -> None:
        """Add the texts ``texts`` (B,) (the caller's indices) of :func:`text_table`'s ``table`` (B, 10), read to the
        host, at ``layer``, in row order: what :meth:`update` does once the table is on the host (the atlas reads
        every layer's table of a batch in one copy)."""
        stats = self._layers.setdefault(int(layer), _LayerStats())
        empty = np.flatnonzero(table[:, TOKENS] == 0)
        if len(empty):
            raise _empty_text(texts[empty[0]])
        has = table[:, HAS_CLASS] == 1
        stats.ratios.extend(table[:, RATIO].tolist())
        stats.texts.extend(np.asarray(texts).tolist())
        np.add.at(stats.top_class, table[:, TOP_CLASS].astype(np.int64), 1)
        stats.top_dims.update(table[:, TOP_DIM].astype(np.int64).tolist())
        contributions = np.where(has, table[:, CLASS_RATIO], 0.0)
        # cumsum adds the texts one after the other, as a loop would: the same float64 sums for any batching
        stats.class_sum = np.cumsum(np.vstack([stats.class_sum, contributions]), axis=0)[-1]
        stats.class_texts += has.sum(axis=0)

    def result(self) -> MassiveSummary:
        """``summary = profile.result()``: a :class:`MassiveSummary` of every layer updated so far."""
        layers = sorted(self._layers)
        stats = [self._layers[layer] for layer in layers]
        n_texts = np.array([len(s.ratios) for s in stats], dtype=np.int64)
        fixed = [min(s.top_dims, key=lambda d, s=s: (-s.top_dims[d], d)) for s in stats]
        with np.errstate(invalid="ignore", divide="ignore"):
            class_map = np.array([s.class_sum / s.class_texts for s in stats]).reshape(len(layers), len(CLASSES))
        return MassiveSummary(
            layers=np.array(layers, dtype=np.int64),
            n_texts=n_texts,
            massive_ratio=np.array([np.median(s.ratios) for s in stats]),
            massive_ratio_max=np.array([max(s.ratios) for s in stats]),
            top_share=np.array([s.top_class / len(s.ratios) for s in stats]).reshape(len(layers), len(CLASSES)),
            fixed_dim=np.array(fixed, dtype=np.int64),
            fixed_dim_share=np.array([s.top_dims[d] / len(s.ratios) for s, d in zip(stats, fixed, strict=True)]),
            class_map=class_map,
            **_by_text(stats),
        )


def _by_text(stats: list[_LayerStats]) -> dict[str, np.ndarray]:
    """``texts`` and ``text_ratio`` of a :class:`MassiveSummary`: each text's ratio per layer, by text index."""
    texts = np.array(sorted(set(stats[0].texts)) if stats else [], dtype=np.int64)
    ratio = np.full((len(stats), len(texts)), np.nan)
    for i, s in enumerate(stats):
        ratio[i, np.searchsorted(texts, s.texts)] = s.ratios
    return {"texts": texts, "text_ratio": ratio}
