"""Halving the batch on out-of-memory errors, pooling only the requested layers, token NLL in row chunks, and the
batch plan and memory budget against hand-worked numbers."""

import importlib

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, LlamaConfig

import tiny
from layerscope import ExtractionError, extract
from layerscope.engine.forward import batching
from layerscope.engine.forward.batching import collate, memory_budget, plan_ranges
from layerscope.engine.forward.pooling import token_nll

extract_module = importlib.import_module("layerscope.engine.forward.extract")  # the package's `extract` is the function


def assert_identical(a, b, layers=None):
    for p in a.settings.poolings:
        for layer in layers or range(a.n_layers + 1):
            assert np.array_equal(a.pooled[p][:, layer], b.pooled[p][:, layer]), (p, layer)
        assert np.array_equal(a.pre_norm[p], b.pre_norm[p]), p
    for key in ("nll_sum", "n_scored", "n_tokens"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key


def fake_oom(lm, most):
    """Make the last decoder block raise torch.OutOfMemoryError on batches of more than ``most`` texts (after the
    earlier blocks ran and handed over their states); returns the list of batch sizes it saw and the hook."""
    seen = []

    def hook(_module, args, kwargs):
        rows = (args[0] if args else kwargs["hidden_states"]).shape[0]
        seen.append(rows)
        if rows > most:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")

    block = lm.model.model.layers[-1]
    return seen, block.register_forward_pre_hook(hook, with_kwargs=True)


def hook_counts(lm):
    return [(len(b._forward_pre_hooks), len(b._forward_hooks)) for b in lm.model.model.layers]


def test_out_of_memory_halves_the_batch_and_gives_the_same_arrays(tmp_path):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    pairs = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "pairs")
    hooks = hook_counts(lm)
    seen, handle = fake_oom(lm, most=2)
    acts = extract(lm, tiny.TEXTS, batch_size=8, cache=tmp_path / "halved")
    handle.remove()
    # texts 0..7: 8 fail, 4 fail, then pairs for the rest of the extraction; texts 8..10: a pair and one text
    assert seen == [8, 4, 2, 2, 2, 2, 2, 1]
    assert acts.stats.batches_computed == 2  # planned batches: the first ran in pieces after the errors
    assert hook_counts(lm) == hooks  # a pass cut short by the error left no capture hook behind
    assert_identical(acts, pairs)


def test_out_of_memory_on_one_text_is_an_error_naming_the_fix():
    lm = tiny.tiny_lm("llama", adds_bos=True)
    extract(lm, tiny.TEXTS[:3], batch_size=2, cache=False)  # the one-off check of the model's head runs here
    hooks = hook_counts(lm)
    seen, handle = fake_oom(lm, most=0)
    with pytest.raises(ExtractionError, match="batch of one text.*--max-length.*bfloat16"):
        extract(lm, tiny.TEXTS[:3], batch_size=2, cache=False)
    handle.remove()
    assert seen == [2, 1]
    assert hook_counts(lm) == hooks


def test_out_of_memory_halves_the_batch_that_failed_also_for_a_planned_batch(tmp_path):
    lm = tiny.tiny_lm("llama", adds_bos=True)
    pairs = extract(lm, tiny.TEXTS, batch_size=2, cache=tmp_path / "pairs")
    seen, handle = fake_oom(lm, most=2)
    acts = extract(lm, tiny.TEXTS, cache=tmp_path / "planned")  # all 11 texts fit one planned batch
    handle.remove()
    assert seen == [11, 5, 2, 2, 2, 2, 2, 1]  # 11 fail, 5 fail, then pairs
    assert_identical(acts, pairs)
    seen, handle = fake_oom(lm, most=0)
    with pytest.raises(ExtractionError, match="batch of one text"):
        extract(lm, tiny.TEXTS[:1], cache=False)
    handle.remove()
    assert seen == [1]  # one text that does not fit is an error at once, not after 10 more tries


def test_on_batch_never_reports_more_batches_done_than_in_total():
    lm = tiny.tiny_lm("llama", adds_bos=True)
    seen, handle = fake_oom(lm, most=2)
    calls = []
    acts = extract(lm, tiny.TEXTS, batch_size=8, cache=False, on_batch=lambda done, total: calls.append((done, total)))
    handle.remove()
    assert all(done <= total for done, total in calls), calls  # got [(4, 2), (6, 2)]
    assert calls[-1][0] == calls[-1][1] == acts.stats.batches


def test_only_the_requested_layers_are_captured_and_pooled(monkeypatch):
    lm = tiny.tiny_lm("llama", adds_bos=False)  # 3 layers: hidden states 0..3
    full = extract(lm, tiny.TEXTS, poolings=("mean", "last"), batch_size=4, cache=False)
    pooled, handed = [], []
    real_capture = extract_module.capture_states

    class CountingPooler(extract_module.Pooler):
        def __call__(self, hidden, out):
            pooled.append(self.poolings)
            return super().__call__(hidden, out)

    def recording_capture(lm, layers, on_state, **kwargs):
        def on(key, hidden):
            handed.append(key)
            on_state(key, hidden)
        return real_capture(lm, layers, on, **kwargs)

    monkeypatch.setattr(extract_module, "Pooler", CountingPooler)
    monkeypatch.setattr(extract_module, "capture_states", recording_capture)
    acts = extract(lm, tiny.TEXTS, layers=[2, 0], poolings=("mean", "last"), batch_size=4, cache=False)
    assert acts.stats.batches_computed == 3
    assert len(pooled) == 3 * (2 + 1)  # per batch: layers 0 and 2, and the pre-norm state
    assert handed == [0, 2, "pre_norm"] * 3
    assert acts.layers == (0, 2) and acts.pooled["mean"].shape == (len(tiny.TEXTS), 4, 32)
    assert_identical(acts, full, layers=(0, 2))
    for layer in (1, 3, -1):
        with pytest.raises(ExtractionError, match=f"hidden state {layer % 4} was not extracted.*layers=None"):
            acts.pooled["mean"][:, layer]


