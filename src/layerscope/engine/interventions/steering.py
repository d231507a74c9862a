"""Activation addition: each text's NLL with ``alpha * v`` added to every position of one hidden state.

    nll = steer(lm, texts, state=4, vector=v, alpha=2.0)   # (n,) mean NLL per scored token; one-off, a whole pass

    steering = Steering(lm, texts)                  # tokenized and batched once (a :class:`~.scoring.Scorer`)
    base = steering.intact()                        # (n,) the intact model's mean NLL per scored token
    for s in range(lm.info.n_layers + 1):           # states in order: each intact stream is made once
        nll = steering.steered(s, vectors, alphas=(-4.0, 4.0))   # (k, 2, n); vectors (k, d)
    steering.blocks_run, steering.kept_bytes        # decoder blocks run so far; host memory kept now

States are numbered as in the atlas (L = ``lm.info.n_layers``): 0 is the embeddings output, the stream entering
block 0 (after whatever the model does to its embeddings: Gemma's scaling, GPT-2's position embeddings, OPT's
projection); s in 1..L-1 the output of block s - 1, the stream entering block s; L the output of the last block,
before the final norm. Steering at s adds ``alpha * v`` (rounded once to the model's dtype, on its device) with a
hook: a forward pre-hook on block 0's hidden input for s = 0, a forward hook on block s - 1's output otherwise.
Every position gets it, padding too: padded positions are masked out of attention and never scored.

Prefix reuse (:mod:`.prefix`): a pass steered at s >= 1 shares every state below s with the intact pass, so it
starts at block s from the intact stream kept there (block s - 1's stand-in hands it over, and the hook adds the
vector to what it hands over): L - s blocks run per batch, none for s = L (only the final norm and the head). The
intact pass keeps the streams of as many states from s upward as ``max_kept_bytes`` allows (at least one), in
host memory; ``steered(s)`` forgets those below s, so a caller that goes through the states in order makes each
once, and one that goes back costs another intact pass. State 0 has no prefix: each of its passes is whole.

The NLL is scored as :func:`~.scoring.score_texts` scores it (each text alone, HF's ``labels`` loss); a NaN or
inf NLL raises ``ExtractionError`` (the layer it names is the intact model's, from a rerun without the vector).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ...models.info import input_device, text_config
from ...models.load import LoadedModel
from ..forward.batching import Batch
from .edits import edited_at
from .scoring import Scorer

DEFAULT_KEPT_BYTES = 4 * 2**30
"""Most host memory the intact streams kept for reuse may take, unless told otherwise (at least one is kept)."""


def steer(lm: LoadedModel, texts: Sequence[str], state: int, vector, alpha: float = 1.0, *,
          batch_size: int | None = None, max_length: int | None = None) -> np.ndarray:
    """Mean NLL per scored token of each text (n,) float64 with ``alpha * vector`` added at every position of
    hidden state ``state``; ``vector`` (d,) numpy or torch. One whole pass per batch (nothing kept: a single
    vector gains nothing from a prefix); for many vectors, alphas or states use :class:`Steering`."""
    if np.ndim(vector) != 1:
        raise ValueError(f"steer adds one (d,) vector, got shape {tuple(np.shape(vector))}; for several use "
                         "Steering(lm, texts).steered(state, vectors, alphas)")
    steering = Steering(lm, texts, batch_size=batch_size, max_length=max_length)
    return steering.steered(state, vector, (alpha,), prefix_reuse=False)[0, 0]


class Steering:
    """The texts batched once; the intact pass once, keeping the streams the steered passes start from."""

    def __init__(self, lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                 max_length: int | None = None, max_kept_bytes: int = DEFAULT_KEPT_BYTES):
        self.lm = lm
        self.scorer = Scorer(lm, texts, batch_size=batch_size, max_length=max_length)
        self.n_layers = len(self.scorer.blocks)
        self.hidden_size = int(text_config(lm.model).hidden_size)
        self.max_kept_bytes = max_kept_bytes
        self.blocks_run = 0
        """Decoder blocks that computed so far, summed over batches and passes (a stand-in does not count)."""
        self._kept: set[int] = set()
        self._intact: np.ndarray | None = None
        self._n_scored: np.ndarray | None = None

    @property
    def batches(self) -> list[Batch]:
        """The batches every pass runs (planned once, right-padded; host tensors)."""
        return self.scorer.batches

    @property
    def state_bytes(self) -> int:
        """Host memory one kept state takes (every batch's padded tokens x d x the dtype's bytes)."""
        return self.scorer.state_bytes

    @property
    def kept_bytes(self) -> int:
        """Host memory the kept states take now."""
        return self.scorer.kept_bytes

    @property
    def kept(self) -> list[int]:
        """The states whose intact stream is kept now."""
        return sorted(self._kept)

    def intact(self) -> np.ndarray:
        """(n,) float64 the intact model's mean NLL per scored token (from the first intact pass; the first one
        keeps the streams from state 1 upward)."""
        if self._intact is None:
            self._keep_from(1)
        return self._intact.copy()

    @property
    def n_scored(self) -> np.ndarray:
        """(n,) int64 scored tokens per text (its tokens minus one)."""
        self.intact()
        return self._n_scored.copy()

    def steered(self, state: int, vectors, alphas: Sequence[float] | float = (1.0,), *,
                prefix_reuse: bool = True) -> np.ndarray:
        """(len(vectors), len(alphas), n) float64 mean NLL per scored token: each vector of ``vectors`` (k, d)
        (numpy or torch; a (d,) vector counts as k = 1) added with each alpha at every position of ``state``;
        every pass starts at the first block after ``state`` from the intact stream kept there (prefix reuse),
        so only the blocks above ``state`` run again. Kept states below ``state`` are dropped. ``prefix_reuse=
        False``: every pass whole (nothing kept), for checking. ``ValueError`` before any pass for a state out of
        0..L, vectors of the wrong size or not finite, or an alpha not finite."""
        state = check_state(state, self.n_layers)
        directions = as_directions(vectors, self.hidden_size)
        alphas = as_alphas(alphas)
        reuse = prefix_reuse and state > 0
        if reuse:
            if state not in self._kept:
                self._keep_from(state)
            self.drop([s for s in self._kept if s < state])
        param = next(self.lm.model.parameters())
        device = input_device(self.lm.model)
        out = np.empty((len(directions), len(alphas), len(self.scorer.texts)))
        for i, direction in enumerate(directions):
            for j, alpha in enumerate(alphas):
                delta = (float(alpha) * direction).to(device=device, dtype=param.dtype)
                nll_sum, count = self.scorer.score(start=state if reuse else 0, source=state if reuse else None,
                                                   watch=self._watch(state, delta))
                out[i, j] = nll_sum / count
        return out

    def drop(self, states: int | Iterable[int]) -> None:
        """Forget the kept streams of ``states`` (one state or several); a later pass from one makes it again."""
        states = [int(states)] if isinstance(states, (int, np.integer)) else [int(s) for s in states]
        self.scorer.drop(states)
        self._kept.difference_update(states)

    def _keep_from(self, state: int) -> None:
        """One intact pass, keeping the streams of states ``state``.. as far as ``max_kept_bytes`` allows."""
        self.drop(list(self._kept))
        room = max(1, self.max_kept_bytes // max(1, self.state_bytes))
        window = range(state, min(self.n_layers, state + room - 1) + 1)
        nll_sum, count = self.scorer.score(keep={s: s for s in window}, watch=self._watch(0, None))
        self._kept = set(window)
        if self._intact is None:
            self._intact, self._n_scored = nll_sum / count, count

    def _watch(self, state: int, delta: torch.Tensor | None) -> Callable[[Batch], contextlib.AbstractContextManager]:
        """Around each batch's forward: count the blocks that compute, and add ``delta`` at ``state`` (None: not)."""
        @contextlib.contextmanager
        def watch(_batch: Batch) -> Iterator[None]:
            with blocks_computing(self.scorer.blocks) as ran:
                with added_at(self.scorer.blocks, state, delta) if delta is not None else contextlib.nullcontext():
                    yield
            self.blocks_run += len(ran)
        return watch


