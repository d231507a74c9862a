"""The ``mean_no_massive`` pooling inside one forward pass, whose token flags come from every decoder block.

    plan = EarlyPlan()                                          # one per extraction
    late = NoMassive(batch, bos_id, compat, scratch, plan, slots=len(stored))  # one per batch
    late.block(hidden)                                          # each decoder block output (B, T, d): its flags
    late.state(hidden, out, finite)                             # each stored state: kept, or pooled into out now
    if not late.finish():                                       # pools the kept states against the final flags
        ...                                                     # False: run the batch again (plan.keep_all is set)

A state stored before the last block cannot be pooled when it arrives: a token flagged at a later block leaves
its mean. Off the CPU (``scratch`` None) every stored state is kept by reference until the pass ends. On a CPU a
kept state is a copy into a reused buffer (:mod:`.scratch`), and copying every layer costs about a percent of a
short-text pass, while a model's massive tokens usually appear within its first few blocks and stay. So once a
token has been flagged and :data:`STABLE_BLOCKS` block outputs in a row have flagged no new one, the states after
that are pooled at once against the flags so far, with no copy. The flags they were pooled against are kept, and
:meth:`NoMassive.finish` compares them with the final flags: if a later block flagged a new token, it says so, the
caller runs the batch again keeping every state, and ``plan.keep_all`` keeps every state for the rest of the
extraction. The numbers are the same either way: the same masks, the same states, the same pooling.
"""

from __future__ import annotations

import dataclasses

import torch

from .batching import Batch
from .massive import massive_mask
from .pooling import Pooler, free_to_check, pooling_masks
from .scratch import Scratch

STABLE_BLOCKS = 2
"""Block outputs in a row that flag no new token (after one has been flagged) before states are pooled at once."""


@dataclasses.dataclass
class EarlyPlan:
    """What one extraction has learnt: ``keep_all`` once a batch had to run again (a block flagged a new token
    after states had been pooled early), so no later batch pools early and none runs twice."""

    keep_all: bool = False
    early: int = 0
    """States pooled early (no copy kept)."""
    reruns: int = 0
    """Batches run again."""


class NoMassive:
    """One batch's ``mean_no_massive``; see the module docstring. ``batch`` on the pass's device; ``bos_token_id``
    and ``compat`` as for :func:`.pooling.pooling_masks`; ``scratch``: the CPU's reused buffers (None off the CPU:
    every state kept by reference); ``plan``: the extraction's :class:`EarlyPlan` (None: keep every state);
    ``slots``: the states stored per pass (the most that can be kept)."""

    def __init__(self, batch: Batch, bos_token_id: int | None, compat: str | None, scratch: Scratch | None,
                 plan: EarlyPlan | None, slots: int = 1):
        self.batch, self.bos, self.compat, self.scratch = batch, bos_token_id, compat, scratch
        self.real = batch.attention_mask.bool()
        self.massive = torch.zeros_like(self.real)  # (B, T) massive at any block output so far
        self.early_ok = scratch is not None and plan is not None and not plan.keep_all
        self.plan = plan
        self.flagged = False  # a token has been flagged at some block
        self.stable = 0  # block outputs in a row since the last one that flagged a new token
        self.frozen: torch.Tensor | None = None  # the flags the early states were pooled against
        self.early: Pooler | None = None
        self.kept: list[tuple[torch.Tensor, torch.Tensor, bool | None]] = []  # (state, out, finite) to pool late
        self.slots = slots

    def block(self, hidden: torch.Tensor) -> None:
        """Flag the massive tokens of a decoder block's output ``hidden`` (B, T, d)."""
        flags = massive_mask(hidden, self.real, scratch=self.scratch, known=self.massive)
        if self.early_ok and free_to_check(hidden):  # on a CPU: reading the flags costs no wait
            grew = bool((flags & ~self.massive).any())
            self.flagged |= grew
            self.stable = 0 if grew else self.stable + 1
        self.massive.logical_or_(flags)

    def state(self, hidden: torch.Tensor, out: torch.Tensor, finite: bool | None = None) -> None:
        """A stored state ``hidden`` (B, T, d), its ``mean_no_massive`` to go into ``out`` (B, d) float32;
        ``finite``: the first Pooler's answer for it (:meth:`.pooling.Pooler.__call__`)."""
        if self.early_ok and self.flagged and self.stable >= STABLE_BLOCKS:
            if self.early is None:
                self.frozen = self.massive.clone()
                self.early = self._pooler(self.frozen)
            self.early(hidden, {"mean_no_massive": out}, finite)
            self.plan.early += 1
            return
        if self.scratch is not None:  # a copy into a buffer every batch reuses: the model's memory is freed for reuse
            B, T, d = hidden.shape
            states = self.scratch.tensor("kept", (self.slots, B, T, d), hidden.dtype)  # the same view each call
            hidden = states[len(self.kept)].copy_(hidden)
        self.kept.append((hidden, out, finite))  # off the CPU: a reference to the model's own output

    def finish(self) -> bool:
        """Pool the kept states against the final flags; False (nothing pooled) when a state was pooled early
        against flags that a later block added to: the batch must run again (``plan.keep_all`` is now set)."""
        if self.frozen is not None and not torch.equal(self.frozen, self.massive):
            self.plan.keep_all = True
            self.plan.reruns += 1
            self.kept.clear()
            return False
        late = self._pooler(self.massive)
        for hidden, out, finite in self.kept:
            late(hidden, {"mean_no_massive": out}, finite)
        self.kept.clear()
        return True

    def _pooler(self, massive: torch.Tensor) -> Pooler:
        return Pooler(self.batch, pooling_masks(self.batch, self.bos, self.compat, massive), ("mean_no_massive",))
