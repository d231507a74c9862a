"""Loading straight to the device in the target dtype, and the default dtype (bfloat16 on CUDA, float32 on CPU)."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import tiny
from layerscope import ModelLoadError, load_model
from layerscope.models.load import default_dtype, resolve_dtype
from layerscope.study.config import ConfigError, StudyConfig


@pytest.fixture
def spy(monkeypatch):
    """Every call to ``AutoModelForCausalLM.from_pretrained``: its kwargs and the parameter dtypes and devices
    of the model it returned (before layerscope touched it)."""
    calls = []
    real = AutoModelForCausalLM.from_pretrained

    def from_pretrained(source, *args, **kwargs):
        out = real(source, *args, **kwargs)
        model = out[0] if isinstance(out, tuple) else out
        calls.append({"kwargs": kwargs, "dtypes": {p.dtype for p in model.parameters()},
                      "devices": {p.device for p in model.parameters()}})
        return out

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    return calls


def test_no_dtype_on_cpu_loads_float32(tmp_path, spy):
    folder = tiny.save(tmp_path / "m", "llama")
    lm = load_model(str(folder), device="cpu")
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}
    assert lm.info.dtype == "float32" and lm.info.device == "cpu"
    assert spy[0]["kwargs"]["dtype"] == torch.float32
    assert spy[0]["kwargs"]["device_map"] == {"": torch.device("cpu")}


def test_auto_on_cpu_is_float32_like_no_dtype(tmp_path):
    folder = tiny.save(tmp_path / "m", "llama")
    auto = load_model(str(folder), dtype="auto", device="cpu")
    plain = load_model(str(folder), dtype="float32", device="cpu")
    assert auto.info.dtype == "float32" and auto.info.weights_hash == plain.info.weights_hash


def test_bfloat16_is_loaded_in_bfloat16_onto_the_device_not_cast_afterwards(tmp_path, spy):
    folder = tiny.save(tmp_path / "m", "llama")  # saved in float32
    lm = load_model(str(folder), dtype="bfloat16", device="cpu")
    assert spy[0]["kwargs"]["dtype"] == torch.bfloat16
    assert spy[0]["kwargs"]["device_map"] == {"": torch.device("cpu")}
    assert spy[0]["dtypes"] == {torch.bfloat16} and spy[0]["devices"] == {torch.device("cpu")}
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16} and lm.info.dtype == "bfloat16"
    saved = load_file(folder / "model.safetensors")  # float32 on disk; bfloat16 is torch's round-to-nearest cast
    state = lm.model.state_dict()
    for name, tensor in saved.items():
        assert tensor.dtype == torch.float32
        assert torch.equal(state[name].view(torch.int16), tensor.to(torch.bfloat16).view(torch.int16)), name


def test_a_given_device_map_is_passed_on_as_it_is(tmp_path, spy):
    folder = tiny.save(tmp_path / "m", "llama")
    lm = load_model(str(folder), dtype="float32", device_map="auto")
    assert spy[0]["kwargs"]["device_map"] == "auto"
    assert lm.info.dtype == "float32"


def test_a_bfloat16_checkpoint_loads_bit_for_bit(tmp_path):
    folder = tmp_path / "bf16"
    tok = tiny.tokenizer(True)
    tiny.model("llama", len(tok)).to(torch.bfloat16).save_pretrained(folder)
    tok.save_pretrained(folder)
    saved = load_file(folder / "model.safetensors")
    assert {t.dtype for t in saved.values()} == {torch.bfloat16}
    lm = load_model(str(folder), dtype="bfloat16", device="cpu")
    state = lm.model.state_dict()
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}
    assert set(saved) <= set(state)
    for name, tensor in saved.items():
        assert torch.equal(state[name].view(torch.int16), tensor.view(torch.int16)), name


def test_default_dtype_follows_the_device_with_no_gpu_needed():
    assert default_dtype(torch.device("cuda")) == torch.bfloat16
    assert default_dtype(torch.device("cuda:1")) == torch.bfloat16
    assert default_dtype(torch.device("cpu")) == torch.float32
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("AUTO", "cpu") == torch.float32
    assert resolve_dtype("fp16", torch.device("cuda")) == torch.float16  # a named dtype wins over the device
    assert resolve_dtype("float32", torch.device("cuda")) == torch.float32


def test_a_bad_dtype_is_one_clear_error(tmp_path):
    folder = tiny.save(tmp_path / "m", "llama")
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8'; use auto, float32, float16 or bfloat16"):
        load_model(str(folder), dtype="float8", device="cpu")
    with pytest.raises(ConfigError, match="unknown dtype 'float8'; use auto"):
        StudyConfig(study="phases", models=("m",), dtype="float8")


@pytest.mark.parametrize("dtype", ["auto", None, "bf16", "float32"])
def test_the_config_accepts_auto_and_every_dtype_name(dtype):
    assert StudyConfig(study="phases", models=("m",), dtype=dtype).dtype == dtype


def test_the_config_defaults_to_auto():
    assert StudyConfig(study="phases", models=("m",)).dtype == "auto"
