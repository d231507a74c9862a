"""Each plant against a reference computed without it: the original model's own logits and hidden states,
``intervened(...)`` on the original (repeat, prune), the band run twice by hand through hooks, a scaled write
worked out from the original's captured block input and output. The original is checked to be left as it was."""

import pytest
import torch

import planted
from layerscope.engine.interventions.surgery import Intervention, intervened
from layerscope.models import decoder_layers
from layerscope.plant import duplicated_band, inserted_identity, removed_band, scaled_writes

L = planted.N_LAYERS


@pytest.mark.parametrize("at", [0, 2, L])
def test_inserted_identity_keeps_the_logits_and_repeats_one_state(lm, at):
    k = 2
    batch = planted.batch_of(lm)
    before = planted.fingerprint(lm)
    logits, states = planted.run(lm.model, batch, states=True)
    copy = inserted_identity(lm, at=at, k=k)
    got, got_states = planted.run(copy.model, batch, states=True)
    torch.testing.assert_close(got, logits, rtol=0, atol=1e-6)
    assert len(got_states) == L + k + 1
    if at < L:  # (at = L: the last state is taken after the final norm, the one before it is not)
        for s in range(at + 1, at + k + 1):
            assert torch.equal(got_states[s], got_states[at])
        for s in range(L + 1):  # before the inserted blocks: the same state; after them: shifted by k
            torch.testing.assert_close(got_states[s if s <= at else s + k], states[s], rtol=0, atol=1e-6)
    # the original: its logits, its block objects, their forwards and hooks, its config
    again, _ = planted.run(lm.model, batch)
    assert torch.equal(again, logits)
    assert planted.fingerprint(lm) == before
    assert before["own_forward"] == []
    assert not {id(b) for b in decoder_layers(copy.model)} & set(before["blocks"])


def twice_by_hand(lm, start: int, k: int):
    """A context manager: the original model runs blocks start..start+k-1 once more, right after they ran,
    each with the arguments the model gave it (its own mask and rotary table); hooks, not the plant."""
    import contextlib

    blocks = decoder_layers(lm.model)
    calls = {}

    def keep(index):
        def pre(_module, args, kwargs):
            calls[index] = (args, kwargs)
        return pre

    def again(_module, _args, _kwargs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        for j in range(start, start + k):
            args, kwargs = calls[j]
            out = type(blocks[j]).forward(blocks[j], hidden, *args[1:], **kwargs)  # no hooks: plain forward
            hidden = out[0] if isinstance(out, tuple) else out
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    @contextlib.contextmanager
    def hooked():
        handles = [blocks[j].register_forward_pre_hook(keep(j), with_kwargs=True) for j in range(start, start + k)]
        handles.append(blocks[start + k - 1].register_forward_hook(again, with_kwargs=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    return hooked()


@pytest.mark.parametrize("start", [0, 2, L - 1])
def test_a_duplicated_block_equals_repeat(lm, start):
    batch = planted.batch_of(lm)
    with intervened(lm, Intervention.repeat(start)):
        expected, _ = planted.run(lm.model, batch)
    got, _ = planted.run(duplicated_band(lm, start=start, k=1).model, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert (got - planted.run(lm.model, batch)[0]).abs().max() > 1e-3  # it changes something


@pytest.mark.parametrize("start, k", [(0, 2), (1, 3), (0, L)])
def test_a_duplicated_band_equals_the_band_run_twice_by_hand(lm, start, k):
    batch = planted.batch_of(lm)
    intact, _ = planted.run(lm.model, batch)
    with twice_by_hand(lm, start, k):
        expected, _ = planted.run(lm.model, batch)
    copy = duplicated_band(lm, start=start, k=k)
    got, states = planted.run(copy.model, batch, states=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert (got - intact).abs().max() > 1e-3
    assert len(states) == L + k + 1 and copy.info.n_layers == L + k


@pytest.mark.parametrize("start, k", [(0, 1), (1, 2), (0, L - 1), (1, L - 1), (L - 1, 1)])
def test_a_removed_band_equals_prune(lm, start, k):
    batch = planted.batch_of(lm)
    with intervened(lm, Intervention.prune(range(start, start + k))):
        expected, _ = planted.run(lm.model, batch)
    copy = removed_band(lm, start=start, k=k)
    got, states = planted.run(copy.model, batch, states=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert len(states) == L - k + 1 and len(decoder_layers(copy.model)) == L - k


def test_layer_kinds_follow_the_blocks():
    lm = planted.model("gemma3-mixed")
    s, f = "sliding_attention", "full_attention"
    assert lm.model.config.layer_types == [s, f, f, s]
    kinds = {"identity": (inserted_identity(lm, at=1, k=2), [s, s, s, f, f, s]),  # twins of block 0
             "duplicate": (duplicated_band(lm, start=0, k=2), [s, f, s, f, f, s]),
             "remove": (removed_band(lm, start=1, k=2), [s, s]),
             "scale": (scaled_writes(lm, start=1, scale=0.5), [s, f, f, s])}
    for name, (copy, expected) in kinds.items():
        config = copy.model.config
        assert (config.layer_types, config.num_hidden_layers) == (expected, len(expected)), name
        # each block's attention keeps its own window, and sits at its own position
        blocks = decoder_layers(copy.model)
        windows = [b.self_attn.sliding_window for b in blocks]
        assert windows == [4 if kind == s else None for kind in expected], name
        assert [b.self_attn.layer_idx for b in blocks] == list(range(len(expected))), name
        # every block, twins included, reads the copy's own config (Gemma 3's blocks hold self.config)
        assert all(b.config is config and b.self_attn.config is config for b in blocks), name
    assert lm.model.config.layer_types == [s, f, f, s]


def captured(block):
    """A context manager recording the (args, kwargs) and output of each call of ``block``."""
    import contextlib

    seen = []

    @contextlib.contextmanager
    def hooked():
        handle = block.register_forward_hook(lambda _m, a, kw, out: seen.append((a, kw, out)), with_kwargs=True)
        try:
            yield seen
        finally:
            handle.remove()

    return hooked()


@pytest.mark.parametrize("scale", [0.5, -1.5])
def test_scaled_writes_scale_every_write_from_start_on(lm, scale):
    start = 1
    batch = planted.batch_of(lm)
    blocks = decoder_layers(lm.model)
    with captured(blocks[start]) as calls:
        _, states = planted.run(lm.model, batch, states=True)
    (args, kwargs, out), = calls
    h = args[0]
    o = out[0] if isinstance(out, tuple) else out
    want = h + scale * (o - h)
    # the next block, by hand on that state, with the arguments the model gave it
    with captured(blocks[start + 1]) as calls:
        planted.run(lm.model, batch)
    (args2, kwargs2, _), = calls
    o2 = type(blocks[start + 1]).forward(blocks[start + 1], want, *args2[1:], **kwargs2)
    o2 = o2[0] if isinstance(o2, tuple) else o2
    want2 = want + scale * (o2 - want)

    copy = scaled_writes(lm, start=start, scale=scale)
    _, got = planted.run(copy.model, batch, states=True)
    assert len(got) == L + 1
    for s in range(start + 1):
        assert torch.equal(got[s], states[s]), s
    torch.testing.assert_close(got[start + 1], want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[start + 2], want2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("start", [0, 2])
def test_scale_zero_equals_pruning_every_block_from_start(lm, start):
    batch = planted.batch_of(lm)
    with intervened(lm, Intervention.prune(range(start, L))):
        expected, _ = planted.run(lm.model, batch)
    got, _ = planted.run(scaled_writes(lm, start=start, scale=0.0).model, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
