"""Causal interventions on the decoder blocks of a causal LM, and what each does to the model's predictions.

    iv = Intervention.skip(5)                  # also .repeat(5), .swap(5) (blocks 5 and 6), .prune([2, 7, 9])
    iv.first_changed_layer, iv.signature       # 5; hashable, equal for the same run (prune {5} is skip 5)
    with intervened(lm, iv):                   # lm: a LoadedModel or the nn.Module itself
        logits = lm.model(**inputs, use_cache=False).logits
    m = measure_interventions(lm, texts, [Intervention.skip(l) for l in range(lm.info.n_layers)])
    m.intact_nll, m.n_scored                   # (n_texts,) mean NLL of the intact model, scored tokens per text
    m[iv].nll, m[iv].kl, m[iv].agreement, m[iv].cosine    # (n_texts,) each, see :class:`InterventionMeasures`

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..models.info import decoder_layers, input_device
from ..models.load import LoadedModel
from .batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_batches
from .guards import check_finite, encode
from .pooling import token_nll
from .prefix import hidden_of
from .prefix_plan import Signature
from .scoring import rerun_for_bad_layer

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
        """Per decoder block, None where it runs as in the intact model and this signature where it is touched:
        the signatures :func:`~layerscope.engine.prefix_plan.plan_passes` orders passes by."""
        self.check(n_layers)
        return tuple(self.signature if k in self.layers else None for k in range(n_layers))


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


def token_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) in nats per row, float32: (..., vocab) logits of P (the intact model) and Q -> (...)."""
    log_p = F.log_softmax(p_logits.float(), dim=-1)
    log_q = F.log_softmax(q_logits.float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def top1_agrees(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """(..., vocab) logits twice -> (...) bool: whether the most likely next token is the same."""
    return p_logits.argmax(dim=-1) == q_logits.argmax(dim=-1)


COMPARE_CHUNK_BYTES = 256 * 2**20
"""Most memory the float32 logits of one chunk of rows may take while comparing (rows x length x vocab x 4)."""


def compare_predictions(p_logits: torch.Tensor, q_logits: torch.Tensor, p_final: torch.Tensor,
                        q_final: torch.Tensor, batch: Batch,
                        chunk_bytes: int = COMPARE_CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """Per text of ``batch``, over its scored tokens (those :func:`~.pooling.token_nll` scores: position t
    when t and t + 1 are real tokens): ``kl`` the mean KL(P || Q) of next-token distributions, ``agreement``
    the fraction of tokens whose top-1 prediction agrees, ``cosine`` the mean cosine between the final hidden
    states (the unembedding's input) at those tokens; each (B,) float64. ``*_logits`` (B, T, vocab) and
    ``*_final`` (B, T, d) of P (intact) and Q (intervened), a few rows at a time in float32."""
    real = batch.attention_mask.bool().to(p_logits.device)
    scored = real[:, 1:] & real[:, :-1]  # (B, T-1): position t predicts token t + 1
    B, T, V = p_logits.shape
    rows = max(1, chunk_bytes // max(1, T * V * 4))
    sums = {name: torch.zeros(B, dtype=torch.float64, device=p_logits.device)
            for name in ("kl", "agreement", "cosine")}
    for r in range(0, B, rows):
        p, q, keep = p_logits[r : r + rows, :-1], q_logits[r : r + rows, :-1], scored[r : r + rows]
        per_token = {"kl": token_kl(p, q), "agreement": top1_agrees(p, q).float(),
                     "cosine": F.cosine_similarity(p_final[r : r + rows, :-1].float(),
                                                   q_final[r : r + rows, :-1].float().to(p_final.device), dim=-1)}
        for name, values in per_token.items():  # selected, never multiplied: padding cannot leak in
            sums[name][r : r + rows] = torch.where(keep, values.to(keep.device), 0.0).double().sum(dim=1)
    count = scored.sum(dim=1)
    return {name: total / count for name, total in sums.items()}


@dataclass(frozen=True)
class InterventionMeasures:
    """One intervention against the intact model, per text over its scored tokens."""

    intervention: Intervention
    nll: np.ndarray
    """(n_texts,) float64 mean next-token NLL under the intervention, scored as the engine scores the intact
    model (:func:`~.scoring.score_texts`, HF's ``labels`` loss of the text alone)."""
    kl: np.ndarray
    """(n_texts,) float64 mean KL(intact || intervened) of the next-token distributions, in nats."""
    agreement: np.ndarray
    """(n_texts,) float64 fraction of scored tokens whose top-1 next token is the intact model's."""
    cosine: np.ndarray
    """(n_texts,) float64 mean cosine between intact and intervened final hidden states (the input of the
    unembedding, after the final norm) at the scored tokens (the positions the next-token measures read)."""


@dataclass(frozen=True)
class SurgeryMeasures:
    """What :func:`measure_interventions` returns; ``m[intervention]``: its :class:`InterventionMeasures`."""

    intact_nll: np.ndarray
    """(n_texts,) float64 mean next-token NLL of the intact model."""
    n_scored: np.ndarray
    """(n_texts,) int64 scored tokens per text (its tokens minus one)."""
    results: tuple[InterventionMeasures, ...]

    def __getitem__(self, intervention: Intervention) -> InterventionMeasures:
        for result in self.results:
            if result.intervention.signature == intervention.signature:
                return result
        raise KeyError(intervention.label)


def measure_interventions(lm: LoadedModel, texts: Sequence[str], interventions: Sequence[Intervention], *,
                          batch_size: int | None = None, max_length: int | None = None) -> SurgeryMeasures:
    """``m = measure_interventions(lm, texts, [Intervention.skip(3), Intervention.swap(5)])``: per text, the
    intact model's mean NLL and, per intervention, its NLL, KL, top-1 agreement and final-state cosine
    (:class:`InterventionMeasures`). Each batch runs intact once, then once per intervention (no prefix reuse
    yet). ``ValueError`` for a block number the model does not have and ``ExtractionError`` for a text too long
    or of one token, both before any pass; ``ExtractionError`` for a NaN or inf NLL."""
    model = lm.model
    n_layers = len(decoder_layers(model))
    for intervention in interventions:
        intervention.check(n_layers)
    ids = encode(lm, texts, max_length, min_tokens=2)
    # Two batches of logits live at once, plus the float32 chunks that compare them.
    budget = max(1, memory_budget(model, lm.info.vocab_size) // 3)
    plan = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget)
    n = len(texts)
    intact_nll, n_scored = np.zeros(n), np.zeros(n, dtype=np.int64)
    out = [{name: np.zeros(n) for name in ("nll", "kl", "agreement", "cosine")} for _ in interventions]
    head = model.get_output_embeddings()
    device = input_device(model)
    for index in plan:
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        logits, final, nll_sum, count = _pass(lm, texts, batch, head, contextlib.nullcontext)
        intact_nll[batch.index], n_scored[batch.index] = nll_sum, count
        for slot, intervention in zip(out, interventions, strict=True):
            q_logits, q_final, q_sum, _ = _pass(lm, texts, batch, head, lambda iv=intervention: intervened(lm, iv))
            compared = compare_predictions(logits, q_logits, final, q_final, batch)
            slot["nll"][batch.index] = q_sum / count
            for name, values in compared.items():
                slot[name][batch.index] = values.cpu().numpy()
            del q_logits, q_final
        intact_nll[batch.index] /= count
    results = tuple(InterventionMeasures(iv, **slot) for iv, slot in zip(interventions, out, strict=True))
    return SurgeryMeasures(intact_nll, n_scored, results)


@torch.inference_mode()
def _pass(lm: LoadedModel, texts: Sequence[str], batch: Batch, head: nn.Module | None, context):
    """One forward pass of ``batch`` inside ``context()``: logits (B, T, V), final hidden states (B, T, d),
    summed NLL and scored-token count per text (numpy)."""
    final: list[torch.Tensor] = []
    with context():
        handle = head.register_forward_pre_hook(lambda _m, args: final.append(args[0])) if head is not None else None
        try:
            out = lm.model(**batch.model_inputs(), use_cache=False, output_hidden_states=head is None)
        finally:
            if handle is not None:
                handle.remove()
        total, count = token_nll(out.logits.to(batch.input_ids.device), batch)
        check_finite(lm, texts, batch.index, bad_nll=~torch.isfinite(total),
                     first_bad_layer=lambda row: rerun_for_bad_layer(lm, batch, row))
    hidden = final[0] if final else out.hidden_states[-1]
    return out.logits, hidden, total.cpu().numpy(), count.cpu().numpy()
