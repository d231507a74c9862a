"""The Scorer's output head on the scored positions alone against its full-logits path and each text alone: the five
tiny architectures, with and without ``score_from``, stacked copies and a pass started from a kept stream; the
check shown to catch a pad position scored or ``score_from`` ignored; the fallback and NaN or inf as before."""

import logging
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tiny
from layerscope.engine.forward import head as head_module
from layerscope.engine.forward.pooling import scored_targets
from layerscope.engine.interventions import scoring
from layerscope.engine.interventions.scoring import Scorer
from layerscope.errors import ExtractionError

L = 3
BATCH = 3  # tiny.TEXTS in 4 right-padded batches


def starts(n: int) -> np.ndarray:
    """(n,) a first scored target position per text: 1 to 4, the longer texts' past their first few tokens."""
    return 1 + np.arange(n) % 4


@torch.no_grad()
def alone(lm, texts, score_from=None) -> tuple[np.ndarray, np.ndarray]:
    """Each text alone through a plain forward: minus the log-probability of every target at a position >=
    ``score_from[i]`` (default 1), summed in float64, and how many."""
    sums, counts = [], []
    for i, text in enumerate(texts):
        ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
        log_p = F.log_softmax(lm.model(ids).logits[0, :-1].double(), dim=-1)
        nll = -log_p.gather(1, ids[0, 1:, None])[:, 0]
        first = 1 if score_from is None else int(score_from[i])
        sums.append(float(nll[first - 1 :].sum()))
        counts.append(len(nll[first - 1 :]))
    return np.array(sums), np.array(counts)


class HeadLogits:
    """The shapes of the logits the output head computed inside the ``with`` ((B, T, vocab) from a forward pass,
    (N, vocab) for N positions scored on their own)."""

    def __init__(self, lm):
        self.module, self.shapes = lm.model.get_output_embeddings(), []

    def __enter__(self):
        self.handle = self.module.register_forward_hook(lambda _m, _a, out: self.shapes.append(tuple(out.shape)))
        return self

    def __exit__(self, *_):
        self.handle.remove()


def full_logits():
    """Within it, the Scorer takes the full-logits path (as before the head path)."""
    return mock.patch.object(scoring, "head_matches", lambda lm, batch: False)


def both_paths(scorer: Scorer, **kwargs):
    """``scorer.score(**kwargs)`` by the head path, then by the full-logits path, each with its logits' shapes."""
    with HeadLogits(scorer.lm) as seen_new:
        new = scorer.score(**kwargs)
    with full_logits(), HeadLogits(scorer.lm) as seen_old:
        old = scorer.score(**kwargs)
    return new, old, seen_new.shapes, seen_old.shapes


def assert_same(new, old, rtol=1e-6):
    np.testing.assert_array_equal(new[1], old[1])
    np.testing.assert_allclose(new[0], old[0], rtol=rtol)


@pytest.mark.parametrize("arch", tiny.ARCHS)
@pytest.mark.parametrize("adds_bos", [False, True])
def test_the_head_on_the_scored_positions_equals_the_full_logits(arch, adds_bos):
    lm = tiny.tiny_lm(arch, adds_bos=adds_bos, n_layers=L)
    scorer = Scorer(lm, tiny.TEXTS, batch_size=BATCH)
    scorer.score()  # the probe's passes (once per model) before the head's inputs are counted
    assert head_module._CHECKED[lm.model], arch
    first = starts(len(tiny.TEXTS))
    for score_from in (None, first):
        new, old, shapes, full = both_paths(scorer, score_from=score_from)
        assert_same(new, old)
        reference = alone(lm, tiny.TEXTS, score_from)
        np.testing.assert_array_equal(new[1], reference[1])
        np.testing.assert_allclose(new[0], reference[0], rtol=1e-5)
        # The head path: each forward's head sees one position per text, then the scored positions alone (2-D).
        calls = [s for s in shapes if len(s) == 2]
        assert [s[:2] for s in shapes if len(s) == 3] == [(len(b.index), 1) for b in scorer.batches], arch
        assert sum(s[0] for s in calls) == new[1].sum() < sum(b.input_ids.numel() for b in scorer.batches)
        assert [s[:2] for s in full] == [tuple(b.input_ids.shape) for b in scorer.batches]


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_stacked_copies_started_from_a_kept_stream(arch):
    lm = tiny.tiny_lm(arch, n_layers=L)
    scorer = Scorer(lm, tiny.TEXTS, batch_size=BATCH)
    scorer.score(keep={0: 2})
    first = starts(len(tiny.TEXTS))
    new, old, _, _ = both_paths(scorer, start=2, source=0, copies=3, score_from=first)
    assert new[0].shape == (3, len(tiny.TEXTS))
    assert_same(new, old)
    reference = alone(lm, tiny.TEXTS, first)
    for c in range(3):
        np.testing.assert_array_equal(new[1][c], reference[1])
        np.testing.assert_allclose(new[0][c], reference[0], rtol=1e-5)


