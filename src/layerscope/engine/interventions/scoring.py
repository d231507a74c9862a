"""Next-token NLL of many texts, in batches, with nothing else kept; again and again for the same texts.

    nll_sum, n_scored = score_texts(lm, texts)     # (n,), (n,); mean NLL = nll_sum / n_scored

    scorer = Scorer(lm, texts)                     # tokenized and batched once: every pass has the same batches
    nll_sum, n_scored = scorer.score(keep={0: 5})  # a whole pass, keeping the stream entering layer 5 as stream 0
    nll_sum, n_scored = scorer.score(start=5, source=0)   # layers 0..4 hand over stream 0 (:mod:`.prefix`)
    sums, counts = scorer.score(start=5, source=0, copies=3, score_from=first)   # (3, n): 3 stacked copies
    scorer.drop([0])

Each pass runs the output head on the scored positions alone (:mod:`.head`: no logits at padding, at each text's
last token or before ``score_from``), the positions found on the host copy of the batch; a model whose head cannot
be split off that way (:func:`~.head.head_matches`) computes the full logits instead, the same numbers. On a CPU
the logits go into one buffer the scorer keeps for all its passes (:mod:`..forward.scratch`; at most
``head.CHUNK_BYTES``), so a pass does not page-fault a fresh tokens x vocabulary tensor in.

A kept stream is the output of one decoder block for every batch, in the model's dtype, held in host memory
(``scorer.state_bytes`` each). A pass started from it equals a whole pass exactly when the weights of the
layers below ``start`` are those of the pass that kept it: the caller's plan sees to that
(:mod:`.prefix_plan`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ...models.info import decoder_layers, input_device, text_config
from ...models.load import LoadedModel
from ..forward.batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_batches
from ..forward.guards import check_finite, encode, first_nonfinite_layer
from ..forward.head import head_matches, head_only_last
from ..forward.pooling import token_nll
from ..forward.scratch import for_device
from .prefix import keep_outputs, stand_ins


def score_texts(lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL (float64) and scored-token count per text; each equals a single-text
    ``outputs.loss`` times its count. ``ExtractionError`` before any forward pass for a text longer
    than the model's maximum positions or of one token, and for a NaN or inf NLL (naming layer and text)."""
    return Scorer(lm, texts, batch_size=batch_size, max_length=max_length).score()


