"""One batched forward pass per text: every layer's pooled vectors and the text's NLL.

    lm = load_model("smollm2-135m")
    acts = extract(lm, ["A cat sat.", "A dog ran."])           # cached under $LAYERSCOPE_CACHE
    acts.pooled["mean"].shape                                   # (2, 31, 576)
    acts.pre_norm["mean"].shape                                 # (2, 576): last block, before the final norm
    acts = extract(lm, texts, compat="seed", cache=False)       # the notebooks' token-0 rule

Texts are tokenized one by one (as a single-text call would), sorted by length and
run in batches; each batch's hidden states are pooled right away, so token-level
states never outlive their batch. Besides transformers' hidden states (the last one is
after the model's final norm), a hook keeps the last decoder block's output before that
norm, pooled the same ways into ``acts.pre_norm``. Finished batches are cached on disk under a
fingerprint of the weights, hub revision, dtype, device type, token ids and settings; a
second call loads them, and a killed call resumes from the last finished batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from ..errors import ExtractionError
from ..models.info import decoder_layers, input_device
from ..models.load import LoadedModel
from ..paths import activations_dir
from ..progress import steps
from ..provenance import sha256_json
from .activations import Activations, ExtractSettings, ExtractStats
from .batching import Batch, collate, pad_id, plan_batches, token_budget
from .cache import BatchStore
from .guards import check_finite, encode
from .massive import block_massive
from .pooling import ALL_POOLINGS, pool, pooling_masks, token_nll

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Bump when stored batches would no longer match what this code computes (2: pre-norm arrays stored)."""