def pad_scored_too(batch, start=None):
    """A broken :func:`scored_targets`: the first pad position after each right-padded text is scored as well."""
    scored = scored_targets(batch, start)
    real = batch.attention_mask.bool()
    return scored | (real[:, :-1] & ~real[:, 1:])


@pytest.mark.parametrize("broken", ["pad position scored", "score_from ignored"])
def test_the_check_catches_a_broken_head_path(broken):
    lm = tiny.tiny_lm("llama", n_layers=L)
    scorer = Scorer(lm, tiny.TEXTS, batch_size=BATCH)
    first = starts(len(tiny.TEXTS))
    wrong = (mock.patch.object(head_module, "scored_targets", pad_scored_too) if broken == "pad position scored"
             else mock.patch.object(head_module, "scored_targets", lambda batch, start=None: scored_targets(batch)))
    with wrong:
        new, old, _, _ = both_paths(scorer, score_from=first)
    with pytest.raises(AssertionError):
        assert_same(new, old)
    with pytest.raises(AssertionError):  # the NLL as well as the counts
        np.testing.assert_allclose(new[0], old[0], rtol=1e-3)


def test_a_head_that_cannot_be_split_off_keeps_the_full_logits(caplog):
    lm = tiny.tiny_lm("gpt2", n_layers=L)
    scorer = Scorer(lm, tiny.TEXTS, batch_size=BATCH)
    first = starts(len(tiny.TEXTS))
    with mock.patch.object(head_module, "transform", lambda _lm, logits: 1.5 * logits), caplog.at_level(
            logging.WARNING):
        scorer.score()  # the probe finds the head path's logits are not the model's: decided for this model
    assert "does not reproduce its logits" in caplog.text
    with HeadLogits(lm) as seen:
        got = scorer.score(score_from=first)
    assert [s[:2] for s in seen.shapes] == [tuple(b.input_ids.shape) for b in scorer.batches]
    reference = alone(lm, tiny.TEXTS, first)
    np.testing.assert_array_equal(got[1], reference[1])
    np.testing.assert_allclose(got[0], reference[0], rtol=1e-5)


def test_nan_and_inf_after_the_probe_are_named_as_before():
    lm = tiny.tiny_lm("llama", n_layers=L)
    texts = ["The cat sat on the mat.", "Prices rose by four percent."]
    scorer = Scorer(lm, texts)
    scorer.score()
    assert head_module._CHECKED[lm.model]  # the head path is on: the NaN below reaches it
    with torch.no_grad():
        lm.model.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    with pytest.raises(ExtractionError, match=r"NaN or inf hidden state at layer 2 of 0..3 .* for text 0 "):
        scorer.score(score_from=np.array([2, 3]))
    lm = tiny.tiny_lm("llama", n_layers=L)
    scorer = Scorer(lm, texts)
    scorer.score()
    with torch.no_grad():
        lm.model.lm_head.weight[5] = float("inf")
    with pytest.raises(ExtractionError, match=r"computed a NaN or inf NLL \(every hidden state finite"):
        scorer.score()


def test_a_probe_with_a_nan_nll_decides_nothing():
    lm = tiny.tiny_lm("llama", n_layers=L)
    weight = lm.model.model.layers[1].mlp.down_proj.weight
    with torch.no_grad():
        weight[0, 0] = float("nan")
    scorer = Scorer(lm, tiny.TEXTS[:2])
    with pytest.raises(ExtractionError, match="NaN or inf hidden state at layer 2"):
        scorer.score()  # the full-logits path names it, and the head path is not ruled out for good
    assert lm.model not in head_module._CHECKED
    with torch.no_grad():
        weight[0, 0] = 0.0
    with HeadLogits(lm) as seen:
        scorer.score()
    assert head_module._CHECKED[lm.model] and any(len(s) == 2 for s in seen.shapes)
