"""One batched forward pass per text: every layer's pooled vectors and the text's NLL.

    lm = load_model("smollm2-135m")
    acts = extract(lm, ["A cat sat.", "A dog ran."])           # cached under $LAYERSCOPE_CACHE
    acts.pooled["mean"][:, 5]                                   # (2, 576): hidden state 5, read from disk alone
    acts.pooled["mean"].shape                                   # (2, 31, 576), a LayerStack
    acts.pre_norm["mean"].shape                                 # (2, 576): last block, before the final norm
    acts = extract(lm, texts, layers=[0, 15, 30])              # pool and store only these hidden states
    acts = extract(lm, texts, compat="notebooks", cache=False)       # the notebooks' token-0 rule

Texts are tokenized one by one (as a single-text call would), sorted by length and run in
batches planned by memory (a token budget from the device; ``batch_size`` fixes the texts per
batch by hand). Hooks hand over each hidden state as the model makes it (:mod:`.capture`); it is
pooled right away, so a batch's token states of all layers never exist at once (except those the
``mean_no_massive`` pooling keeps until the pass ends, its token flags coming from every block; on a CPU only
until the flags settle, :mod:`.no_massive`). Besides
transformers' hidden states (the last one is after the model's final norm), the last decoder
block's output before that norm is pooled the same ways into ``acts.pre_norm``.

Pooled vectors go batch by batch into a layer-major store on disk (:mod:`.store`), keyed by a
fingerprint of the weights, hub revision, dtype, device type, token ids and settings; a second call
reads it, a killed call resumes from the last finished batch, and analyses read one layer at a time.
The batch plan is not in the fingerprint: another batch size reuses the store. Batching changes a
number only by float rounding (texts padded to another width go through matmuls of another shape): on
CPU in float32 pooled vectors agree to about 1e-6 relatively, and a rerun with another batch size reads
the stored ones. A CUDA out-of-memory error halves the batch and tries again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from ...errors import ExtractionError
from ...models.info import input_device
from ...models.load import LoadedModel
from ...modes import NOTEBOOKS, OLD_NOTEBOOKS, notebooks_alias
from ...paths import activations_dir
from ...progress import steps
from ...provenance import sha256_json
from ..cache.store import LayerStore, Layout
from .activations import Activations, ExtractSettings, ExtractStats
from .batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_ranges
from .capture import PRE_NORM, capture_states
from .guards import check_finite, encode
from .head import head_matches, head_only_last
from .no_massive import EarlyPlan, NoMassive
from .pipeline import SCALARS, Packing, Writer
from .pooling import ALL_POOLINGS, Pooler, pooling_masks, token_nll
from .scratch import Scratch, for_device

log = logging.getLogger(__name__)

FORMAT_VERSION = 4
"""Bump when stored arrays would no longer match what this code computes (2: pre-norm arrays stored; 3: the
layer-major store of :mod:`.store`, with the batch plan left out of the fingerprint; 4: a journal of per-chunk
XXH3 checksums, checked when read, :mod:`.journal`). An entry of an older format is never opened: the fingerprint
names another folder, and is computed again."""

STORE_DTYPES = ("float32", "float16")


def extract(
    lm: LoadedModel,
    texts: Sequence[str],
    *,
    poolings: Sequence[str] = ALL_POOLINGS,
    layers: Sequence[int] | None = None,
    compat: str | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    padding_side: str = "right",
    store_dtype: str = "float32",
    cache: bool | str | Path = True,
    progress: bool | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> Activations:
    """Run ``texts`` through ``lm`` once and keep, per text, the pooled vectors of its hidden states and its NLL.

    ``poolings``: any of ``POOLINGS`` (mean, last, first) and ``CHECK_POOLINGS`` (mean_no_pos0,
    mean_no_massive); all five by default. ``layers``: the hidden states to pool and store (0 = embeddings ..
    n_layers; ``None``: all). ``batch_size``: texts per batch (``None``: planned from the device's memory).
    ``store_dtype``: ``"float16"`` halves the store on disk (vectors are read back as float32).

    ``cache``: ``True`` for ``$LAYERSCOPE_CACHE/activations``, a folder, or ``False`` (a temp folder, removed
    when the result is garbage). ``progress``: ``None`` shows a bar only on a terminal. ``on_batch(done, total)``
    is called after each batch that was computed and stored (from the thread that writes the store).
    """
    settings = _validate(lm, texts, poolings, layers, compat, batch_size, max_length, padding_side, store_dtype)
    texts = list(texts)
    start = time.perf_counter()
    ids = encode(lm, texts, max_length, min_tokens=2)  # every text fits the model and has a next token
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")  # store order: longest first, whatever the batch plan
    fingerprint = sha256_json({
        "format": FORMAT_VERSION, "weights": lm.info.weights_hash, "revision": lm.info.revision,
        "dtype": lm.info.dtype, "device": torch.device(lm.info.device).type, "texts": sha256_json(texts),
        "token_ids": sha256_json(ids), "settings": _keyed(settings),
    })
    layout = Layout(n_texts=len(texts), n_states=lm.info.n_layers + 1, d=lm.info.hidden_size,
                    layers=settings.layers, poolings=settings.poolings, store_dtype=settings.store_dtype)
    store = _open_store(cache, fingerprint, lm, settings, layout, order)
    job = _Job(lm, texts, ids, order, lengths, settings, batch_size)
    with store.locked():
        reused = store.batches
        computed = job.compute(store, store.missing(), progress, on_batch, reused)
    store.heal = job.healer()
    acts = Activations(
        texts=texts, pooled={p: store.pooled(p) for p in settings.poolings},
        pre_norm=store.pre_norm(),
        nll_sum=store.read_rows("nll_sum"), n_scored=store.read_rows("n_scored"),
        n_tokens=store.read_rows("n_tokens"), settings=settings, model=lm.info, fingerprint=fingerprint,
    )
    healed = job.healed[0]
    stats = ExtractStats(batches=reused + computed, batches_computed=computed + healed,
                         batches_reused=reused - healed, seconds=time.perf_counter() - start,
                         store_wait_s=job.store_times[0], store_write_s=job.store_times[1])
    log.info("extracted %d texts in %d batches (%d reused) in %.1fs", len(texts), stats.batches,
             stats.batches_reused, stats.seconds)
    return dataclasses.replace(acts, stats=stats)


@dataclasses.dataclass
class _Job:
    """What one :func:`extract` call computes: the texts' token ids in store ``order``, and how."""

    lm: LoadedModel
    texts: list[str]
    ids: list[list[int]]
    order: np.ndarray
    lengths: np.ndarray
    settings: ExtractSettings
    batch_size: int | None
    healed: list[int] = dataclasses.field(default_factory=lambda: [0])
    """[stored batches found damaged and computed again], shared with the store's healer."""
    store_times: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.0])
    """[seconds the passes waited for the writer, seconds it wrote] (:class:`.pipeline.Writer`)."""

    def compute(self, store: LayerStore, todo: np.ndarray, progress: bool | None = False,
                on_batch: Callable[[int, int], None] | None = None, reused: int = 0) -> int:
        """Compute and store the rows ``todo`` (store order), batch after batch through :class:`.pipeline.Writer`;
        returns the planned batches computed."""
        lm, settings = self.lm, self.settings
        device = input_device(lm.model)
        kept = len(settings.layers) + 1 if "mean_no_massive" in settings.poolings else 0
        ranges = planned_ranges(lm, self.lengths[self.order], todo, self.batch_size, kept)
        if not ranges:
            return 0
        backoff = Backoff(self.batch_size or MAX_TEXTS_PER_BATCH)
        total = reused + len(ranges)
        shown = (steps(ranges, f"extract {lm.info.name}", "batch", total, reused) if progress is not False
                 else ranges)
        stored = itertools.count(reused + 1)
        report = (lambda: on_batch(next(stored), total)) if on_batch else None
        packing = Packing(settings.poolings, settings.layers, lm.info.hidden_size, lm.info.n_layers + 1)
        scratch = for_device(device)
        plan = EarlyPlan()  # mean_no_massive's early pooling, for every batch of this call
        max_rows = max(b - a for a, b in ranges)
        check = functools.partial(_check_host, lm, self.texts)
        with Writer(store, packing, device, max_rows, check, report) as writer:
            for lo, hi in shown:
                for a, b in backoff.pieces(lo, hi):
                    index = self.order[a:b]
                    batch = collate([self.ids[i] for i in index], index, pad_id(lm.tokenizer),
                                    settings.padding_side)
                    out = backoff.run(lambda batch=batch: run_batch_packed(lm, batch, settings, packing, scratch,
                                                                           plan), lm)
                    if out is not None:  # None: out of memory, run again in halves
                        writer.put(a, index, out)
                writer.planned_done()
        self.store_times[0] += writer.waited
        self.store_times[1] += writer.busy
        return len(ranges)

    def healer(self) -> Callable[[LayerStore, np.ndarray], None]:
        """``store.heal``: compute rows again while the model is alive (held weakly: the store never keeps it, nor
        itself, so a temporary store is removed as soon as nothing reads it)."""
        lm = weakref.ref(self.lm)
        job = dataclasses.replace(self, lm=None)

        def heal(store: LayerStore, todo: np.ndarray) -> None:
            model = lm()
            if model is None:
                raise ExtractionError(f"stored activations in {store.folder} were damaged and the model that made "
                                      "them is gone: run the extraction again")
            job.lm = model
            try:
                job.healed[0] += job.compute(store, todo)
            finally:
                job.lm = None

        return heal


