"""The prompt entropy's host decompositions run on a worker thread while the next batch's forward pass runs; their
results land at their texts whatever the timing, and their errors reach the caller. The finiteness check rides in
the batch's one copy and still names layer and text, also in the batch that fixes the Ritz directions."""

import threading
import time

import numpy as np
import pytest
import torch

import tiny
from layerscope import ExtractionError
from layerscope.engine.atlas import sums as atlas_sums
from layerscope.engine.atlas.moments import Moments
from layerscope.engine.atlas.stream import atlas_pass

TEXTS = tiny.TEXTS[:6]
"""Three batches of two."""


def wrapped_from_host(monkeypatch, before):
    """Replace the worker's ``from_host`` by one that calls ``before(job)`` first (job 0, 1, ... in submission
    order) and records the thread it ran on."""
    real, jobs = atlas_sums.from_host, []

    def from_host(arrays, d):
        job = len(jobs)
        jobs.append(threading.current_thread().name)
        before(job)
        return real(arrays, d)

    monkeypatch.setattr(atlas_sums, "from_host", from_host)
    return jobs


def forwards_started(lm) -> tuple[threading.Condition, list[int]]:
    """A condition notified, and a count raised, each time a forward pass of ``lm`` starts."""
    started, condition = [0], threading.Condition()

    def pre_hook(_module, _args):
        with condition:
            started[0] += 1
            condition.notify_all()

    lm.model.register_forward_pre_hook(pre_hook)
    return condition, started


def test_each_batch_is_decomposed_during_the_next_forward(monkeypatch):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    want = atlas_pass(lm, TEXTS, batch_size=2, progress=False).texts.entropy
    condition, started = forwards_started(lm)
    overlapped = []

    def wait_for_the_next_forward(job):  # batch `job`'s forward was number job + 1; the next is job + 2
        if job < 2:
            with condition:
                overlapped.append(condition.wait_for(lambda: started[0] >= job + 2, timeout=30))

    jobs = wrapped_from_host(monkeypatch, wait_for_the_next_forward)
    got = atlas_pass(lm, TEXTS, batch_size=2, progress=False).texts.entropy
    assert len(jobs) == 3 and all(name != threading.main_thread().name for name in jobs), jobs
    assert overlapped == [True, True]  # a decomposition on the main thread would wait here 30 s and fail
    np.testing.assert_array_equal(got, want)


def test_a_slow_first_batch_still_lands_at_its_texts(monkeypatch):
    lm = tiny.tiny_lm("gpt2", adds_bos=True)
    want = atlas_pass(lm, TEXTS, batch_size=2, progress=False)
    wrapped_from_host(monkeypatch, lambda job: time.sleep(0.5 if job == 0 else 0.0))
    got = atlas_pass(lm, TEXTS, batch_size=2, progress=False)
    np.testing.assert_array_equal(got.texts.entropy, want.texts.entropy)
    for key, value in want.prompt_entropy.items():
        np.testing.assert_array_equal(got.prompt_entropy[key], value)


def test_an_error_on_the_worker_reaches_the_caller_and_the_worker_stops(monkeypatch):
    lm = tiny.tiny_lm("llama")

    def fail_on_the_second(job):
        if job == 1:
            raise RuntimeError("the second batch's Grams")

    wrapped_from_host(monkeypatch, fail_on_the_second)
    with pytest.raises(RuntimeError, match="the second batch's Grams"):
        atlas_pass(lm, TEXTS, batch_size=2, progress=False)
    assert not [t for t in threading.enumerate() if t.name.startswith("atlas-entropy")]


@pytest.mark.parametrize("ritz_min_tokens", [1, 10**6])  # the Ritz directions fixed in the first batch, or at the end
def test_a_nan_state_names_its_layer_and_text(monkeypatch, ritz_min_tokens):
    monkeypatch.setattr(atlas_sums, "RITZ_MIN_TOKENS", ritz_min_tokens)
    lm = tiny.tiny_lm("llama", n_layers=3)
    atlas_pass(lm, TEXTS[:2], progress=False)  # the final norm's probe, once per model, on finite states

    def nan_output(_module, _args, output):  # the embeddings are hidden state 0
        hidden = output.clone()
        hidden[:, 0] = torch.nan  # every entry of the covariance NaN: eigh would fail where it fixes the directions
        return hidden

    lm.model.get_input_embeddings().register_forward_hook(nan_output)
    with pytest.raises(ExtractionError, match=r"layer 0 of 0\.\.3") as error:
        atlas_pass(lm, TEXTS, batch_size=2, progress=False)
    assert "text " in str(error.value)
    assert not [t for t in threading.enumerate() if t.name.startswith("atlas-entropy")]


def test_fixing_the_directions_on_non_finite_sums_does_not_raise():
    """LAPACK's eigh refuses some all-NaN matrices (this 5 x 5 one): the pass must reach its own error first."""
    moments = Moments(n_slots=1, d=5, k=3)
    members = torch.ones(2, 4, dtype=torch.bool)
    moments.add(0, torch.full((4, 5), torch.nan), members, torch.zeros(4, dtype=torch.long), 1)
    moments.count += members.sum(dim=1)
    moments.fix_basis()
    assert moments.basis.shape == (2, 1, 5, 3)
