"""Causal interventions on the decoder blocks of a causal LM, and what each does to the model's predictions.

    iv = Intervention.skip(5)                  # also .repeat(5), .swap(5) (blocks 5 and 6), .prune([2, 7, 9])
    iv.first_changed_layer, iv.signature       # 5; hashable, equal for the same run (prune {5} is skip 5)
    with intervened(lm, iv):                   # lm: a LoadedModel or the nn.Module itself
        logits = lm.model(**inputs, use_cache=False).logits
    ref = reference(p_logits, p_final, batch)  # the intact model once per batch, then per intervention:
    compare(ref, q_logits, q_final)            # per text: nll_sum, kl, agreement, cosine

Measuring many interventions over many texts, with prefix reuse: :mod:`.surgery_run`.

What the interventions do (block l: the l-th entry of the model's ``nn.ModuleList`` of decoder blocks):

- ``skip l``: block l hands its input on unchanged; ``prune S``: every block of S does (``prune {l}`` is
  ``skip l``).
- ``repeat l``: block l runs twice, the second time on the first's output.
- ``swap l``: blocks l and l + 1 run in the opposite order: l + 1 on the stream entering l, then l on that.

The model runs as it is, as in :mod:`.prefix`: its embeddings, position ids, rotary tables and attention masks
come from its own code, and only the ``forward`` of the blocks touched is swapped (an instance attribute, for
the ``with`` only; hooks on the blocks still run). A block always runs with the arguments the model gives its
own slot (mask, rotary table): they are the same for every slot in most models, and a model whose layers
differ in kind (Gemma 3's sliding and full attention) keeps each block's kind wherever it runs. Passes inside
the ``with`` must not use a KV cache (``use_cache=False``): a block that is handed one raises.
"""

from __future__ import annotations

import contextlib
import operator
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...models.info import decoder_layers, input_device
from ...models.load import LoadedModel
from ..forward.batching import Batch
from .prefix import hidden_of
from .prefix_plan import Signature

KINDS = ("skip", "repeat", "swap", "prune")


@dataclass(frozen=True)
class Intervention:
    """``Intervention.skip(3)``, ``.repeat(3)``, ``.swap(3)`` (blocks 3 and 4), ``.prune([1, 4])``, or
    ``Intervention(kind, layers)`` with the same meaning. ``layers`` is normalised: a swap's holds l and l + 1,
    a prune's is sorted without repeats. Layer numbers are checked against a model by :meth:`check`."""

    kind: str
    layers: tuple[int, ...]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown intervention {self.kind!r}; use one of {', '.join(KINDS)}")
        try:
            layers = tuple(operator.index(k) for k in self.layers)
        except TypeError:
            raise ValueError(f"{self.kind}: layers must be whole block numbers, got {self.layers!r}") from None
        if self.kind == "prune":
            if not layers:
                raise ValueError("prune: name at least one block to remove")
            layers = tuple(sorted(set(layers)))
        elif self.kind == "swap" and len(layers) == 1:
            layers = (layers[0], layers[0] + 1)
        if self.kind == "swap" and (len(layers) != 2 or layers[1] != layers[0] + 1):
            raise ValueError(f"swap exchanges two neighbouring blocks l and l + 1: give (l,), got {self.layers!r}")
        if self.kind in ("skip", "repeat") and len(layers) != 1:
            raise ValueError(f"{self.kind} acts on one block: give (l,), got {self.layers!r}")
        object.__setattr__(self, "layers", layers)

    @classmethod
    def skip(cls, layer: int) -> Intervention:
        return cls("skip", (layer,))

    @classmethod
    def repeat(cls, layer: int) -> Intervention:
        return cls("repeat", (layer,))

    @classmethod
    def swap(cls, layer: int) -> Intervention:
        return cls("swap", (layer,))

    @classmethod
    def prune(cls, layers: Iterable[int]) -> Intervention:
        return cls("prune", tuple(layers))

    @property
    def signature(self) -> tuple:
        """Hashable, equal for interventions that compute the same thing (``skip l`` and ``prune {l}``)."""
        return ("prune" if self.kind == "skip" else self.kind, self.layers)

    @property
    def first_changed_layer(self) -> int:
        """The first block it touches: the stream entering this block is the intact model's."""
        return self.layers[0]

    @property
    def label(self) -> str:
        """``"skip 3"``, ``"repeat 3"``, ``"swap 3<->4"``, ``"prune {1, 4}"``."""
        if self.kind == "swap":
            return f"swap {self.layers[0]}<->{self.layers[1]}"
        if self.kind == "prune":
            return "prune {" + ", ".join(map(str, self.layers)) + "}"
        return f"{self.kind} {self.layers[0]}"

    def check(self, n_layers: int) -> None:
        """``ValueError`` naming the valid range when a block number is not one of a model of ``n_layers``."""
        top = n_layers - 1
        bad = [k for k in self.layers if not 0 <= k <= top]
        if not bad:
            return
        if self.kind == "swap":
            if n_layers < 2:
                raise ValueError(f"{self.label}: a model of {n_layers} decoder block has no pair to swap")
            raise ValueError(f"{self.label}: swap l needs blocks l and l + 1; this model has {n_layers} decoder "
                             f"blocks, so l must be in 0..{top - 1}")
        raise ValueError(f"{self.label}: block {bad[0]} is out of range; this model has {n_layers} decoder "
                         f"blocks, numbered 0..{top}")

    def per_layer(self, n_layers: int) -> Signature:
        """Per decoder block, None where it runs as in the intact model, else what it does there: ``"skip"`` (skip
        and prune), ``"repeat"``, or the swap's signature on both of its blocks. Two interventions whose entries
        agree on blocks 0..k-1 hand the same stream to block k (a pruned set shares the stream past its first
        block with that block's skip): the signatures :func:`~layerscope.engine.interventions.prefix_plan.plan_passes`
        orders passes by."""
        self.check(n_layers)
        local = self.signature if self.kind == "swap" else ("repeat" if self.kind == "repeat" else "skip")
        return tuple(local if k in self.layers else None for k in range(n_layers))