def planned_ranges(lm: LoadedModel, lengths: np.ndarray, todo: np.ndarray, batch_size: int | None,
                   kept: int) -> list[tuple[int, int]]:
    """``ranges = planned_ranges(lm, lengths, todo, None, kept)``: extract's batches, ``(start, stop)`` rows of
    ``lengths`` (token counts sorted longest first) still ``todo``, from the device's memory budget with ``kept``
    token states held per batch (:func:`.batching.plan_ranges`; on CUDA with :data:`GPU_PLAN`)."""
    budget = memory_budget(lm.model, lm.info.vocab_size, kept)
    cuda = input_device(lm.model).type == "cuda"
    return plan_ranges(lengths, todo, batch_size, budget, **(GPU_PLAN if cuda else {}))


GPU_PLAN = {"min_batches": 4, "max_padding": 1.25}
"""On CUDA: at least this many batches (so copies and writes overlap the next forward pass), and at most this many
padded tokens per real one (the lengths are sorted, so this costs few batches)."""


def _check_host(lm: LoadedModel, texts: Sequence[str], index: np.ndarray, bad_layers: np.ndarray,
                bad_nll: np.ndarray) -> None:
    """The finiteness check of one batch, on its flags copied to the host (the writer thread runs it)."""
    if bad_layers.any() or bad_nll.any():
        check_finite(lm, texts, index, bad_layers=torch.from_numpy(bad_layers), bad_nll=torch.from_numpy(bad_nll))