def as_directions(vectors, d: int) -> torch.Tensor:
    """(k, d) float64 host tensor from (k, d) or (d,) numpy or torch vectors; ``ValueError`` naming the fix."""
    v = vectors.detach().cpu() if torch.is_tensor(vectors) else torch.as_tensor(np.asarray(vectors))
    if not (v.is_floating_point() or v.dtype in (torch.int32, torch.int64)):
        raise ValueError(f"steering vectors must be real numbers, got dtype {v.dtype}; pass float values")
    v = v.to(torch.float64)
    if v.dim() == 1:
        v = v[None]
    if v.dim() != 2 or v.shape[1] != d:
        raise ValueError(f"steering vectors of shape {tuple(np.shape(vectors))} do not fit this model's hidden "
                         f"size {d}: give one (d,) vector or (k, d) vectors with d = {d}")
    if not bool(torch.isfinite(v).all()):
        rows = torch.nonzero(~torch.isfinite(v).all(dim=1))[:, 0].tolist()
        raise ValueError(f"steering vector{'s' if len(rows) > 1 else ''} {rows} hold NaN or inf; give finite "
                         "values (a direction normalised by a zero norm is one way to get them)")
    return v


def as_alphas(alphas: Sequence[float] | float) -> np.ndarray:
    """(A,) float64 coefficients; ``ValueError`` for a NaN or inf one."""
    a = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if a.ndim != 1 or not np.isfinite(a).all():
        raise ValueError(f"alphas must be finite numbers (a list, or one number), got {alphas!r}")
    return a


def check_state(state: int, n_layers: int, what: str = "state") -> int:
    """``state`` as an int in 0..``n_layers``, else a ValueError that names the range."""
    try:
        state = operator.index(state)
    except TypeError:
        raise ValueError(f"{what} must be a whole hidden-state number, got {state!r}") from None
    if not 0 <= state <= n_layers:
        raise ValueError(f"{what} {state} is out of range: this model has hidden states 0..{n_layers} "
                         f"(0: the embeddings output, s: the output of block s - 1); pick one of those")
    return state


@contextlib.contextmanager
def added_at(blocks: nn.ModuleList, state: int, delta: torch.Tensor) -> Iterator[None]:
    """Within the ``with``, passes add ``delta`` (d,) to every position of hidden state ``state`` (B, T, d):
    to block 0's hidden input for state 0, else to block ``state`` - 1's output (its stand-in's too: hooks run
    on a stand-in). Out of place: a kept stream a stand-in hands over is never changed."""
    def shifted(hidden: torch.Tensor) -> torch.Tensor:
        return hidden + delta.to(device=hidden.device, dtype=hidden.dtype)

    with edited_at(blocks, state, shifted):
        yield


@contextlib.contextmanager
def blocks_computing(blocks: nn.ModuleList) -> Iterator[set[int]]:
    """Yields the set of decoder blocks (their numbers) that compute inside the ``with``: a block counts when one
    of its own submodules with weights runs, which a stand-in (:mod:`.prefix`) never does."""
    ran: set[int] = set()
    handles = []
    for k, block in enumerate(blocks):
        parts = [child for child in block.children() if next(child.parameters(), None) is not None]
        handles += [part.register_forward_pre_hook(lambda *_args, k=k: ran.add(k)) for part in parts]
    try:
        yield ran
    finally:
        for handle in handles:
            handle.remove()
