"""One prompt through the logit lens: every layer's top-k next-token guesses at every position of a prompt.

    table = lens(lm, "The capital of France is", top_k=5)    # a LensTable: one row per layer, position, rank
    table[(table.layer == lm.info.n_layers) & (table["rank"] == 1)]   # the model's own next-token argmax
    table.top1()                  # (n_layers + 1, T) DataFrame of top-1 tokens: rows layer 0..n_layers
    print(table.grid())           # the same as aligned text (whitespace escaped, long tokens cut)
    table                         # in a notebook: the layer x position grid as HTML
    lens(lm, ["A prompt", "Another"])   # a list: indexed by ``text`` (the prompt), one grid each
    table.top1(1)                 # a list's prompt by its position (``prompt_index``); a prompt may repeat

Columns: ``layer, position, input_token, rank, token, token_id, prob``; for a list of prompts also
``prompt_index`` first (the prompt's position in the list, from 0), which tells a repeated prompt's rows apart.
Layer 0 is the embeddings, layers 1..n_layers-1 the decoder blocks' outputs (transformers' ``hidden_states[l]``),
each read through the model's own final norm, head and logit transform (:func:`.lens.layer_logits`, the atlas's
lens); layer ``n_layers`` is the model's own output (its ``logits``). Position ``t`` is the guess for the token
after ``input_token`` ``t``; ``prob`` is the softmax probability (float32), ``rank`` 1 the most likely.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from ...errors import ExtractionError, short, spelled
from ...models.info import input_device
from ...models.load import LoadedModel
from ...progress import steps
from ..forward.guards import encode, nonfinite_error, text_label
from .logit import final_norm, layer_logits

if TYPE_CHECKING:
    from .tuned import TunedLens

COLUMNS = ["layer", "position", "input_token", "rank", "token", "token_id", "prob"]
PROMPT_INDEX = "prompt_index"
"""The column a table of several prompts keys its rows by: each prompt's position in the list, from 0."""
WIDTH = 12
"""The most characters a token takes in :meth:`LensTable.grid` (longer ones end in ``…``)."""
_ESCAPES = {" ": "·", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def show_token(token: str, width: int | None = WIDTH) -> str:
    """``show_token(" Paris\\n")`` -> ``"·Paris\\\\n"``: a token as one printable line: a space as ``·``, newline,
    tab and return as ``\\n``, ``\\t``, ``\\r``, any other unprintable character as its ``\\x``/``\\u`` escape;
    cut to ``width`` characters (the last one ``…``) when given. The empty token is ``''``."""
    shown = "".join(_ESCAPES.get(ch, ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii"))
                    for ch in token) or "''"
    if width is not None and len(shown) > width:
        shown = shown[: width - 1] + "…"
    return shown


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: 2 for a wide (East Asian) character, 0 for a combining one, else 1."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


class LensTable(pd.DataFrame):
    """The lens of one or more prompts, one row per (layer, position, rank): the columns of :data:`COLUMNS`, and
    for a list of prompts an index named ``text`` (the prompt) and a first column ``prompt_index`` (its position
    in the list, from 0: the key of its rows, so a prompt given twice is two prompts). A pandas DataFrame:
    filter, pivot, ``to_csv``.

    The methods that show one prompt of several (``top1``, ``input_tokens``, ``grid``) take its ``prompt_index``
    (an int) or its text (a str, when it is in the table once)."""

    @property
    def _constructor(self):
        return LensTable

    def _keys(self) -> np.ndarray:
        """Per row, its prompt's position (a table of several prompts)."""
        if PROMPT_INDEX in self.columns:
            return self[PROMPT_INDEX].to_numpy()
        # a table without the column (made by hand): its distinct texts, in order of first appearance
        return pd.factorize(np.asarray(self.index, dtype=object))[0]

    def _prompts(self) -> list[tuple[int, str]]:
        """(prompt_index, text) of each prompt of a table of several, by prompt_index."""
        keys = self._keys()
        first = ~pd.Index(keys).duplicated()
        return sorted(zip(keys[first].tolist(), self.index[first].tolist(), strict=True))

    def texts(self) -> list[str | None]:
        """The prompts in order of ``prompt_index`` (a repeated prompt as often as it was given); ``[None]`` for a
        table of one prompt (no ``text`` index)."""
        return [text for _, text in self._prompts()] if self.index.name == "text" else [None]

    def prompt_indices(self) -> list[int | None]:
        """The ``prompt_index`` of each prompt, aligned with :meth:`texts`; ``[None]`` for a table of one prompt."""
        return [key for key, _ in self._prompts()] if self.index.name == "text" else [None]

    def _rows(self, text: str | int | None) -> pd.DataFrame:
        """The rank-1 rows of one prompt, as a plain DataFrame: ``text`` its prompt_index or its text (when that is
        in the table once); None for the only prompt of a table of one."""
        frame = pd.DataFrame(self)
        if self.index.name != "text":
            if text is not None:
                raise ExtractionError(f"this table holds one prompt; name none, e.g. top1() (got {short(text)})")
            return frame[frame["rank"] == 1]
        keys = [k for k, _ in self._prompts()]
        fix = f"name one by its prompt_index, e.g. top1({keys[0] if keys else 0})"
        held = f"this table holds {len(keys)} prompt(s), prompt_index {_span(keys)}"
        if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
            if int(text) not in keys:
                raise ExtractionError(f"no prompt has prompt_index {text}; {held}; {fix}")
            chosen = int(text)
        elif text is None:
            raise ExtractionError(f"{held}; {fix}")
        else:
            where = [k for k, t in self._prompts() if t == text]
            if not where:
                raise ExtractionError(f"the prompt {short(text)} is not in this table; {held}; {fix}")
            if len(where) > 1:
                raise ExtractionError(f"the prompt {short(text)} is in this table {len(where)} times, at prompt_index "
                                      f"{', '.join(map(str, where))}; name one by its prompt_index, e.g. "
                                      f"top1({where[0]})")
            chosen = where[0]
        frame = frame[self._keys() == chosen]
        return frame[frame["rank"] == 1]

    def top1(self, text: str | int | None = None, column: str = "token") -> pd.DataFrame:
        """(n_layers + 1, T): ``column`` (``token``, ``prob`` or ``token_id``) of the top-1 guess, rows = layers
        ascending, columns = positions; ``text``: the prompt's prompt_index or text (none for a table of one)."""
        return self._rows(text).pivot(index="layer", columns="position", values=column).sort_index()

    def input_tokens(self, text: str | int | None = None) -> list[str]:
        """The prompt's T tokens, in order."""
        rows = self._rows(text)
        return rows[rows["layer"] == rows["layer"].min()].sort_values("position")["input_token"].tolist()

    def grid(self, text: str | int | None = None, width: int = WIDTH) -> str:
        """The layer x position grid of top-1 tokens as aligned text: a header row of input tokens, then one row
        per layer 0..n_layers, every token through :func:`show_token` (cut to ``width``)."""
        tokens = self.top1(text)
        head = ["layer", *(show_token(t, width) for t in self.input_tokens(text))]
        rows = [[str(layer), *(show_token(t, width) for t in tokens.loc[layer])] for layer in tokens.index]
        widths = [max(display_width(row[j]) for row in [head, *rows]) for j in range(len(head))]
        lines = ["  ".join(_pad(cell, w) for cell, w in zip(row, widths, strict=True)).rstrip()
                 for row in [head, *rows]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if not set(COLUMNS) <= set(self.columns) or not (self["rank"] == 1).any():
            return super()._repr_html_()
        parts = []
        for key, text in zip(self.prompt_indices(), self.texts(), strict=True):
            try:
                tokens, probs = self.top1(key), self.top1(key, "prob")
            except ValueError:  # not one prompt's full lens (e.g. a hand-made subset): the plain table
                return super()._repr_html_()
            caption = None if key is None else f"{key}: {text}"
            parts.append(_html_grid(caption, self.input_tokens(key), tokens, probs))
        return "".join(parts)


def _span(keys: list[int]) -> str:
    """``0..3``, or ``0, 2, 5`` when the indices are not a run (a filtered table)."""
    if keys and keys == list(range(keys[0], keys[0] + len(keys))) and len(keys) > 2:
        return f"{keys[0]}..{keys[-1]}"
    return ", ".join(map(str, keys)) or "none"


def _html_grid(text: str | None, inputs: list[str], tokens: pd.DataFrame, probs: pd.DataFrame) -> str:
    """One prompt's grid as an HTML table, each cell shaded by its top-1 probability (every string escaped)."""
    esc = html.escape
    caption = f"<caption>{esc(text)}</caption>" if text is not None else ""
    head = "".join(f"<th>{esc(show_token(t, None))}</th>" for t in inputs)
    rows = []
    for layer in tokens.index:
        cells = []
        for position in tokens.columns:
            token, prob = tokens.at[layer, position], float(probs.at[layer, position])
            cells.append(f'<td style="background: rgba(31, 119, 180, {prob:.2f})" title="p = {prob:.3f}">'
                         f"{esc(show_token(token))}</td>")
        rows.append(f"<tr><th>{int(layer)}</th>{''.join(cells)}</tr>")
    return (f'<div style="overflow-x: auto"><table style="font-family: monospace; white-space: pre">{caption}'
            f"<thead><tr><th>layer</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


@torch.inference_mode()
def lens_top(lm: LoadedModel, ids: Sequence[int], top_k: int, label: str = "the prompt",
             tuned: TunedLens | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``probs, token_ids = lens_top(lm, ids, 5)``: (n_layers + 1, T, top_k) float32 and int64, the top-k of each
    layer's lens at each position of one text's token ids, most likely first; through the tuned lens ``tuned``
    when given (layer n_layers is the model's output either way). A NaN or inf probability raises
    :func:`~.guards.nonfinite_error` naming the layer and ``label`` (the text)."""
    n_layers = lm.info.n_layers
    x = torch.tensor([list(ids)], device=input_device(lm.model))
    out = lm.model(input_ids=x, output_hidden_states=True, use_cache=False)
    head, norm = lm.model.get_output_embeddings(), final_norm(lm)
    rows, finite = [], []
    for layer in range(n_layers + 1):
        h = out.hidden_states[layer][0]
        logits = (out.logits[0] if layer == n_layers else
                  layer_logits(lm, layer, h, head=head, norm=norm) if tuned is None else
                  tuned.logits(layer, h, lm=lm, head=head, norm=norm))
        p = torch.softmax(logits.float(), dim=-1)  # (T, vocab)
        finite.append(torch.isfinite(p).all())
        top = p.topk(top_k, dim=-1)
        rows.append(torch.cat([top.values.double(), top.indices.double()], dim=-1))  # (T, 2 top_k), exact
    # one copy to the host per call (float64 holds float32 probabilities and token ids below 2^53 exactly)
    host = torch.cat([torch.stack(finite).double(), torch.stack(rows).flatten()]).cpu().numpy()
    ok = host[: n_layers + 1] == 1
    if not ok.all():
        raise nonfinite_error(lm, label, int(np.argmin(ok)))
    grid = host[n_layers + 1:].reshape(n_layers + 1, len(ids), 2 * top_k)
    return grid[..., :top_k].astype(np.float32), grid[..., top_k:].astype(np.int64)


def check_top_k(top_k: int, vocab: int | None = None, model: str | None = None) -> None:
    """:class:`ExtractionError` unless ``top_k`` is an integer from 1 to ``vocab`` (when known)."""
    top = spelled(f"--top-k {top_k}", f"top_k={top_k!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ExtractionError(f"{top} is not a whole number of at least 1: the lens lists that many guesses per "
                              "layer and position; e.g. 5")
    if vocab is not None and top_k > vocab:
        raise ExtractionError(f"{top} is more than the {vocab} tokens of model {model}'s vocabulary; choose a "
                              f"number from 1 to {vocab}, e.g. 5")


def lens(lm: LoadedModel, text: str | Sequence[str], top_k: int = 5, *, lens: TunedLens | None = None,
         progress: bool | None = None) -> LensTable:
    """``table = lens(lm, "The capital of France is", top_k=5)``: the :class:`LensTable` of one prompt (or of
    a list of them, indexed by ``text``, even a list of one; progress is shown for several unless
    ``progress=False``); ``lens=TunedLens.load(folder, lm)``: read through that tuned lens instead of the logit
    lens. A list's rows carry ``prompt_index``, the prompt's position in it: a prompt given twice
    is read twice, each under its own index.

    :class:`ExtractionError` for an empty prompt, ``top_k`` outside 1..vocab, or a prompt longer than the model's
    positions."""
    texts = [text] if isinstance(text, str) else list(text)
    if not texts:
        raise ExtractionError("the lens needs a prompt; pass a non-empty text or list of texts")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ExtractionError(f"prompt {i} is a {type(t).__name__}, not a string; pass text (str) prompts")
        if not t.strip():
            raise ExtractionError(f"prompt {i} is empty ({t!r}); give text for the model to read")
    head = lm.model.get_output_embeddings()
    check_top_k(top_k, int(head.weight.shape[0]) if getattr(head, "weight", None) is not None
                else lm.info.vocab_size, lm.info.name)
    ids = encode(lm, texts)
    several = not isinstance(text, str)
    order = steps(range(len(texts)), f"lens {lm.info.name}", "prompt") if len(texts) > 1 and progress is not False \
        else range(len(texts))
    frames = []
    for i in order:
        probs, tops = lens_top(lm, ids[i], int(top_k), text_label(texts, i), tuned=lens)
        frame = _frame(lm, ids[i], probs, tops)
        if several:
            frame.insert(0, PROMPT_INDEX, np.full(len(frame), i, dtype=np.int64))
            frame.index = pd.Index([texts[i]] * len(frame), name="text")
        frames.append(frame)
    return LensTable(pd.concat(frames) if several else frames[0])


def _frame(lm: LoadedModel, ids: Sequence[int], probs: np.ndarray, tops: np.ndarray) -> pd.DataFrame:
    """The rows of one prompt from :func:`lens_top`'s (L + 1, T, k) arrays, ordered by layer, position, rank."""
    layers, positions, ranks = np.indices(probs.shape)
    unique = np.unique(np.concatenate([tops.ravel(), np.asarray(ids)]))
    decoded = lm.tokenizer.batch_decode([[i] for i in unique.tolist()], clean_up_tokenization_spaces=False)
    names = dict(zip(unique.tolist(), decoded, strict=True))
    inputs = [names[i] for i in ids]
    return pd.DataFrame({
        "layer": layers.ravel(), "position": positions.ravel(),
        "input_token": [inputs[p] for p in positions.ravel()], "rank": ranks.ravel() + 1,
        "token": [names[i] for i in tops.ravel().tolist()], "token_id": tops.ravel().astype(np.int64),
        "prob": probs.ravel().astype(np.float32)})
