"""Which pass starts from which kept residual stream: the order and reuse plan for many forward passes
over the same texts that differ only in some decoder layers.

    # one signature per job: per decoder layer, None (the original weights) or what changed it
    plan = plan_passes([(None,) * 4, ("q",) * 4, (None, None, "q", None)], budget_states=8)
    for p in plan.passes:     # baseline first; p.start: first decoder layer the pass runs (0: all of them)
        p.job, p.start, p.source, p.keep, p.free

Two passes compute the same residual stream up to layer k when their signatures agree on layers 0..k-1, so
the later one can start at layer k from the stream the earlier one left there. Sorting the signatures puts
each pass next to the one it shares the longest prefix with (for sorted sequences, the longest common prefix
with any earlier one is the one with its predecessor), so every pass starts from a stream kept by an earlier
pass of the plan. At most ``budget_states`` streams are held at once: beyond that, the streams that save the
fewest layers are not kept, and the passes that would have read them run whole.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

Signature = tuple[Hashable | None, ...]
"""Per decoder layer: None where the layer has its original weights, else a label of what changed it."""


@dataclass(frozen=True)
class Pass:
    """One forward pass of the plan."""

    job: int
    """Index of its signature in the caller's list."""
    start: int
    """First decoder layer it computes; layers below run as stand-ins handing over ``source`` (0: none)."""
    source: int | None
    """Id of the kept stream it starts from (the output of decoder layer ``start - 1``), None for a full pass."""
    keep: dict[int, int] = field(default_factory=dict)
    """{stream id: layer k}: keep the output of decoder layer k - 1 (the stream entering layer k) for later."""
    free: tuple[int, ...] = ()
    """Streams no later pass reads: drop them once this pass is done."""


@dataclass(frozen=True)
class PassPlan:
    passes: list[Pass]
    n_layers: int
    peak_states: int
    """Most streams held at once."""
    whole_by_budget: int
    """Passes that could have started from a kept stream but run whole: the budget left their stream out."""

    def layers_run(self) -> int:
        """Decoder layers computed over every pass (a full pass computes ``n_layers``)."""
        return sum(self.n_layers - p.start for p in self.passes)

    def cost(self, layer_cost: Sequence[float], head_cost: float) -> float:
        """Total cost of the plan when decoder layer l costs ``layer_cost[l]`` and the rest of a pass (embedding,
        final norm, unembedding, loss) ``head_cost``."""
        suffix = [sum(layer_cost[k:]) for k in range(self.n_layers + 1)]
        return sum(head_cost + suffix[p.start] for p in self.passes)


def common_prefix(a: Signature, b: Signature) -> int:
    """How many leading layers two signatures agree on."""
    n = 0
    for x, y in zip(a, b, strict=True):
        if x != y:
            break
        n += 1
    return n


def _order_key(signature: Signature) -> tuple:
    return tuple((0, "") if x is None else (1, repr(x)) for x in signature)  # original weights sort first


def plan_passes(signatures: Sequence[Signature], budget_states: int | None = None, reuse: bool = True) -> PassPlan:
    """The passes for ``signatures`` (all of one length, the number of decoder layers): sorted so that shared
    prefixes are adjacent, each starting as deep as an earlier pass's kept stream allows, keeping at most
    ``budget_states`` streams at once (None: no limit). ``reuse=False``: every pass whole, in the given order."""
    n = len(signatures[0]) if signatures else 0
    if any(len(s) != n for s in signatures):
        raise ValueError("every signature needs one entry per decoder layer")
    if not reuse or n == 0:
        return PassPlan([Pass(j, 0, None) for j in range(len(signatures))], n, 0, 0)
    order = sorted(range(len(signatures)), key=lambda j: _order_key(signatures[j]))
    sigs = [signatures[j] for j in order]
    # Wanted start of each pass: its common prefix with the pass before it (at most n - 1: one layer is run).
    starts = [0] + [min(common_prefix(sigs[i - 1], sigs[i]), n - 1) for i in range(1, len(sigs))]
    dropped: set[int] = set()  # passes made whole by the budget
    while True:
        streams, producer, readers = _streams(sigs, starts, dropped)
        peak, live_at_peak = _peak(streams, producer, readers, len(sigs))
        if budget_states is None or peak <= budget_states:
            break
        # Leave out the live stream that saves the fewest layers; its readers run whole.
        key = min(live_at_peak, key=lambda k: (k[1] * len(readers[k]), k[1]))
        dropped |= set(readers[key])
    ids = {key: i for i, key in enumerate(streams)}
    last_read = {key: max(readers[key]) for key in streams}
    passes = []
    for i, j in enumerate(order):
        start = 0 if i in dropped else starts[i]
        source = ids[(sigs[i][:start], start)] if start else None
        keep = {ids[key]: key[1] for key in streams if producer[key] == i}
        free = tuple(ids[key] for key in streams if last_read[key] == i)
        passes.append(Pass(j, start, source, keep, free))
    return PassPlan(passes, n, peak, len(dropped))


def _streams(sigs: list[Signature], starts: list[int], dropped: set[int]):
    """The kept streams, keyed (prefix, layer k), with the pass that keeps each and the passes that read it."""
    producer: dict[tuple, int] = {}
    readers: dict[tuple, list[int]] = {}
    effective = [0 if i in dropped else s for i, s in enumerate(starts)]
    for i, k in enumerate(effective):
        if k == 0:
            continue
        key = (sigs[i][:k], k)
        if key not in producer:
            # The latest earlier pass that computed layer k - 1: walking back from i - 1 over passes that started
            # at k or deeper keeps a common prefix of at least k (sorted order), and the first pass has start 0.
            j = i - 1
            while effective[j] >= k:
                j -= 1
            producer[key] = j
        readers.setdefault(key, []).append(i)
    return list(producer), producer, readers


def _peak(streams, producer, readers, n_passes: int) -> tuple[int, list]:
    """Most streams alive at once (from the pass that keeps one to its last reader) and those alive then."""
    best, at = 0, []
    for t in range(n_passes):
        live = [k for k in streams if producer[k] <= t <= max(readers[k])]
        if len(live) > best:
            best, at = len(live), live
    return best, at