_TUPLE_BLOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def blocks_return_tuples(model: nn.Module) -> bool:
    """Whether ``model``'s decoder blocks return a tuple (hidden state first) rather than the hidden state
    (B, T, d) itself: what a block that hands its input on must return. Found once per model from a two-token
    pass and remembered."""
    blocks = decoder_layers(model)
    if blocks not in _TUPLE_BLOCKS:
        seen = []
        handle = blocks[0].register_forward_hook(lambda _m, _a, out: seen.append(isinstance(out, tuple)))
        try:
            with torch.inference_mode():
                model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=input_device(model)), use_cache=False)
        finally:
            handle.remove()
        _TUPLE_BLOCKS[blocks] = bool(seen and seen[0])
    return _TUPLE_BLOCKS[blocks]


def _hidden_in(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _call_on(forward, hidden: torch.Tensor, args: tuple, kwargs: dict):
    """``forward`` with the arguments of one call, its hidden state replaced by ``hidden``."""
    if args:
        return forward(hidden, *args[1:], **kwargs)
    return forward(**{**kwargs, "hidden_states": hidden})


def _no_cache(args: tuple, kwargs: dict) -> None:
    from transformers.cache_utils import Cache

    if any(isinstance(x, Cache) for x in (*args, *kwargs.values())):
        raise RuntimeError("a decoder block under an intervention was handed a KV cache: run the model with "
                           "use_cache=False inside intervened(...)")


@contextlib.contextmanager
def intervened(lm: LoadedModel | nn.Module, intervention: Intervention) -> Iterator[None]:
    """``with intervened(lm, Intervention.skip(3)): lm.model(**inputs, use_cache=False)``: passes inside the
    ``with`` run the intervened model; on leaving it (also by an exception) every block is as it was.
    ``ValueError`` naming the valid range for a block number the model does not have."""
    model = lm.model if isinstance(lm, LoadedModel) else lm
    blocks = decoder_layers(model)
    intervention.check(len(blocks))
    as_tuple = intervention.kind != "repeat" and blocks_return_tuples(model)
    original = {k: blocks[k].forward for k in intervention.layers}  # bound, or an instance attribute (accelerate)
    saved = {k: blocks[k].__dict__["forward"] for k in intervention.layers if "forward" in blocks[k].__dict__}

    def pass_on(*args, **kwargs):
        _no_cache(args, kwargs)
        hidden = _hidden_in(args, kwargs)
        return (hidden,) if as_tuple else hidden

    patches = {}
    if intervention.kind in ("skip", "prune"):
        patches = dict.fromkeys(intervention.layers, pass_on)
    elif intervention.kind == "repeat":
        (layer,) = intervention.layers

        def twice(*args, **kwargs):
            _no_cache(args, kwargs)
            return _call_on(original[layer], hidden_of(original[layer](*args, **kwargs)), args, kwargs)

        patches = {layer: twice}
    else:  # swap: slot l hands its input on and leaves its arguments; slot l + 1 runs l + 1, then l
        low, high = intervention.layers
        left: list[tuple[tuple, dict]] = []

        def first(*args, **kwargs):
            left[:] = [(args, kwargs)]  # one pass at a time; a pass that raised leaves nothing behind
            return pass_on(*args, **kwargs)

        def second(*args, **kwargs):
            _no_cache(args, kwargs)
            if not left:
                raise RuntimeError(f"{intervention.label}: block {high} ran without block {low} before it")
            low_args, low_kwargs = left.pop()
            return _call_on(original[low], hidden_of(original[high](*args, **kwargs)), low_args, low_kwargs)

        patches = {low: first, high: second}
    try:
        for k, forward in patches.items():
            blocks[k].forward = forward
        yield
    finally:
        for k in patches:
            if k in saved:
                blocks[k].forward = saved[k]
            else:
                blocks[k].__dict__.pop("forward", None)


COMPARE_CHUNK_BYTES = 256 * 2**20
"""Most memory the float32 logits of one chunk of rows may take while comparing (rows x length x vocab x 4)."""


@dataclass(frozen=True)
class Reference:
    """The intact model's side of every comparison on one batch, computed once: ``reference(...)``."""

    log_p: torch.Tensor
    """(B, T-1, vocab) float32 next-token log-probabilities at each position that predicts a token."""
    p: torch.Tensor
    """(B, T-1, vocab) float32 their exponent."""
    top: torch.Tensor
    """(B, T-1) the most likely next token."""
    final: torch.Tensor
    """(B, T-1, d) float32 final hidden states."""
    scored: torch.Tensor
    """(B, T-1) bool: position t predicts token t + 1 and both are real tokens."""
    targets: torch.Tensor
    """(B, T-1, 1) the next token at each position."""
    nll_sum: torch.Tensor
    """(B,) float64 the intact model's summed NLL over the scored tokens."""

    @property
    def count(self) -> torch.Tensor:
        """(B,) scored tokens per text."""
        return self.scored.sum(dim=1)


def _scored_sum(values: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """(rows, T-1) per-token values -> (rows,) float64 sum over the scored tokens; padding is selected away,
    never multiplied, so a NaN there cannot leak in."""
    return torch.where(scored, values, 0.0).double().sum(dim=1)


def reference(p_logits: torch.Tensor, p_final: torch.Tensor, batch: Batch) -> Reference:
    """The intact model's (B, T, vocab) logits and (B, T, d) final hidden states of ``batch``, ready to compare.
    Its NLL is HF's ``labels`` loss summed: minus the log-softmax (float32) of each next token."""
    device = p_logits.device
    real = batch.attention_mask.bool().to(device)
    scored = real[:, 1:] & real[:, :-1]
    targets = batch.input_ids[:, 1:].to(device).unsqueeze(-1)
    log_p = F.log_softmax(p_logits[:, :-1].float(), dim=-1)
    nll = -log_p.gather(-1, targets).squeeze(-1)
    return Reference(log_p=log_p, p=log_p.exp(), top=p_logits[:, :-1].argmax(dim=-1), final=p_final[:, :-1].float(),
                     scored=scored, targets=targets, nll_sum=_scored_sum(nll, scored))


def compare(ref: Reference, q_logits: torch.Tensor, q_final: torch.Tensor,
            chunk_bytes: int = COMPARE_CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """Per text, over its scored tokens (position t when t and t + 1 are real tokens, as HF's ``labels`` loss
    scores a text alone): ``nll_sum`` the summed NLL under Q (float64), and the means ``kl`` of KL(P || Q) of
    next-token distributions, ``agreement`` the fraction of tokens whose top-1 prediction agrees and ``cosine``
    between the final hidden states (the unembedding's input); each (B,) float64. Q: the intervened model's
    (B, T, vocab) logits and (B, T, d) final states, a few rows at a time in float32; one log-softmax serves
    the NLL and the KL."""
    B, T, V = q_logits.shape
    rows = max(1, chunk_bytes // max(1, T * V * 4))
    device = ref.log_p.device
    sums = {name: torch.zeros(B, dtype=torch.float64, device=device)
            for name in ("nll_sum", "kl", "agreement", "cosine")}
    for r in range(0, B, rows):
        part = slice(r, r + rows)
        q = q_logits[part, :-1].to(device)
        log_q = F.log_softmax(q.float(), dim=-1)
        per_token = {"nll_sum": -log_q.gather(-1, ref.targets[part]).squeeze(-1),
                     "kl": (ref.p[part] * (ref.log_p[part] - log_q)).sum(dim=-1),
                     "agreement": (q.argmax(dim=-1) == ref.top[part]).float(),
                     "cosine": F.cosine_similarity(ref.final[part], q_final[part, :-1].float().to(device), dim=-1)}
        for name, values in per_token.items():
            sums[name][part] = _scored_sum(values, ref.scored[part])
    count = ref.count
    return {name: total if name == "nll_sum" else total / count for name, total in sums.items()}
