"""Many interventions over many texts, each compared with the intact model, sharing the layers they share.

    ivs = [Intervention.skip(l) for l in range(lm.info.n_layers)] + [Intervention.prune([3, 4])]
    m = measure_interventions(lm, texts, ivs)              # prefix_reuse=False: every pass whole, for checking
    m.intact_nll, m.n_scored                   # (n_texts,) mean NLL of the intact model, scored tokens per text
    m[iv].nll, m[iv].kl, m[iv].agreement, m[iv].cosine    # (n_texts,) each, see :class:`InterventionMeasures`
    m.plan.layers_run(), m.plan.cost(layer_cost, head_cost)   # the pass plan, for a compute bound

Per batch of texts the intact model runs once and keeps the stream entering each layer an intervention first
touches; each intervention then starts there (:mod:`.prefix`): the layers below it are the intact model's, so
they are not run again. The order and the streams kept come from :func:`~.prefix_plan.plan_passes` over the
interventions' per-layer signatures. Interventions with equal signatures (``skip l`` and ``prune {l}``, or a
pruning set drawn twice) run once and share their result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...models.info import decoder_layers, input_device
from ...models.load import LoadedModel
from ...progress import steps
from ..forward.batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_batches
from ..forward.guards import check_finite, encode
from .prefix import keep_outputs, stand_ins
from .prefix_plan import PassPlan, plan_passes
from .scoring import rerun_for_bad_layer
from .surgery import Intervention, blocks_return_tuples, compare, intervened, reference


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
    """One per distinct signature, in the order first given."""
    plan: PassPlan
    """The passes run for each batch: job 0 is the intact model, job j the j-th distinct intervention."""

    def __getitem__(self, intervention: Intervention) -> InterventionMeasures:
        for result in self.results:
            if result.intervention.signature == intervention.signature:
                return result
        raise KeyError(intervention.label)


def distinct(interventions: Sequence[Intervention]) -> list[Intervention]:
    """The first intervention of each signature, in the order given."""
    seen: dict[tuple, Intervention] = {}
    for intervention in interventions:
        seen.setdefault(intervention.signature, intervention)
    return list(seen.values())


def surgery_plan(n_layers: int, interventions: Sequence[Intervention], prefix_reuse: bool = True) -> PassPlan:
    """The passes for one batch: the intact model (job 0) and each of ``interventions`` (job j + 1), each
    starting at the first layer it touches when ``prefix_reuse``."""
    signatures = [(None,) * n_layers] + [iv.per_layer(n_layers) for iv in interventions]
    return plan_passes(signatures, reuse=prefix_reuse)


@torch.inference_mode()
def measure_interventions(lm: LoadedModel, texts: Sequence[str], interventions: Sequence[Intervention], *,
                          batch_size: int | None = None, max_length: int | None = None, prefix_reuse: bool = True,
                          progress: bool | None = None) -> SurgeryMeasures:
    """``m = measure_interventions(lm, texts, [Intervention.skip(3), Intervention.swap(5)])``: per text, the
    intact model's mean NLL and, per intervention, its NLL, KL, top-1 agreement and final-state cosine
    (:class:`InterventionMeasures`). ``ValueError`` for a block number the model does not have and
    ``ExtractionError`` for a text too long or of one token, both before any pass; ``ExtractionError`` for a
    NaN or inf NLL, naming the text and the first layer where it starts."""
    model = lm.model
    n_layers = len(decoder_layers(model))
    jobs = distinct(interventions)
    for intervention in jobs:
        intervention.check(n_layers)
    plan = surgery_plan(n_layers, jobs, prefix_reuse)
    ids = encode(lm, texts, max_length, min_tokens=2)
    # On a GPU a batch's logits, the intact model's log-probabilities and probabilities, and the float32 chunks
    # that compare them live at once, beside the kept streams; a CPU's budget is a speed setting (its memory
    # holds four copies of CPU_TOKEN_BUDGET tokens' logits easily), and one batch per pass saves per-pass overhead.
    budget = memory_budget(model, lm.info.vocab_size, kept_states=plan.peak_states)
    if next(model.parameters()).device.type == "cuda":
        budget = max(1, budget // 4)
    batches = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget)
    n = len(texts)
    intact_nll, n_scored = np.zeros(n), np.zeros(n, dtype=np.int64)
    out = [{name: np.zeros(n) for name in ("nll", "kl", "agreement", "cosine")} for _ in jobs]
    head = model.get_output_embeddings()
    device = input_device(model)
    blocks = decoder_layers(model)
    as_tuple = blocks_return_tuples(model)
    work = [(index, p) for index in batches for p in plan.passes]
    shown = steps(work, f"surgery {lm.info.name}", "pass") if progress is not False else work
    kept: dict[int, torch.Tensor] = {}
    for index, p in shown:
        if p.job == 0:
            batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        iv = jobs[p.job - 1] if p.job else None
        by_layer = {k: [s for s, layer in p.keep.items() if layer == k] for k in set(p.keep.values())}

        def keep(k: int, hidden: torch.Tensor, _as_tuple: bool, by_layer=by_layer) -> None:
            for stream in by_layer[k]:
                kept[stream] = hidden.clone()

        with contextlib.ExitStack() as stack:
            stack.enter_context(keep_outputs(blocks, by_layer, keep))
            if iv is not None:  # first: the stand-ins replace the pruned blocks below the start too
                stack.enter_context(intervened(lm, iv))
            if p.start:
                stack.enter_context(stand_ins(blocks, p.start, kept[p.source], as_tuple))
            logits, final = _pass(lm, batch, head)
            if iv is None:
                intact = reference(logits, final, batch)
                nll_sum, count = intact.nll_sum, intact.count
            else:
                compared = compare(intact, logits, final)
                nll_sum = compared.pop("nll_sum")
            del logits, final
            rerun = (lambda row, batch=batch: rerun_for_bad_layer(lm, batch, row)) if not p.start else None
            check_finite(lm, texts, batch.index, bad_nll=~torch.isfinite(nll_sum), first_bad_layer=rerun)
        for stream in p.free:
            kept.pop(stream, None)
        nll = (nll_sum / count).cpu().numpy()
        if iv is None:
            intact_nll[batch.index], n_scored[batch.index] = nll, count.cpu().numpy()
            continue
        slot = out[p.job - 1]
        slot["nll"][batch.index] = nll
        for name, values in compared.items():
            slot[name][batch.index] = values.cpu().numpy()
    results = tuple(InterventionMeasures(iv, **slot) for iv, slot in zip(jobs, out, strict=True))
    return SurgeryMeasures(intact_nll, n_scored, results, plan)


def _pass(lm: LoadedModel, batch: Batch, head: nn.Module | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass of ``batch`` as the model stands: logits (B, T, V) and final hidden states (B, T, d)."""
    final: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda _m, args: final.append(args[0])) if head is not None else None
    try:
        out = lm.model(**batch.model_inputs(), use_cache=False, output_hidden_states=head is None)
    finally:
        if handle is not None:
            handle.remove()
    return out.logits, (final[0] if final else out.hidden_states[-1])
