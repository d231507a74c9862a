"""The logit-lens figure of one prompt: a heat map of each layer's top-1 probability at each position, the top-1
token written in its cell.

    fig = lens_figure(probs, tokens, inputs, title="smollm2-135m: The capital of France is")
    fig.savefig("lens.png", dpi=150)          # a matplotlib.figure.Figure (no pyplot)
    fig = lens_comparison_figure(lens.record["heldout"])   # a tuned lens's held-out KL and CE vs the logit lens's

``probs``: (n_layers + 1, T) top-1 probabilities, row ``l`` = layer ``l`` (drawn bottom to top); ``tokens``:
(n_layers + 1, T) the top-1 tokens and ``inputs`` the T input tokens, as printable one-line labels (e.g. through
:func:`layerscope.engine.lenses.prompt.show_token`); every label is drawn as plain text, never as mathtext. Sized
for about 10 positions x 31 layers; larger grids grow the figure.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from .plotting import COLORS, band, figure

CMAP = "viridis"
COLORBAR_LABEL = "top-1 probability"


def lens_figure(probs: np.ndarray, tokens: Sequence[Sequence[str]], inputs: Sequence[str],
                title: str | None = None) -> Figure:
    """The heat map: layer on y (0 = embeddings at the bottom), position on x labelled by ``inputs``, colour =
    top-1 probability (0..1, colour bar labelled :data:`COLORBAR_LABEL`), the top-1 token in each cell (white on
    dark cells, black on light ones). ``ValueError`` when the shapes disagree."""
    probs = np.asarray(probs, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=object)
    if probs.ndim != 2 or tokens.shape != probs.shape or len(inputs) != probs.shape[1]:
        raise ValueError(f"probs {probs.shape} and tokens {tokens.shape} must be (layers, T), with {len(inputs)} "
                         f"inputs = T")
    n_rows, n_cols = probs.shape
    fig = Figure(figsize=(max(6.0, 2.5 + 1.05 * n_cols), max(4.0, 1.6 + 0.27 * n_rows)), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(probs, origin="lower", aspect="auto", cmap=CMAP, vmin=0.0, vmax=1.0,
                      interpolation="nearest")
    fontsize = 7 if n_rows <= 40 else 5
    for (row, col), token in np.ndenumerate(tokens):
        ax.text(col, row, str(token), ha="center", va="center", fontsize=fontsize, parse_math=False,
                color="white" if probs[row, col] < 0.6 else "black")
    ax.set_xticks(np.arange(n_cols), [str(t) for t in inputs], rotation=45, ha="right", fontsize=8)
    step = 1 if n_rows <= 40 else int(np.ceil(n_rows / 40))
    ax.set_yticks(np.arange(0, n_rows, step))
    ax.tick_params(axis="y", labelsize=7)
    for label in ax.get_xticklabels():
        label.set_parse_math(False)
    ax.set_xlabel("input token (position)")
    ax.set_ylabel("layer (0 = embeddings, top = model output)")
    if title:
        text = ax.set_title(title, fontsize=10)
        text.set_parse_math(False)
    fig.colorbar(image, ax=ax, label=COLORBAR_LABEL, fraction=0.04, pad=0.02)
    return fig


def save_quietly(fig: Figure, path, **kwargs) -> None:
    """``fig.savefig(path, **kwargs)`` without matplotlib's warnings about glyphs its font lacks (a token in a
    script the font does not cover is drawn as a box, not an error)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig.savefig(path, **kwargs)


def lens_comparison_figure(evaluation: dict, title: str | None = None) -> Figure:
    """``fig = lens_comparison_figure(lens.record["heldout"])``: held-out KL to the final distribution (left) and
    cross-entropy (right), bits per token, per hidden state, logit lens vs tuned lens, each with its bootstrap
    band; ``evaluation`` is :meth:`~layerscope.engine.lenses.tuned_eval.LensEvaluation.to_dict`'s plain dict."""
    states = np.asarray(evaluation["states"])
    fig, axes = figure(1, 2, (11, 4.2))
    for ax, metric, label in ((axes[0, 0], "kl", "KL(final || lens), bits/token"),
                              (axes[0, 1], "ce", "cross-entropy, bits/token")):
        for lens, color in (("logit", COLORS[0]), ("tuned", COLORS[1])):
            key = f"{lens}_{metric}"
            values = np.asarray(evaluation["metrics"][key], dtype=np.float64)
            ax.plot(states, values, marker="o", ms=3, color=color, label=f"{lens} lens")
            interval = np.asarray(evaluation["intervals"][key], dtype=np.float64)
            band(ax, states, interval[:, 0], interval[:, 1], color)
        ax.set(xlabel="hidden state (0 = embeddings; L = the model's output)", ylabel=label)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