class Scorer:
    """The texts' NLL under whatever weights the model holds at each call, on batches planned once."""

    def __init__(self, lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                 max_length: int | None = None):
        self.lm, self.texts = lm, texts
        ids = encode(lm, texts, max_length, min_tokens=2)
        plan = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH,
                            memory_budget(lm.model, lm.info.vocab_size))
        self.batches: list[Batch] = [collate([ids[i] for i in index], index, pad_id(lm.tokenizer)) for index in plan]
        self.blocks = decoder_layers(lm.model)
        param = next(lm.model.parameters())
        hidden = text_config(lm.model).hidden_size
        self.state_bytes = sum(b.input_ids.numel() for b in self.batches) * int(hidden) * param.element_size()
        """Host memory one kept stream takes (every batch's padded tokens x hidden size x the dtype's bytes)."""
        self._kept: dict[int, list[torch.Tensor]] = {}
        self._as_tuple = False
        self._scratch = for_device(input_device(lm.model))  # on a CPU: one logits buffer for every pass

    @torch.inference_mode()
    def score(self, start: int = 0, source: int | None = None, keep: dict[int, int] | None = None,
              watch: Callable[[Batch], contextlib.AbstractContextManager] | None = None, *,
              score_from: np.ndarray | None = None, copies: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Summed NLL and scored-token count per text, running decoder layers ``start``.. on kept stream
        ``source``; ``keep`` {stream id: layer k}: keep the stream entering layer k; ``watch(batch)``: a context
        entered around each batch's forward pass alone (the batch on the model's input device), e.g. to hook
        layers; the rerun that finds a non-finite layer runs outside it. ``score_from`` (n,) int: score each
        text's tokens from that position on (:func:`~.pooling.token_nll`'s ``start``; None: every one).
        ``copies``: each batch runs as that many stacked copies (:func:`stacked`: row c * B + i is copy c of
        row i, the kept stream repeated), and both results come back (copies, n); None: one, (n,)."""
        if start and source not in self._kept:
            raise ValueError(f"no kept stream {source} to start layer {start} from")
        if copies is not None and (keep or copies < 1):
            raise ValueError(f"copies={copies}: stack at least one copy, and keep no stream from stacked copies")
        keep = keep or {}
        for stream in keep:
            self._kept[stream] = []
        by_layer = {k: [s for s, layer in keep.items() if layer == k] for k in set(keep.values())}
        shape = (len(self.texts),) if copies is None else (copies, len(self.texts))
        nll_sum, n_scored = np.zeros(shape), np.zeros(shape, dtype=np.int64)
        device = input_device(self.lm.model)

        def kept(k: int, hidden: torch.Tensor, as_tuple: bool) -> None:
            self._as_tuple = as_tuple
            copy = hidden.detach().to("cpu", copy=True)
            for stream in by_layer[k]:
                self._kept[stream].append(copy)

        for b, cpu_batch in enumerate(self.batches):
            host = cpu_batch if copies is None else stacked(cpu_batch, copies)
            batch = host.to(device)
            begin = None if score_from is None else torch.as_tensor(np.asarray(score_from)[host.index])
            own_head = head_matches(self.lm, batch)  # (its probe passes run before any hook below is set)
            if begin is not None and not own_head:
                begin = begin.to(device)  # before the forward: a copy after it would wait for the device
            with (keep_outputs(self.blocks, by_layer, kept), self._starting(start, source, b, device, copies),
                  watch(batch) if watch else contextlib.nullcontext(),
                  head_only_last(self.lm) if own_head else contextlib.nullcontext() as head):
                out = self.lm.model(**batch.model_inputs(), use_cache=False)
            if own_head:  # the head runs on the scored positions alone, found on the host copy of the batch
                total, count = head.nll(batch, host=host, start=begin, scratch=self._scratch)
            else:
                total, count = token_nll(out.logits.to(batch.input_ids.device), batch, start=begin)
            del out, head
            check_finite(self.lm, self.texts, batch.index, bad_nll=~torch.isfinite(total),
                         first_bad_layer=lambda row, batch=batch: rerun_for_bad_layer(self.lm, batch, row))
            rows = len(cpu_batch.index)
            nll_sum[..., cpu_batch.index] = total.cpu().numpy().reshape(shape[:-1] + (rows,))
            n_scored[..., cpu_batch.index] = count.cpu().numpy().reshape(shape[:-1] + (rows,))
        return nll_sum, n_scored

    def _starting(self, start: int, source: int | None, b: int, device, copies: int | None = None):
        if not start:
            return contextlib.nullcontext()
        hidden = self._kept[source][b].to(device)
        if copies is not None and copies > 1:
            hidden = hidden.repeat(copies, 1, 1)
        return stand_ins(self.blocks, start, hidden, self._as_tuple)

    def drop(self, streams: Sequence[int]) -> None:
        """Forget kept streams."""
        for stream in streams:
            self._kept.pop(stream, None)

    @property
    def kept_bytes(self) -> int:
        """Host memory the kept streams take now."""
        tensors = {id(t): t for per_batch in self._kept.values() for t in per_batch}
        return sum(t.numel() * t.element_size() for t in tensors.values())


def stacked(batch: Batch, copies: int) -> Batch:
    """``copies`` copies of ``batch`` stacked into one (row c * B + i: copy c of row i; ``index`` tiled)."""
    tensors = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids", "first", "last")}
    return Batch(index=np.tile(batch.index, copies),
                 **{k: v.repeat(copies, *[1] * (v.dim() - 1)) for k, v in tensors.items()})


def rerun_for_bad_layer(lm: LoadedModel, batch: Batch, row: int) -> int | None:
    """Run row ``row`` of ``batch`` again, whole and with hidden states, to find where NaN or inf starts."""
    keep = batch.attention_mask[row].bool()
    inputs = {k: v[row : row + 1, keep] for k, v in batch.model_inputs().items()}
    out = lm.model(**inputs, output_hidden_states=True, use_cache=False)
    return first_nonfinite_layer(out.hidden_states, torch.ones_like(inputs["input_ids"], dtype=torch.bool))
