"""The tuned lens on disk against hand computations: the folder format round-trips, reads a hand-written tuned-lens
folder, refuses a pickle that runs code, names both sides of a shape mismatch, warns on other weights, and
config.json carries the tuned-lens package's unembed_hash and the weights' hub id."""

import hashlib
import json
import warnings

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.lenses.tuned import LensError, TunedLens, hub_name
from layerscope.engine.lenses.tuned_train import train_tuned_lens, unembed_hash
from layerscope.errors import LayerscopeError

PACKAGE_KEYS = {"base_model_name_or_path", "d_model", "num_hidden_layers", "bias", "base_model_revision",
                "unembed_hash", "lens_type"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_unembed_hash_is_the_tuned_lens_packages_and_config_names_the_model(tmp_path):
    lm = tiny.tiny_lm("llama")
    weight = lm.model.lm_head.weight.detach()
    want = hashlib.sha256(np.array_str(weight.float().numpy(), precision=1).encode()).hexdigest()  # tuned_lens.utils
    assert unembed_hash(lm) == want
    assert unembed_hash(tiny.tiny_lm("llama", seed=1)) != want
    lens = train_tuned_lens(lm, tiny.TEXTS, steps=1, tokens_per_step=16, seed=0, progress=False)
    assert lens.record["unembed_hash"] == want
    config = json.loads((lens.save(tmp_path / "lens") / "config.json").read_text())
    assert config["unembed_hash"] == want
    assert config["base_model_name_or_path"] == "tiny-llama-nobos" == lm.info.name  # no hub id known: the name
    assert config["layerscope"]["model"] == "tiny-llama-nobos"

    assert hub_name("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    zoo = TunedLens(32, 3, name="smollm2-135m", record={"steps": 0})
    config = json.loads((zoo.save(tmp_path / "zoo") / "config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert config["layerscope"]["model"] == "smollm2-135m"
    back = TunedLens.load(tmp_path / "zoo")
    assert back.name == "smollm2-135m"
    assert back.config()["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


@torch.no_grad()
def test_save_and_load_give_identical_logits(tmp_path):
    lm = tiny.tiny_lm("gpt2")
    lens = tiny.random_translators(TunedLens.zeros(lm))
    lens.record.update(steps=7, seed=3)
    lens.save(tmp_path / "lens")
    config = json.loads((tmp_path / "lens" / "config.json").read_text())
    assert PACKAGE_KEYS <= set(config) and config["lens_type"] == "linear_tuned_lens"
    assert config["d_model"] == 32 and config["num_hidden_layers"] == 3 and config["bias"] is True
    assert config["layerscope"]["weights_hash"] == lm.info.weights_hash and config["layerscope"]["steps"] == 7
    assert set(torch.load(tmp_path / "lens" / "params.pt", weights_only=True)) == {
        f"{i}.{p}" for i in range(3) for p in ("weight", "bias")}
    back = TunedLens.load(tmp_path / "lens", lm)
    _, _, out = tiny.forward(lm)
    for layer in range(4):
        h = out.hidden_states[layer]
        assert torch.equal(back.logits(layer, h), lens.logits(layer, h))
    assert back.record["seed"] == 3


@torch.no_grad()
def test_hand_written_tuned_lens_folder(tmp_path):
    lm = tiny.tiny_lm("llama")
    gen = torch.Generator().manual_seed(5)
    params = {}
    for i in range(3):
        params[f"{i}.weight"] = torch.randn(32, 32, generator=gen) * 0.1
        params[f"{i}.bias"] = torch.randn(32, generator=gen) * 0.1
    folder = tmp_path / "pkg"
    folder.mkdir()
    torch.save(params, folder / "params.pt")
    (folder / "config.json").write_text(json.dumps({
        "base_model_name_or_path": "tiny", "d_model": 32, "num_hidden_layers": 3, "bias": True,
        "base_model_revision": None, "unembed_hash": None, "lens_type": "linear_tuned_lens"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no weights hash recorded: nothing to warn about
        lens = TunedLens.load(folder, lm)
    _, _, out = tiny.forward(lm)
    for i in range(3):
        h = out.hidden_states[i]
        moved = h + h @ params[f"{i}.weight"].T + params[f"{i}.bias"]
        want = lm.model.model.norm(moved) @ lm.model.lm_head.weight.T
        torch.testing.assert_close(lens.logits(i, h), want, rtol=1e-5, atol=1e-5)


class Payload:
    """Unpickling this runs code: it writes ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_pickle_that_runs_code_is_refused(tmp_path):
    live = tmp_path / "live.pt"
    torch.save({"0.weight": Payload(tmp_path / "proof")}, live)
    torch.load(live, weights_only=False)  # the payload is real: a plain load runs it
    assert (tmp_path / "proof").exists()

    lm = tiny.tiny_lm("llama")
    folder = TunedLens.zeros(lm).save(tmp_path / "evil")
    marker = tmp_path / "marker"
    torch.save({"0.weight": Payload(marker), "0.bias": torch.zeros(32)}, folder / "params.pt")
    with pytest.raises(LensError, match=r"params\.pt cannot be loaded as plain tensors") as caught:
        TunedLens.load(folder, lm)
    assert isinstance(caught.value, LayerscopeError) and "state dict" in str(caught.value)
    assert not marker.exists()


def test_shapes_that_do_not_fit_are_named(tmp_path):
    lm3 = tiny.tiny_lm("llama")
    folder = TunedLens.zeros(lm3).save(tmp_path / "three")
    lm2 = tiny.tiny_lm("llama", n_layers=2)
    with pytest.raises(LensError, match=r"d_model=32 and 3 layers .* has d_model=32 and 2 layers"):
        TunedLens.load(folder, lm2)

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "d_model": 16}))
    with pytest.raises(LensError, match=r"d_model=16 .* has d_model=32"):
        TunedLens.load(folder, lm3)

    (folder / "config.json").write_text(json.dumps(config))
    params = torch.load(folder / "params.pt", weights_only=True)
    torch.save({k: v for k, v in params.items() if not k.startswith("2.")}, folder / "params.pt")
    with pytest.raises(LensError, match=r"holds 2 translators .* 3 layers"):
        TunedLens.load(folder, lm3)

    params["1.weight"] = torch.zeros(16, 16)
    torch.save(params, folder / "params.pt")
    with pytest.raises(LensError, match=r"1\.weight of shape \(16, 16\)"):
        TunedLens.load(folder, lm3)


def test_other_weights_warn_naming_both_hashes(tmp_path):
    lm = tiny.tiny_lm("llama")
    folder = TunedLens.zeros(lm).save(tmp_path / "lens")
    other = tiny.tiny_lm("llama", seed=1)
    with pytest.warns(UserWarning, match=f"{lm.info.weights_hash}.*{other.info.weights_hash}"):
        TunedLens.load(folder, other)


def test_a_lens_naming_another_base_model_without_a_weights_hash_warns(tmp_path):
    lm = tiny.tiny_lm("llama")
    folder = TunedLens.zeros(lm).save(tmp_path / "lens")
    config = json.loads((folder / "config.json").read_text())
    del config["layerscope"]  # a lens from the tuned-lens package: no weights hash
    for name, warns in (("EleutherAI/pythia-160m", True), ("someone/tiny-llama-nobos", False),
                        ("TINY_LLAMA_NOBOS", False)):
        (folder / "config.json").write_text(json.dumps({**config, "base_model_name_or_path": name}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            TunedLens.load(folder, lm)
        named = [w for w in caught if "names base model" in str(w.message)]
        assert bool(named) == warns, name
        if warns:
            assert "pythia-160m" in str(named[0].message) and "tiny-llama-nobos" in str(named[0].message)
