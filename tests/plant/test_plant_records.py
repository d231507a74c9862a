"""What a planted copy is beside its function: it generates the same with and without a KV cache, shares every
weight with the original, has its own weights hash and cache entries, records the plant (its state map worked
out here by hand) in its info and its manifest entry, and composes with another plant."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import planted
import tiny
from layerscope.engine import extract
from layerscope.models import LoadedModel, ModelInfo, decoder_layers
from layerscope.plant import duplicated_band, inserted_identity, removed_band, scaled_writes, state_map
from layerscope.study.manifests import model_entry

L = planted.N_LAYERS
PROMPTS = ["The committee will review every application before", "Ice"]  # longer than Gemma's window of 4


@torch.no_grad()
def greedy(lm, model, use_cache: bool, new: int = 8) -> torch.Tensor:
    side, lm.tokenizer.padding_side = lm.tokenizer.padding_side, "left"  # the shared tokenizer: put back after
    try:
        inputs = lm.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    finally:
        lm.tokenizer.padding_side = side
    return model.generate(**inputs, max_new_tokens=new, do_sample=False, use_cache=use_cache,
                          pad_token_id=lm.tokenizer.pad_token_id)


PLANTS = {"duplicate": lambda lm: duplicated_band(lm, start=1, k=2),
          "identity-first": lambda lm: inserted_identity(lm, at=0, k=2),
          "remove": lambda lm: removed_band(lm, start=0, k=2),
          "scale": lambda lm: scaled_writes(lm, start=1, scale=0.5)}


@pytest.mark.parametrize("name", ["llama", "gemma3-mixed", "gpt2"])
@pytest.mark.parametrize("plant", list(PLANTS))
def test_generation_with_a_kv_cache_equals_generation_without(name, plant):
    lm = planted.model(name)
    copy = PLANTS[plant](lm)
    with_cache = greedy(lm, copy.model, use_cache=True)
    assert torch.equal(with_cache, greedy(lm, copy.model, use_cache=False))
    if plant == "identity-first":  # the same function as the original: the same tokens
        assert torch.equal(with_cache, greedy(lm, lm.model, use_cache=True))


def test_no_weight_is_copied(lm):
    originals = {id(p) for p in lm.model.parameters()} | {id(b) for b in lm.model.buffers()}
    pointers = {t.data_ptr() for t in lm.model.state_dict().values()}
    for copy in (inserted_identity(lm, at=1, k=2), duplicated_band(lm, start=0, k=3), removed_band(lm, 1, 1),
                 scaled_writes(lm, start=2, scale=2.0)):
        assert copy.tokenizer is lm.tokenizer
        assert {id(p) for p in copy.model.parameters()} <= originals
        assert {id(b) for b in copy.model.buffers()} <= originals
        assert {t.data_ptr() for t in copy.model.state_dict().values()} <= pointers
        assert copy.model is not lm.model and copy.model.config is not lm.model.config
    # twins of one block are distinct modules with their own layer_idx, on the same weights
    blocks = decoder_layers(duplicated_band(lm, start=0, k=3).model)
    assert blocks[0] is not blocks[3] and len({id(b) for b in blocks}) == len(blocks)
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(blocks[0].parameters(), blocks[3].parameters(),
                                                              strict=True))
    idx = [[m.layer_idx for m in b.modules() if "layer_idx" in m.__dict__] for b in blocks]
    assert all(set(found) == {i} for i, found in enumerate(idx))


def test_the_copy_carries_none_of_the_originals_hooks():
    lm = planted.model("opt")
    calls = []
    handle = decoder_layers(lm.model)[1].register_forward_hook(lambda *_: calls.append(1))
    try:
        copy = duplicated_band(lm, start=1, k=1)
        calls.clear()
        planted.run(copy.model, planted.batch_of(lm, tiny.TEXTS[:2]))
        assert calls == []
        planted.run(lm.model, planted.batch_of(lm, tiny.TEXTS[:2]))
        assert calls == [1]
    finally:
        handle.remove()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in copy.model.modules())


def test_the_weights_hash_is_new_and_deterministic():
    lm = planted.model("llama")
    hashes = {"a": inserted_identity(lm, 1, 2).info.weights_hash,
              "a again": inserted_identity(lm, 1, 2).info.weights_hash,
              "other at": inserted_identity(lm, 2, 2).info.weights_hash,
              "duplicate": duplicated_band(lm, 1, 2).info.weights_hash,
              "remove": removed_band(lm, 1, 2).info.weights_hash,
              "scale": scaled_writes(lm, 1, 0.5).info.weights_hash,
              "scale 2": scaled_writes(lm, 1, 2.0).info.weights_hash}
    assert hashes["a"] == hashes["a again"]
    del hashes["a again"]
    assert len(set(hashes.values()) | {lm.info.weights_hash}) == len(hashes) + 1
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in hashes.values())


def test_a_planted_copy_never_reads_the_base_models_cache_entries():
    lm = planted.model("llama")
    texts = tiny.TEXTS[:4]
    base = extract(lm, texts, poolings=("mean",))
    ref = np.asarray(base.pooled["mean"])
    # the same depth as the base: only the weights hash tells the entries apart
    scaled = extract(scaled_writes(lm, start=2, scale=0.5), texts, poolings=("mean",))
    assert scaled.stats.batches_reused == 0 and scaled.fingerprint != base.fingerprint
    pooled = np.asarray(scaled.pooled["mean"])
    np.testing.assert_allclose(pooled[:, :3], ref[:, :3], rtol=0, atol=1e-6)
    assert np.abs(pooled[:, 3:] - ref[:, 3:]).max() > 1e-3
    assert extract(lm, texts, poolings=("mean",)).stats.batches_reused == base.stats.batches  # base's kept
    # an inserted identity: its states, as extract pools them
    copy = inserted_identity(lm, at=2, k=2)
    acts = extract(copy, texts, poolings=("mean",))
    assert acts.stats.batches_reused == 0
    pooled = np.asarray(acts.pooled["mean"])
    assert pooled.shape == (4, L + 2 + 1, ref.shape[2])
    np.testing.assert_allclose(pooled[:, [0, 1, 2, 5, 6]], ref, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(pooled[:, 3], pooled[:, 2])
    np.testing.assert_array_equal(pooled[:, 4], pooled[:, 2])
    assert extract(copy, texts, poolings=("mean",)).stats.batches_reused == acts.stats.batches


def test_each_plant_records_itself_with_its_state_map():
    lm = planted.model("gpt2")
    name, weights = lm.info.name, lm.info.weights_hash
    common = {"base": name, "base_weights_hash": weights, "n_layers_before": 4}
    cases = [  # L = 4: states 0..4; maps worked out by hand
        (inserted_identity(lm, at=2, k=2), f"{name}+identity(at=2,k=2)",
         {"kind": "identity", "at": 2, "k": 2, "n_layers_after": 6, "state_map": [0, 1, 2, 5, 6]}),
        (inserted_identity(lm, at=0, k=1), f"{name}+identity(at=0,k=1)",
         {"kind": "identity", "at": 0, "k": 1, "n_layers_after": 5, "state_map": [0, 2, 3, 4, 5]}),
        (inserted_identity(lm, at=4, k=3), f"{name}+identity(at=4,k=3)",
         {"kind": "identity", "at": 4, "k": 3, "n_layers_after": 7, "state_map": [0, 1, 2, 3, 4]}),
        (duplicated_band(lm, start=1, k=2), f"{name}+duplicate(start=1,k=2)",
         {"kind": "duplicate", "start": 1, "k": 2, "n_layers_after": 6, "state_map": [0, 1, 2, 3, 6]}),
        (removed_band(lm, start=1, k=2), f"{name}+remove(start=1,k=2)",
         {"kind": "remove", "start": 1, "k": 2, "n_layers_after": 2, "state_map": [0, 1, None, None, 2]}),
        (removed_band(lm, start=0, k=3), f"{name}+remove(start=0,k=3)",
         {"kind": "remove", "start": 0, "k": 3, "n_layers_after": 1, "state_map": [0, None, None, None, 1]}),
        (scaled_writes(lm, start=3, scale=0.25), f"{name}+scale(start=3,scale=0.25)",
         {"kind": "scale", "start": 3, "scale": 0.25, "n_layers_after": 4, "state_map": [0, 1, 2, 3, 4]}),
    ]
    for copy, want_name, record in cases:
        assert copy.info.name == want_name
        assert copy.info.plant == ({**common, **record},)
        assert copy.info.n_layers == record["n_layers_after"] == len(decoder_layers(copy.model))
        assert state_map(copy.info) == record["state_map"] == state_map(copy)
        entry = model_entry(copy.info)
        assert entry["plant"] == [{**common, **record}] and entry["n_layers"] == record["n_layers_after"]
        assert entry["weights_hash"] == copy.info.weights_hash != weights
        assert json.loads(json.dumps(entry)) == entry
        # the info survives JSON (a cached entry's meta, a saved Activations)
        assert ModelInfo(**json.loads(json.dumps(copy.info.to_dict()))) == copy.info
        assert {k: v for k, v in copy.info.to_dict().items() if k not in ("name", "n_layers", "weights_hash",
                                                                          "plant")} == \
            {k: v for k, v in lm.info.to_dict().items() if k not in ("name", "n_layers", "weights_hash", "plant")}
    assert "plant" not in model_entry(lm.info) and lm.info.plant == () and state_map(lm.info) == [0, 1, 2, 3, 4]


def test_the_manifest_names_the_checkpoint_a_copy_was_planted_in():
    lm = planted.model("llama")
    zoo = LoadedModel(model=lm.model, tokenizer=lm.tokenizer, info=dataclasses.replace(lm.info, name="smollm2-135m"))
    copy = removed_band(inserted_identity(zoo, at=1, k=2), start=0, k=1)
    entry = model_entry(copy.info)
    assert entry["name"] == "smollm2-135m+identity(at=1,k=2)+remove(start=0,k=1)"
    assert entry["exact"] == ("SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32, planted "
                              "+identity(at=1,k=2)+remove(start=0,k=1)")
    assert entry["prequantized"] == "Q4_1"
    tiny_entry = model_entry(inserted_identity(lm, at=1, k=2).info)
    assert (tiny_entry["exact"], tiny_entry["prequantized"]) == (f"{lm.info.name}, planted +identity(at=1,k=2)", None)
    assert (model_entry(zoo.info)["exact"], model_entry(lm.info)["exact"]) == \
        ("SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32", lm.info.name)


def test_plants_compose():
    lm = planted.model("llama")
    first = inserted_identity(lm, at=1, k=1)           # blocks 0 I 1 2 3; base state s -> [0, 1, 3, 4, 5]
    second = removed_band(first, start=0, k=2)         # drops 0 and I: 1 2 3; [0, None, None, 1, 2, 3]
    third = duplicated_band(second, start=2, k=1)      # 1 2 3 3; [0, 1, 2, 3]
    assert [r["kind"] for r in third.info.plant] == ["identity", "remove", "duplicate"]
    assert third.info.plant[1]["base"] == first.info.name and third.info.plant[2]["base"] == second.info.name
    assert third.info.plant[1]["base_weights_hash"] == first.info.weights_hash
    assert third.info.name == f"{lm.info.name}+identity(at=1,k=1)+remove(start=0,k=2)+duplicate(start=2,k=1)"
    assert state_map(first.info) == [0, 1, 3, 4, 5]
    assert state_map(second.info) == [0, None, 1, 2, 3]
    assert state_map(third.info) == [0, None, 1, 2, 3]
    assert len({lm.info.weights_hash, first.info.weights_hash, second.info.weights_hash,
                third.info.weights_hash}) == 4
    # the chain computes its block list: blocks 1 2 3 3 of the original, as a hand-edited copy would
    batch = planted.batch_of(lm, tiny.TEXTS[:4])
    got, _ = planted.run(third.model, batch)
    from layerscope.engine.interventions.surgery import Intervention, intervened

    with intervened(lm, Intervention.prune([0])):
        with intervened(lm, Intervention.repeat(3)):
            expected, _ = planted.run(lm.model, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_planting_a_scaled_copy_scales_the_twins_too():
    """A twin of a planted block runs itself with its own behaviour (the deep copy rebinds it)."""
    lm = planted.model("llama")
    twice = duplicated_band(scaled_writes(lm, start=3, scale=0.0), start=3, k=1)   # block 3 (off) runs twice
    batch = planted.batch_of(lm, tiny.TEXTS[:4])
    from layerscope.engine.interventions.surgery import Intervention, intervened

    with intervened(lm, Intervention.skip(3)):
        expected, _ = planted.run(lm.model, batch)
    got, states = planted.run(twice.model, batch, states=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    blocks = decoder_layers(twice.model)
    assert blocks[4].forward.inner.__self__ is blocks[4] and blocks[3].forward.inner.__self__ is blocks[3]


def test_import_layerscope_does_not_import_the_plants():
    code = "import sys, layerscope; print(any(m.startswith('layerscope.plant') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