def extract(
    lm: LoadedModel,
    texts: Sequence[str],
    *,
    poolings: Sequence[str] = ALL_POOLINGS,
    compat: str | None = None,
    batch_size: int = 16,
    max_length: int | None = None,
    padding_side: str = "right",
    cache: bool | str | Path = True,
    progress: bool | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> Activations:
    """Run ``texts`` through ``lm`` once and keep, per text, every layer's pooled vectors and NLL.

    ``poolings``: any of ``POOLINGS`` (mean, last, first) and ``CHECK_POOLINGS`` (mean_no_pos0,
    mean_no_massive); all five by default.

    ``cache``: ``True`` for ``$LAYERSCOPE_CACHE/activations``, a folder, or ``False``.
    ``progress``: ``None`` shows a bar only on a terminal. ``on_batch(done, total)`` is
    called after each batch that was computed and stored.
    """
    settings = _validate(texts, poolings, compat, batch_size, max_length, padding_side)
    texts = list(texts)
    start = time.perf_counter()
    ids = encode(lm, texts, max_length, min_tokens=2)  # every text fits the model and has a next token
    batches = plan_batches([len(x) for x in ids], batch_size, token_budget(lm.info.vocab_size))
    fingerprint = sha256_json({
        "format": FORMAT_VERSION, "weights": lm.info.weights_hash, "revision": lm.info.revision,
        "dtype": lm.info.dtype, "device": torch.device(lm.info.device).type, "texts": sha256_json(texts),
        "token_ids": sha256_json(ids), "settings": settings.to_dict(),
        "batches": sha256_json([b.tolist() for b in batches]),
    })
    store = _open_store(cache, fingerprint, lm, settings, len(texts))
    with store.locked() if store else contextlib.nullcontext():
        parts = _reusable(store, batches, lm, settings) if store else {}
        todo = [b for b in range(len(batches)) if b not in parts]
        shown = steps(todo, f"extract {lm.info.name}", "batch", len(batches), len(parts)) if progress is not False \
            else todo
        for b in shown:
            batch = collate([ids[i] for i in batches[b]], batches[b], pad_id(lm.tokenizer), padding_side)
            parts[b] = run_batch(lm, batch, settings, texts=texts)
            if store:
                store.put(b, parts[b])
            if on_batch:
                on_batch(len(parts), len(batches))
    acts = _assemble(texts, batches, parts, lm, settings, fingerprint)
    stats = ExtractStats(batches=len(batches), batches_computed=len(todo),
                         batches_reused=len(batches) - len(todo), seconds=time.perf_counter() - start)
    log.info("extracted %d texts in %d batches (%d reused) in %.1fs", len(texts), len(batches),
             stats.batches_reused, stats.seconds)
    return dataclasses.replace(acts, stats=stats)


@torch.inference_mode()
def run_batch(lm: LoadedModel, batch: Batch, settings: ExtractSettings,
              texts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """One forward pass over ``batch``; arrays in the batch's row order. ``ExtractionError`` naming
    the layer and the text (from ``texts``, the caller's list) if a pooled vector or NLL is not finite."""
    batch = batch.to(input_device(lm.model))
    with pre_norm_capture(lm.model) as captured:
        out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
    device = batch.input_ids.device
    hidden = [h.to(device) for h in out.hidden_states]
    pre_norm = last_capture(captured, lm).to(device)
    massive = (block_massive(hidden, pre_norm, batch.attention_mask.bool())
               if "mean_no_massive" in settings.poolings else None)
    masks = pooling_masks(batch, lm.tokenizer.bos_token_id, settings.compat, massive)
    per_layer = [pool(h, batch, masks, settings.poolings) for h in hidden]
    pooled = {p: torch.stack([layer[p] for layer in per_layer], dim=1) for p in settings.poolings}
    pre_pooled = pool(pre_norm, batch, masks, settings.poolings)
    nll_sum, n_scored = token_nll(out.logits.to(device), batch)
    bad_layers = torch.stack([(~torch.isfinite(x)).any(dim=-1) for x in pooled.values()]).any(dim=0)
    bad_layers[:, -1] |= torch.stack([(~torch.isfinite(x)).any(dim=-1) for x in pre_pooled.values()]).any(dim=0)
    check_finite(lm, texts, batch.index, bad_layers=bad_layers, bad_nll=~torch.isfinite(nll_sum))
    arrays = {f"pooled_{p}": x.cpu().numpy() for p, x in pooled.items()}
    arrays.update({f"prenorm_{p}": x.cpu().numpy() for p, x in pre_pooled.items()})
    arrays["nll_sum"] = nll_sum.cpu().numpy()
    arrays["n_scored"] = n_scored.cpu().numpy()
    arrays["n_tokens"] = batch.attention_mask.sum(dim=1).cpu().numpy()
    return arrays


@contextlib.contextmanager
def pre_norm_capture(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """``with pre_norm_capture(model) as got: model(...)``; then ``last_capture(got, lm)`` is the last decoder
    block's output (B, T, d), the residual stream before the model's final norm. The hook is removed on exit."""
    got: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        got.append(output[0] if isinstance(output, (tuple, list)) else output)

    handle = decoder_layers(model)[-1].register_forward_hook(hook)
    try:
        yield got
    finally:
        handle.remove()


def last_capture(got: list[torch.Tensor], lm: LoadedModel) -> torch.Tensor:
    """The tensor :func:`pre_norm_capture` caught in the forward pass just run."""
    if not got:
        raise ExtractionError(f"model {lm.info.name} ran without calling its last decoder layer, so its output "
                              "before the final norm cannot be captured; layerscope supports decoder-only causal "
                              "LMs from transformers")
    return got[-1]


def _validate(texts, poolings, compat, batch_size, max_length, padding_side) -> ExtractSettings:
    if isinstance(texts, str) or not len(texts):
        raise ExtractionError("extract needs a non-empty list of texts")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ExtractionError(f"text {i} is {text!r}; every text must be a non-empty string")
    unknown = set(poolings) - set(ALL_POOLINGS)
    if unknown or not poolings:
        raise ExtractionError(f"unknown pooling {sorted(unknown)}; choose from {', '.join(ALL_POOLINGS)}")
    if compat not in (None, "seed"):
        raise ExtractionError(f"unknown compat mode {compat!r}; use None (corrected) or 'seed'")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ExtractionError(f"batch size must be a positive integer, got {batch_size!r}")
    if max_length is not None and max_length < 2:
        raise ExtractionError(f"max_length must be at least 2 tokens, got {max_length}")
    if padding_side not in ("left", "right"):
        raise ExtractionError(f"padding side must be 'left' or 'right', got {padding_side!r}")
    return ExtractSettings(poolings=tuple(poolings), compat=compat, batch_size=batch_size,
                           max_length=max_length, padding_side=padding_side)


def _open_store(cache, fingerprint: str, lm: LoadedModel, settings: ExtractSettings, n_texts: int) -> BatchStore | None:
    if cache is False or cache is None:
        return None
    root = activations_dir() if cache is True else Path(cache)
    meta = {"format": FORMAT_VERSION, "fingerprint": fingerprint, "model": lm.info.to_dict(),
            "settings": settings.to_dict(), "n_texts": n_texts}
    return BatchStore(root / fingerprint[:2] / fingerprint, meta)


def _reusable(store: BatchStore, batches: list[np.ndarray], lm: LoadedModel,
              settings: ExtractSettings) -> dict[int, dict[str, np.ndarray]]:
    """Stored batches that are intact and have exactly the arrays and shapes each batch needs."""
    found = {}
    for b, index in enumerate(batches):
        arrays = store.get(b)
        if arrays is None:
            continue
        expect = {f"pooled_{p}": (len(index), lm.info.n_layers + 1, lm.info.hidden_size) for p in settings.poolings}
        expect.update({f"prenorm_{p}": (len(index), lm.info.hidden_size) for p in settings.poolings})
        expect.update({k: (len(index),) for k in ("nll_sum", "n_scored", "n_tokens")})
        if {k: v.shape for k, v in arrays.items()} == expect and all(np.isfinite(v).all() for v in arrays.values()):
            found[b] = arrays  # a stored NaN (from before the finite check) is computed again, and reported
        else:
            store.discard(b)
    return found


def _assemble(texts, batches, parts, lm: LoadedModel, settings: ExtractSettings, fingerprint: str) -> Activations:
    order = np.concatenate(batches)

    def gather(key):
        stacked = np.concatenate([parts[b][key] for b in range(len(batches))])
        out = np.empty_like(stacked)
        out[order] = stacked
        return out
    return Activations(
        texts=texts, pooled={p: gather(f"pooled_{p}") for p in settings.poolings},
        pre_norm={p: gather(f"prenorm_{p}") for p in settings.poolings},
        nll_sum=gather("nll_sum"), n_scored=gather("n_scored"), n_tokens=gather("n_tokens"),
        settings=settings, model=lm.info, fingerprint=fingerprint,
    )
