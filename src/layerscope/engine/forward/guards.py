"""The checks every forward pass goes through: text lengths before it, finite numbers after it.

    ids = encode(lm, texts, max_length, min_tokens=2)     # ExtractionError: too long for the model, or 1 token
    check_finite(lm, texts, batch.index, bad_layers=(~torch.isfinite(pooled)).any(-1), bad_nll=~isfinite(nll))

``encode`` raises before any model runs; ``check_finite`` costs one device sync per batch and
works out which layer and text only when something is not finite.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.load import LoadedModel
from .batching import tokenize

WORDS = 6
"""Words of a text an error message quotes."""


def text_label(texts: Sequence[str] | None, i: int) -> str:
    """``text 3 ("The committee will review every application ...")``."""
    if texts is None:
        return f"text {i}"
    words = str(texts[i]).split()
    quoted = " ".join(words[:WORDS])[:60] + (" ..." if len(words) > WORDS else "")
    return f'text {i} ("{quoted}")'


def encode(lm: LoadedModel, texts: Sequence[str], max_length: int | None = None, *,
           min_tokens: int = 1) -> list[list[int]]:
    """Token ids per text (truncated to ``max_length`` when given); ``ExtractionError`` naming the first
    text longer than the model's maximum positions, or shorter than ``min_tokens`` (2 where an NLL is scored)."""
    ids = tokenize(lm.tokenizer, texts, max_length)
    lengths = np.array([len(x) for x in ids])
    limit = lm.info.max_positions
    if limit is not None and (lengths > limit).any():
        too_long = np.flatnonzero(lengths > limit)
        i = int(too_long[0])
        others = f" ({len(too_long)} texts are too long)" if len(too_long) > 1 else ""
        fix = (f"--max-length {max_length} is above that limit: lower it to {limit}" if max_length else
               f"shorten it, or pass --max-length {limit} (max_length={limit} in Python) to truncate every text")
        raise ExtractionError(f"{text_label(texts, i)} has {lengths[i]} tokens, more than the {limit} positions "
                              f"of model {lm.info.name}{others}; {fix}")
    if (lengths < min_tokens).any():
        i = int(np.flatnonzero(lengths < min_tokens)[0])
        raise ExtractionError(f"{text_label(texts, i)} has only {lengths[i]} token for model {lm.info.name}, "
                              "so there is no next token to score (NLL); make it longer or remove it")
    return ids


def check_finite(lm: LoadedModel, texts: Sequence[str] | None, index: np.ndarray, *,
                 bad_layers: torch.Tensor | None = None, bad_nll: torch.Tensor | None = None,
                 first_bad_layer=None) -> None:
    """Raise if any row of a batch holds NaN or inf.

    ``bad_layers``: (B, n_layers + 1) bool, True where row b's hidden state at that layer is not finite;
    ``bad_nll``: (B,) bool. ``index`` maps rows to positions in ``texts``. ``first_bad_layer(row)``, when
    given, finds the layer of a row whose NLL alone was checked (e.g. by running it again).
    """
    flags = [t.any() for t in (bad_layers, bad_nll) if t is not None]
    if not flags or not bool(torch.stack(flags).any()):  # the one sync per batch
        return
    bad_rows = torch.zeros(len(index), dtype=torch.bool)
    for t in (bad_layers, bad_nll):
        if t is not None:
            bad_rows |= (t.any(dim=1) if t.dim() == 2 else t).cpu()
    row = min(bad_rows.nonzero()[:, 0].tolist(), key=lambda r: int(index[r]))  # the first text, in the caller's order
    layer = None
    if bad_layers is not None and bool(bad_layers[row].any()):
        layer = int(bad_layers[row].nonzero()[0, 0])
    elif first_bad_layer is not None:
        layer = first_bad_layer(row)
    raise nonfinite_error(lm, text_label(texts, int(index[row])), layer)


def nonfinite_error(lm: LoadedModel, label: str, layer: int | None) -> ExtractionError:
    info = lm.info
    where = (f"a NaN or inf hidden state at layer {layer} of 0..{info.n_layers} (0 = embeddings)" if layer is not None
             else "a NaN or inf NLL (every hidden state finite: the output logits overflow)")
    fix = ("the checkpoint holds NaN or inf weights, or its numbers overflow: check the weights" if info.dtype ==
           "float32" else f"its {info.dtype} numbers overflow or the weights hold NaN or inf: use --dtype float32")
    return ExtractionError(f"model {info.name} computed {where} for {label}; no result can be computed from it: {fix}")


def first_nonfinite_layer(hidden_states: Sequence[torch.Tensor], real: torch.Tensor) -> int | None:
    """The first hidden state (0 = embeddings) with NaN or inf at a real token (``real``: (B, T) bool)."""
    for layer, hidden in enumerate(hidden_states):
        if not bool(torch.isfinite(hidden.to(real.device)[real]).all()):
            return layer
    return None