class Backoff:
    """Halve the batch after an out-of-memory error, for the rest of the extraction.

        backoff = Backoff(cap=1024)
        for a, b in backoff.pieces(lo, hi):      # (lo, hi) in pieces of at most backoff.cap rows
            out = backoff.run(lambda: work(a, b), lm)   # None after an OOM: that piece comes again, halved
    """

    def __init__(self, cap: int):
        self.cap = cap
        self.oom = 0
        """Out-of-memory errors caught so far."""

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        a = lo
        while a < hi:
            b = min(hi, a + self.cap)
            self._size, self._failed = b - a, False
            yield a, b
            if not self._failed:
                a = b

    def run(self, work: Callable[[], dict[str, np.ndarray]], lm: LoadedModel) -> dict[str, np.ndarray] | None:
        try:
            return work()
        except torch.OutOfMemoryError:
            rows = self._size  # the batch that failed, which may hold fewer texts than the cap
            self.oom += 1
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if rows <= 1:
                raise ExtractionError(f"model {lm.info.name} ran out of device memory on a batch of one text; "
                                      "pass --max-length to truncate long texts, use --dtype bfloat16, or a "
                                      "device with more memory") from None
            self.cap = max(1, rows // 2)
            self._failed = True
            log.warning("out of device memory on a batch; trying again with at most %d texts per batch", self.cap)
            return None


@torch.inference_mode()
def run_batch_packed(lm: LoadedModel, batch: Batch, settings: ExtractSettings, packing: Packing,
                     scratch: Scratch | None = None, plan: EarlyPlan | None = None) -> torch.Tensor:
    """One forward pass over ``batch`` (on the host), its results packed on the device by ``packing``
    (:class:`.pipeline.Packing`): every pooled vector, each text's NLL, counts and finiteness flags. No host sync
    but what the model's own forward does. ``scratch`` (:class:`.scratch.Scratch`, on a CPU): the logits and the
    states kept for ``mean_no_massive`` go into its reused buffers instead of fresh memory each batch. ``plan``
    (:class:`.no_massive.EarlyPlan`, with ``scratch``): states after the massive flags settle are pooled at once
    instead of kept (the batch runs again, keeping every state, if a later block flags a new token)."""
    host = batch
    batch = batch.to(input_device(lm.model), non_blocking=True)
    device = batch.input_ids.device
    n_layers = lm.info.n_layers
    slot = {k: i for i, k in enumerate(settings.layers)} | {PRE_NORM: len(settings.layers)}
    deferred = "mean_no_massive" in settings.poolings
    masks = pooling_masks(batch, lm.tokenizer.bos_token_id, settings.compat)
    packed = torch.empty(packing.nbytes(len(host.index)), dtype=torch.uint8, device=device)
    vectors, scalars = packing.views(packed, len(host.index))  # (P, V, B, d) float32, (B, 4 + n_states) float64
    where = {p: i for i, p in enumerate(settings.poolings)}
    at_once = [p for p in settings.poolings if p != "mean_no_massive"]  # pooled as each state arrives
    late = (NoMassive(batch, lm.tokenizer.bos_token_id, settings.compat, scratch, plan, slots=len(slot))
            if deferred else None)
    pooler = Pooler(batch, masks, at_once)

    def on_state(key, hidden):
        hidden = hidden.to(device)
        finite = None  # whether the first Pooler found the state finite (float32, CPU): the late one reuses it
        if key in slot and at_once:
            finite = pooler(hidden, {p: vectors[where[p], slot[key]] for p in at_once})
        if deferred:
            if key == PRE_NORM or 1 <= key < n_layers:  # a decoder block's output: its flags now, while it is read
                late.block(hidden)
            if key in slot:
                late.state(hidden, vectors[where["mean_no_massive"], slot[key]], finite)

    hooked = sorted(set(settings.layers) | (set(range(1, n_layers)) if deferred else set()))
    own_head = head_matches(lm, batch)
    with capture_states(lm, hooked, on_state), head_only_last(lm) if own_head else contextlib.nullcontext() as head:
        out = lm.model(**batch.model_inputs(), use_cache=False)
    if deferred and not late.finish():  # a block flagged a new token after states were pooled early: again
        del out, head
        return run_batch_packed(lm, host, settings, packing, scratch, plan)
    nll_sum, n_scored = head.nll(batch, host=host, scratch=scratch) if own_head else token_nll(out.logits, batch)
    del out, head
    scalars[:, 0] = nll_sum
    scalars[:, 1] = n_scored
    scalars[:, 2] = batch.attention_mask.sum(dim=1)
    scalars[:, 3] = ~torch.isfinite(nll_sum)
    # (B, V) a slot not finite: a vector's sum is finite exactly when its values are (one read, no bool copy), or
    # they overflow float32 when added (|values| near 1e35), which the pooling already counts as not finite
    scalars[:, len(SCALARS):] = (~torch.isfinite(vectors.sum(dim=-1))).any(dim=0).T
    return packed


def run_batch(lm: LoadedModel, batch: Batch, settings: ExtractSettings,
              texts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """One forward pass over ``batch``; arrays in the batch's row order: ``pooled_<p>`` (n_stored_layers, B, d),
    ``prenorm_<p>`` (B, d), ``nll_sum``, ``n_scored``, ``n_tokens`` (B,). ``ExtractionError`` naming the layer
    and the text (from ``texts``, the caller's list) if a pooled vector or NLL is not finite."""
    packing = Packing(settings.poolings, settings.layers, lm.info.hidden_size, lm.info.n_layers + 1)
    host = run_batch_packed(lm, batch, settings, packing).cpu().numpy()
    rows = len(batch.index)
    _check_host(lm, texts, batch.index, *packing.flags(host, rows))
    return {key: np.array(value) for key, value in packing.arrays(host, rows).items()}


def _keyed(settings: ExtractSettings) -> dict:
    """The settings as the cache key holds them: the notebooks' mode under ``"seed"``, its name up to 0.4.0, so
    the entries cached before the rename stay hits (the key changes no number)."""
    key = settings.to_dict()
    return {**key, "compat": OLD_NOTEBOOKS} if key["compat"] == NOTEBOOKS else key


def _validate(lm, texts, poolings, layers, compat, batch_size, max_length, padding_side,
              store_dtype) -> ExtractSettings:
    if isinstance(texts, str) or not len(texts):
        raise ExtractionError("extract needs a non-empty list of texts")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ExtractionError(f"text {i} is {text!r}; every text must be a non-empty string")
    unknown = set(poolings) - set(ALL_POOLINGS)
    if unknown or not poolings:
        raise ExtractionError(f"unknown pooling {sorted(unknown)}; choose from {', '.join(ALL_POOLINGS)}")
    compat = notebooks_alias(compat, "compat")
    if compat not in (None, NOTEBOOKS):
        raise ExtractionError(f"unknown compat mode {compat!r}; use None (corrected) or {NOTEBOOKS!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ExtractionError(f"batch size must be a positive integer (or None: planned from memory), "
                              f"got {batch_size!r}")
    if max_length is not None and max_length < 2:
        raise ExtractionError(f"max_length must be at least 2 tokens, got {max_length}")
    if padding_side not in ("left", "right"):
        raise ExtractionError(f"padding side must be 'left' or 'right', got {padding_side!r}")
    if store_dtype not in STORE_DTYPES:
        raise ExtractionError(f"unknown store dtype {store_dtype!r}; use {' or '.join(STORE_DTYPES)}")
    n_states = lm.info.n_layers + 1
    if layers is None:
        layers = range(n_states)
    layers = tuple(sorted({int(k) for k in layers}))
    if not layers or layers[0] < 0 or layers[-1] >= n_states:
        raise ExtractionError(f"layers {list(layers)} are not hidden states of model {lm.info.name}: choose from "
                              f"0 (embeddings) to {n_states - 1}")
    return ExtractSettings(poolings=tuple(poolings), compat=compat, max_length=max_length,
                           padding_side=padding_side, layers=layers, store_dtype=store_dtype)


def _open_store(cache, fingerprint: str, lm: LoadedModel, settings: ExtractSettings, layout: Layout,
                order: np.ndarray) -> LayerStore:
    if cache is False or cache is None:
        return LayerStore.temporary(layout, order)
    root = activations_dir() if cache is True else Path(cache)
    meta = {"format": FORMAT_VERSION, "fingerprint": fingerprint, "model": lm.info.to_dict(),
            "settings": settings.to_dict(), "n_texts": layout.n_texts}
    return LayerStore.open(root / fingerprint[:2] / fingerprint, layout, order, meta)