def padded(lm, texts, side):
    ids = [lm.tokenizer(t)["input_ids"] for t in texts]
    return ids, collate(ids, np.arange(len(ids)), pad_id=0, side=side)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_token_nll_one_row_at_a_time_equals_each_text_alone(arch, side):
    lm = tiny.tiny_lm(arch, adds_bos=True)
    ids, batch = padded(lm, tiny.TEXTS, side)
    with torch.no_grad():
        logits = lm.model(**batch.model_inputs(), use_cache=False).logits
        alone = [lm.model(input_ids=torch.tensor([x]), labels=torch.tensor([x])).loss.item() for x in ids]
    nll_sum, n_scored = token_nll(logits, batch, chunk_bytes=1)
    assert n_scored.tolist() == [len(x) - 1 for x in ids]
    want = np.array([loss * (len(x) - 1) for loss, x in zip(alone, ids, strict=True)])
    np.testing.assert_allclose(nll_sum.numpy(), want, rtol=1e-6)


class Float32Sizes(TorchDispatchMode):
    """Records the element count of every float32 tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.sizes.append(t.numel())
        return out


def test_token_nll_of_bfloat16_logits_takes_two_rows_at_a_time_in_float32():
    lm = tiny.tiny_lm("gpt2", adds_bos=False)
    ids, batch = padded(lm, tiny.TEXTS, "right")
    with torch.no_grad():
        logits = lm.model(**batch.model_inputs(), use_cache=False).logits.bfloat16()
    B, T, V = logits.shape
    with Float32Sizes() as sizes:
        nll_sum, n_scored = token_nll(logits, batch, chunk_bytes=2 * T * V * 4)
    assert max(sizes.sizes) == 2 * T * V < B * T * V  # no float32 copy of the whole batch's logits
    for row, x in enumerate(ids):  # row by row: float64 log-softmax of that row's bfloat16 logits
        logp = torch.log_softmax(logits[row, : len(x) - 1].double(), dim=-1)
        want = -logp[torch.arange(len(x) - 1), torch.tensor(x[1:])].sum().item()
        assert nll_sum[row].item() == pytest.approx(want, rel=1e-6)
        assert n_scored[row] == len(x) - 1


def test_plan_ranges_by_hand():
    lengths = [10, 8, 8, 5, 4, 3, 3, 2, 2]  # longest first
    todo = [True, True, True, False, True, True, True, True, False]
    # row 0: 20 // 10 = 2 texts; row 2: 20 // 8 = 2, but row 3 is done; row 4: 20 // 4 = 5, capped at 3 texts;
    # row 7: 20 // 2 = 10, but row 8 is done
    assert plan_ranges(lengths, todo, batch_size=3, max_tokens=20) == [(0, 2), (2, 3), (4, 7), (7, 8)]
    assert plan_ranges(lengths, todo, batch_size=None, max_tokens=None) == [(0, 3), (4, 8)]
    # a text longer than the budget of 5 tokens still goes, alone; 5 // 4 = 5 // 3 = 1 text; 5 // 2 = 2 texts
    assert plan_ranges(lengths, [True] * 9, batch_size=4, max_tokens=5) == [
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 9)]
    assert plan_ranges(lengths, [False] * 9, batch_size=2, max_tokens=20) == []


def test_memory_budget_on_cpu_is_the_fixed_budget_or_the_logits_cap():
    model = tiny.tiny_lm("llama").model
    assert memory_budget(model, vocab_size=400) == 768
    assert memory_budget(model, vocab_size=200_000, kept_states=5) == 536_870_912 // 800_000 == 671


class FakeParam:
    device = torch.device("cuda", 0)

    def element_size(self):
        return 2  # bfloat16


class FakeCudaModel:
    config = LlamaConfig(hidden_size=64, intermediate_size=256, vocab_size=1000)

    def parameters(self):
        return iter([FakeParam()])


def test_memory_budget_on_cuda_divides_a_share_of_free_memory_by_the_bytes_per_token(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10_000_000, 80_000_000))
    # per token, bfloat16: logits 1000 + attention and residual 6 x 64 + MLP 3 x 256 + 3 kept states x 64 values,
    # 2 bytes each, and a float32 pooled copy (8 bytes x 64): 2 x 2344 + 512 = 5200 bytes; 60% of 10 MB / 5200
    assert memory_budget(FakeCudaModel(), vocab_size=1000, kept_states=3) == 6_000_000 // 5200 == 1153
    # GPT-2 has no intermediate_size: 4 x n_embd = 128; 4 x (100 + 6 x 32 + 3 x 128) + 8 x 32 = 2960
    assert batching.bytes_per_token(GPT2Config(n_embd=32, vocab_size=100), 4, 0) == 2960
