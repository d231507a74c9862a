"""The atlas pass waits on its device a bounded number of times per batch, however many layers the model has.

A host sync (the host waiting for the device's queued work) is counted on the CPU by wrapping every call that
would make one on a GPU: ``Tensor.cpu``, ``.item``, ``.tolist``, ``bool(t)``, ``int(t)``, ``float(t)``,
``nonzero`` (its size is data), a boolean-mask index (``x[mask]``) and ``torch.cuda.synchronize``, in the main
thread only (``.numpy()`` refuses a CUDA tensor: never a sync). The model's own forward pass makes some too
(transformers' attention-mask code), so the bound is on what the atlas adds to a bare forward of the same batches.
Calls made inside
:mod:`layerscope.engine.forward.massive` are left out: ``massive_mask`` is a black box whose CPU path finds a rare
undecided median with ``nonzero`` (its CUDA path has no sync).

Per batch the atlas adds one copy of every sum to the host (``.cpu()`` of one packed buffer, the finiteness flags
and the prompt entropy's Gram matrices included; the Grams are decomposed on a worker thread, which is not
counted and never touches the device). What no wrapper sees on the CPU was counted on an H200 with
``torch.cuda.set_sync_debug_mode`` before the check joined the copy: 4 batches of 32 texts of an 8B-shaped model
made 8 syncs in a bare forward (transformers' mask code, 2 per batch) and 24 (2 layers) or 40 (33 layers) in the
atlas pass: 2 per batch on top of the forward's (the check and the copy), and once per pass the last copy, the
means, the Ritz directions and the spectra, whose ``eigh`` / ``eigvalsh`` calls were split by memory (more of
them for more layers). The spectra are now one batched block power iteration with one copy back
(:func:`layerscope.engine.atlas.moments.top_eigenvalues`).
"""

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.engine.forward.batching import collate, pad_id, tokenize

ADDED_PER_BATCH = 1
"""Syncs the atlas may add to a bare forward per batch: the one copy back, the finiteness check in it."""


def bare(lm, batch_size):
    ids = tokenize(lm.tokenizer, tiny.TEXTS)
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            rows = np.arange(start, min(start + batch_size, len(ids)))
            batch = collate([ids[i] for i in rows], rows, pad_id(lm.tokenizer))
            lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)


def per_batch(syncs, run) -> tuple[int, int]:
    """(syncs of 3 batches, syncs per pass besides) from passes of 6 and 3 batches over the 11 texts."""
    six, three = syncs.run(lambda: run(2)), syncs.run(lambda: run(4))
    return six - three, 2 * three - six


@pytest.mark.parametrize("n_layers", [3, 6])
def test_syncs_per_batch_are_bounded_and_do_not_grow_with_layers(syncs, n_layers):
    lm = tiny.tiny_lm("llama", adds_bos=True, n_layers=n_layers)
    atlas_pass(lm, tiny.TEXTS[:2], progress=False)  # the final norm's probe, once per model
    forward, _ = per_batch(syncs, lambda size: bare(lm, size))
    atlas, fixed = per_batch(syncs, lambda size: atlas_pass(lm, tiny.TEXTS, batch_size=size, progress=False))
    assert forward <= 2 * 3, syncs.calls  # transformers' mask code: bool() of a tensor once or twice per batch
    assert atlas - forward <= ADDED_PER_BATCH * 3, (atlas, forward, syncs.calls)
    assert fixed <= 12, (fixed, syncs.calls)  # once per pass: the means, the top-1 shares, the per-text lens sums


def test_the_count_does_not_depend_on_the_layers(syncs):
    counts = []
    for n_layers in (3, 6):
        lm = tiny.tiny_lm("llama", adds_bos=True, n_layers=n_layers)
        atlas_pass(lm, tiny.TEXTS[:2], progress=False)
        counts.append(syncs.run(lambda lm=lm: atlas_pass(lm, tiny.TEXTS, batch_size=2, progress=False)))
    assert counts[0] == counts[1], counts


def test_the_counter_sees_a_sync_per_layer(syncs):
    """The wrappers catch what the atlas avoids: a per-layer ``.cpu()``, ``bool()`` and mask index."""
    x = torch.arange(6.0)

    def per_layer():
        for _ in range(4):
            x.sum().cpu()
            bool(x.any())
            _ = x[x > 2]

    assert syncs.run(per_layer) == 12
