"""Rank-one edits of the residual stream at one hidden state, and each text's summed NLL under them.

    iv = Interventions(lm, texts, partners=partners)     # partners[i]: index of text i's pair partner, or -1
    base = iv.intact()                                   # (n,) float64 summed NLL over each text's scored tokens
    nll = iv.run(state, [edit1, edit2, ...])             # (k, n) float64, same scoring
    nll, pooled = iv.run(state, edits, capture=(s1, s2))  # pooled: (k, len(capture), n, d) float32
    nll = iv.skip(block)                                 # (n,) block `block` does not compute (its input passes on)
    sums, counts = token_norms(lm, texts)                # (n, L + 1) summed L2 norms of the edited positions, (n,)

The edits (:mod:`.edits`: ``add``, ``project_out``, ``set_component``, ``oblique``, or ``Edit(a, b, m, c)``) hold
one row per text and change every real token but each text's first (unless ``include_pos0``). States are numbered
as in :mod:`.steering` (0: block 0's input; s: block s - 1's output; L: the last block's output, before the
final norm). The texts are tokenized and batched once (a :class:`~.scoring.Scorer`); the intact pass runs once,
keeping the streams of the states from the first one asked for upward (as far as ``max_kept_bytes`` allows, at
least one, in host memory), and a pass edited at s >= 1 starts at block s from the stream kept there (prefix
reuse: L - s blocks per batch), as in :class:`~.steering.Steering`. Unlike there, kept streams stay until
:meth:`Interventions.drop` (a pass at s does not drop those below s: ``run(s)`` then ``skip(s - 1)`` reuses
both); a state that is not kept costs another intact pass, which keeps a new window from that state. Several edits
run as stacked copies of a batch in one forward where the planned batches leave room (texts per batch, the memory
budget); the numbers equal one edit at a time.

Scoring: each text's next-token NLL summed over its targets at positions >= ``score_from[i]`` (counted from its
first real token). Without partners every target (``score_from`` 1, as :func:`~.scoring.score_texts`). With
partners, the tokens a text shares with its partner from the start (BOS included) are left out: their
log-probabilities are the same in both texts, so the difference of a pair's sums is the difference of their
full-text NLLs. A NaN or inf NLL raises ``ExtractionError`` naming the text (as the Scorer does).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.info import input_device, text_config
from ...models.load import LoadedModel
from ..forward.batching import MAX_TEXTS_PER_BATCH, Batch, memory_budget
from ..forward.guards import text_label
from ..forward.pooling import no_pos0_mask, pool
from .edits import (
    Edit,
    add,
    check_edit,
    edit_positions,
    edit_rows,
    edited_at,
    editor,
    oblique,
    project_out,
    set_component,
    states_seen,
    token_norms,
)
from .scoring import Scorer
from .steering import DEFAULT_KEPT_BYTES, blocks_computing, check_state
from .surgery import Intervention, intervened

__all__ = ["Edit", "Interventions", "add", "oblique", "project_out", "set_component", "token_norms"]


class Interventions:
    """The texts batched once; the intact pass once; then passes that edit one hidden state (see the module).
    ``partners`` (n,) int: each text's pair partner, or -1 (mutual); ``include_pos0``: edit position 0 too;
    ``batch_size``: texts per planned batch (stacked copies stay within it too); ``max_length``: truncate;
    ``max_kept_bytes``: host memory for kept streams (at least one is kept)."""

    def __init__(self, lm: LoadedModel, texts: Sequence[str], *, partners=None, include_pos0: bool = False,
                 batch_size: int | None = None, max_length: int | None = None,
                 max_kept_bytes: int = DEFAULT_KEPT_BYTES):
        self.lm, self.texts, self.include_pos0 = lm, texts, include_pos0
        self.partners = check_partners(partners, len(texts))
        self.scorer = Scorer(lm, texts, batch_size=batch_size, max_length=max_length)
        self.n_layers = len(self.scorer.blocks)
        self.hidden_size = int(text_config(lm.model).hidden_size)
        self.max_kept_bytes = max_kept_bytes
        self._rows = batch_size or MAX_TEXTS_PER_BATCH
        ids = token_ids(self.scorer.batches, len(texts))
        self.score_from: np.ndarray = shared_starts(ids, self.partners, texts)
        """(n,) int64 the first scored target position of each text (from its first real token)."""
        self.n_scored: np.ndarray = np.array([len(x) for x in ids], dtype=np.int64) - self.score_from
        """(n,) int64 scored targets per text."""
        self.blocks_run = 0
        """Decoder blocks that computed so far, summed over forwards (a stacked forward counts once; a stand-in
        does not count)."""
        self._kept: set[int] = set()
        self._intact: np.ndarray | None = None

    @property
    def batches(self) -> list[Batch]:
        """The planned batches (host tensors) every pass runs."""
        return self.scorer.batches

    @property
    def kept(self) -> list[int]:
        """The states whose intact stream is kept now."""
        return sorted(self._kept)

    @property
    def kept_bytes(self) -> int:
        """Host memory the kept streams take now."""
        return self.scorer.kept_bytes

    def intact(self) -> np.ndarray:
        """(n,) float64 the intact model's summed NLL over each text's scored tokens (the first intact pass keeps
        the streams from state 1 upward)."""
        if self._intact is None:
            self._keep_from(1)
        return self._intact.copy()

    def run(self, state: int, edits: Edit | Sequence[Edit], *, capture: Sequence[int] = (),
            prefix_reuse: bool = True, edits_per_pass: int | None = None):
        """(k, n) float64 summed NLL under each of ``edits`` applied at ``state``; with ``capture`` (states >=
        ``state``) also (k, len(capture), n, d) float32: each text's state pooled as ``mean_no_pos0`` pools it
        (mean over its real tokens at positions >= 1) under each edit, returned as ``(nll, pooled)``.
        ``edits_per_pass``: edits stacked into one forward (None: as many as the planned batches leave room
        for, within ``batch_size`` rows and the memory budget; a number: that many, whatever the memory).
        ``prefix_reuse=False``: every pass whole, the same numbers (for checking). ``ValueError`` before any
        pass for a state out of 0..L, a capture state out of ``state``..L, an edit not (n, d) or not finite."""
        state = check_state(state, self.n_layers)
        edits = [edits] if isinstance(edits, Edit) else list(edits)
        n, d = len(self.texts), self.hidden_size
        for j, edit in enumerate(edits):
            check_edit(edit, n, d, j)
        capture = [check_state(s, self.n_layers, "capture state") for s in capture]
        if any(s < state for s in capture):
            raise ValueError(f"capture states {capture} include some below the edited state {state}: an edit "
                             f"changes only the states from {state} on; capture states in {state}..{self.n_layers}")
        if edits_per_pass is not None and not (isinstance(edits_per_pass, (int, np.integer)) and edits_per_pass > 0):
            raise ValueError(f"edits_per_pass={edits_per_pass!r}: give a whole number >= 1, or None (as many as the "
                             "batches leave room for)")
        nll = np.empty((len(edits), n))
        pooled = np.empty((len(edits), len(capture), n, d), dtype=np.float32)
        reuse = prefix_reuse and state > 0
        if reuse and edits:
            self._reach(state)
        per_pass = edits_per_pass or self._room()
        device = input_device(self.lm.model)
        for g in range(0, len(edits), per_pass):
            params = edit_rows(edits[g : g + per_pass], device)  # (e, n, 4, d) float32, each edit moved once
            nll[g : g + len(params)], _ = self.scorer.score(
                start=state if reuse else 0, source=state if reuse else None, score_from=self.score_from,
                copies=len(params), watch=self._watch(state, params, capture, pooled[g : g + len(params)]))
        return (nll, pooled) if capture else nll

    def skip(self, block: int, *, prefix_reuse: bool = True) -> np.ndarray:
        """(n,) float64 summed NLL with decoder block ``block`` (0..L-1) not computing: its input passes on. With
        prefix reuse the stream kept at state ``block`` goes straight to block ``block`` + 1 (the final norm
        after the last block); block 0 (or ``prefix_reuse=False``): a whole pass with the block handing its input
        on (:func:`~.surgery.intervened`)."""
        try:
            block = operator.index(block)
        except TypeError:
            raise ValueError(f"block must be a whole decoder block number, got {block!r}") from None
        if not 0 <= block < self.n_layers:
            raise ValueError(f"block {block} is out of range: this model has decoder blocks 0..{self.n_layers - 1}; "
                             "pick one of those")
        watch = self._watch(0, None, [], None)
        if prefix_reuse and block > 0:
            self._reach(block)
            return self.scorer.score(start=block + 1, source=block, watch=watch, score_from=self.score_from)[0]
        with intervened(self.lm, Intervention.skip(block)):
            return self.scorer.score(watch=watch, score_from=self.score_from)[0]

    def drop(self, states: int | Sequence[int]) -> None:
        """Forget the kept streams of ``states``; a later pass from one makes it again."""
        states = [int(states)] if isinstance(states, (int, np.integer)) else [int(s) for s in states]
        self.scorer.drop(states)
        self._kept.difference_update(states)

    def _reach(self, state: int) -> None:
        """Make sure the intact stream of ``state`` is kept (another intact pass when it is not)."""
        if state not in self._kept:
            self._keep_from(state)

    def _keep_from(self, state: int) -> None:
        """One intact pass, keeping the streams of states ``state``.. as far as ``max_kept_bytes`` allows."""
        self.drop(list(self._kept))
        room = max(1, self.max_kept_bytes // max(1, self.scorer.state_bytes))
        window = range(state, min(self.n_layers, state + room - 1) + 1)
        nll_sum, _ = self.scorer.score(keep={s: s for s in window}, watch=self._watch(0, None, [], None),
                                       score_from=self.score_from)
        self._kept = set(window)
        if self._intact is None:
            self._intact = nll_sum

    def _room(self) -> int:
        """Edits per forward the planned batches leave room for: copies of every batch within the texts per
        batch and the padded tokens per batch (the kept stream, repeated, on the device)."""
        budget = memory_budget(self.lm.model, self.lm.info.vocab_size, kept_states=1)
        return max(1, min(min(self._rows // len(b.index), budget // b.input_ids.numel()) for b in self.batches))

    def _watch(self, state: int, params: torch.Tensor | None, capture: list[int],
               pooled: np.ndarray | None) -> Callable[[Batch], contextlib.AbstractContextManager]:
        """Around each (stacked) batch's forward: count the blocks that compute; with ``params`` (e, n, 4, d),
        edit copy c of the batch at ``state`` by edit c, and pool its ``capture`` states into ``pooled[c]``."""
        blocks = self.scorer.blocks

        @contextlib.contextmanager
        def watch(batch: Batch) -> Iterator[None]:
            seen: dict[int, torch.Tensor] = {}
            with contextlib.ExitStack() as stack:
                if params is not None:
                    copies = len(params)
                    rows = len(batch.index) // copies  # row c * rows + i: copy c (edit c) of text batch.index[i]
                    copy = torch.arange(copies, device=params.device).repeat_interleave(rows)
                    text = torch.as_tensor(batch.index).to(params.device)
                    edit = editor(params[copy, text], edit_positions(batch, self.include_pos0))
                    stack.enter_context(edited_at(blocks, state, edit))  # first: the captures see the edited state
                    mask = {"mean_no_pos0": no_pos0_mask(batch)}
                    stack.enter_context(states_seen(blocks, capture, lambda s, hidden: seen.__setitem__(
                        s, pool(hidden, batch, mask, ("mean_no_pos0",))["mean_no_pos0"])))
                ran = stack.enter_context(blocks_computing(blocks))
                yield
            self.blocks_run += len(ran)
            for j, s in enumerate(capture):
                pooled[:, j][:, batch.index[:rows]] = seen[s].cpu().numpy().reshape(copies, rows, -1)
        return watch


def check_partners(partners, n: int) -> np.ndarray:
    """(n,) int64 partner of each text (-1: none); ``ValueError`` naming the fix unless they are whole numbers
    in -1..n-1, one per text, mutual, and no text its own."""
    if partners is None:
        return np.full(n, -1, dtype=np.int64)
    p = np.asarray(partners)
    if p.shape != (n,) or not (np.issubdtype(p.dtype, np.integer) or p.size == 0):
        raise ValueError(f"partners must be {n} whole numbers, one per text (its partner's index, or -1 for none), "
                         f"got shape {p.shape} of {p.dtype}")
    p = p.astype(np.int64)
    for i, j in enumerate(p.tolist()):
        if not -1 <= j < n:
            raise ValueError(f"partners[{i}] = {j} is out of range: give a text index 0..{n - 1}, or -1 for none")
        if j == i:
            raise ValueError(f"text {i} is its own partner: give the other text of its pair, or -1 for none")
        if j >= 0 and p[j] != i:
            raise ValueError(f"partners are not mutual: text {i}'s partner is {j} but text {j}'s is {p[j]}; set "
                             f"partners[{j}] = {i}")
    return p


def token_ids(batches: Sequence[Batch], n: int) -> list[list[int]]:
    """Each text's token ids as the batches hold them (its real tokens, in order)."""
    ids: list[list[int]] = [[] for _ in range(n)]
    for batch in batches:
        for row, i in enumerate(batch.index.tolist()):
            ids[i] = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
    return ids


def shared_starts(ids: Sequence[Sequence[int]], partners: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """(n,) int64: 1, or for a text with a partner the length of the token prefix the two share (at least 1);
    ``ExtractionError`` naming both texts for a text with no token after that prefix."""
    out = np.ones(len(ids), dtype=np.int64)
    for i, j in enumerate(partners.tolist()):
        if j < 0:
            continue
        a, b = ids[i], ids[j]
        k = next((t for t, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        if k >= len(a):
            how = "has the same tokens as" if len(a) == len(b) else "is, token for token, the start of"
            raise ExtractionError(f"{text_label(texts, i)} {how} its partner {text_label(texts, j)}, so it has no "
                                  "token of its own to score; use pairs that differ after their shared start")
        out[i] = max(1, k)
    return out
