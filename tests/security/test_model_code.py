"""No code that comes with a model or sits in the cache runs: a model folder whose config.json or
tokenizer_config.json names its own Python code (``auto_map``) is refused before anything is imported, weights in
a pickle load only as tensors, and ``.npy`` files planted in the activation cache are never unpickled.

Every planted file is a live bomb: a pickle whose ``__reduce__`` touches a marker file, or a Python module that
touches one when imported. Each test first checks (where that is harmless) that the bomb does go off when
unpickled, then that layerscope's loading leaves the marker absent.

    .venv/bin/python -m pytest -q tests/security/test_model_code.py
"""

import ast
import json
import pathlib
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import layerscope
import tiny
from layerscope import ExtractionError, ModelLoadError, extract, load_model
from layerscope.engine import Activations
from layerscope.models import LoadedModel

SRC = Path(layerscope.__file__).parent


class Bomb:
    """Unpickling it creates ``marker`` (what a malicious checkpoint does with any callable it names)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def check_live(tmp_path: Path) -> None:
    """The bomb works: plain ``pickle.loads`` creates the marker (so a marker left absent means nothing ran)."""
    probe = tmp_path / "probe-marker"
    pickle.loads(pickle.dumps(Bomb(probe)))
    assert probe.exists()


def code_files(folder: Path, marker: Path) -> dict:
    """Python files beside the model that create ``marker`` when imported, and the auto_map entries naming them."""
    for module in ("configuration_evil", "modeling_evil", "tokenization_evil"):
        (folder / f"{module}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return {"config.json": {"AutoConfig": "configuration_evil.EvilConfig",
                            "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
            "tokenizer_config.json": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_a_model_that_needs_its_own_code_is_refused_and_none_of_it_runs(tmp_path, where):
    folder = tiny.save(tmp_path / "custom", "llama")
    marker = tmp_path / "code-ran"
    auto_map = code_files(folder, marker)[where]
    data = json.loads((folder / where).read_text())
    (folder / where).write_text(json.dumps({**data, "auto_map": auto_map}))

    with pytest.raises(ModelLoadError) as error:
        load_model(str(folder), device="cpu")
    message = str(error.value)
    assert f"({where} has an auto_map naming" in message and "evil.py" in message
    assert "needs its own Python code" in message and "layerscope never runs" in message
    assert "trust_remote_code=True" in message and "LoadedModel.wrap(model, tokenizer, name=" in message
    assert not marker.exists()


def test_the_hand_over_the_error_names_works(tmp_path):
    """``LoadedModel.wrap(model, tokenizer, name=...)`` then ``load_model(lm)``: the route the error describes."""
    folder = tiny.save(tmp_path / "plain", "llama")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    lm = LoadedModel.wrap(model, tokenizer, name="my-model")
    assert load_model(lm) is lm and lm.info.name == "my-model" and lm.info.n_layers == 3


def test_loading_asks_transformers_for_no_code_and_weights_only(tmp_path, monkeypatch):
    """What ``load_model`` passes to ``from_pretrained``, recorded on the way through."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    seen = {}
    for auto in (AutoModelForCausalLM, AutoTokenizer):
        original = auto.from_pretrained.__func__

        def spy(cls, *args, _original=original, _name=auto.__name__, **kwargs):
            seen[_name] = kwargs
            return _original(cls, *args, **kwargs)

        monkeypatch.setattr(auto, "from_pretrained", classmethod(spy))
    load_model(str(tiny.save(tmp_path / "plain", "llama")), device="cpu")
    assert seen["AutoTokenizer"]["trust_remote_code"] is False
    model_kwargs = seen["AutoModelForCausalLM"]
    assert model_kwargs["trust_remote_code"] is False and model_kwargs["weights_only"] is True
    assert model_kwargs["use_safetensors"] is True  # the folder has model.safetensors: never a .bin beside it


def keyword_calls(name: str) -> list[tuple[str, int, ast.expr]]:
    """(file, line, value) of every call in layerscope's source that passes the keyword ``name``."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                found += [(str(path.relative_to(SRC)), node.lineno, kw.value) for kw in node.keywords if kw.arg == name]
    return found


def test_no_call_in_the_source_trusts_remote_code_or_unpickles():
    """Read off the source itself: every ``trust_remote_code=`` is the constant False, every ``weights_only=``
    True, every ``allow_pickle=`` False, every ``np.load`` says ``allow_pickle=False``, no pickle or joblib load,
    and the one ``torch.load`` (a tuned lens's params.pt) says ``weights_only``."""
    for keyword, safe in (("trust_remote_code", False), ("weights_only", True), ("allow_pickle", False)):
        for file, line, value in keyword_calls(keyword):
            assert isinstance(value, ast.Constant) and value.value is safe, f"{file}:{line} {keyword}"
    assert keyword_calls("trust_remote_code")  # the loading code does pass it
    loads = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "np"):
                loads.append((path.name, node.lineno, {kw.arg for kw in node.keywords}))
    assert len(loads) >= 3 and all("allow_pickle" in kws for _, _, kws in loads), loads
    unpickling = ("pickle.load(", "pickle.loads(", "joblib.load(")
    assert not [p.name for p in SRC.rglob("*.py") if any(call in p.read_text() for call in unpickling)]
    # torch.load only for a tuned lens's params.pt, and only as tensors (weights_only=True, checked above)
    torch_loads = [(path.name, node.lineno, {kw.arg for kw in node.keywords}) for path in SRC.rglob("*.py")
                   for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                   and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"]
    assert [(name, "weights_only" in kws) for name, _, kws in torch_loads] == [("tuned_io.py", True)]


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_a_pickled_checkpoint_that_names_code_is_refused_and_never_runs(tmp_path, how):
    check_live(tmp_path)
    folder = tiny.save(tmp_path / "bin", "llama")
    for path in folder.glob("*.safetensors"):
        path.unlink()
    marker = tmp_path / "unpickled"
    weights = {"model.embed_tokens.weight": Bomb(marker)}
    if how == "pickle":
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(weights, protocol=2))
    else:
        torch.save(weights, folder / "pytorch_model.bin")

    with pytest.raises(ModelLoadError) as error:
        load_model(str(folder), device="cpu")
    message = str(error.value)
    assert f"the weights of {folder} are a pickle (.bin) that holds more than tensors" in message
    assert "Unsupported global" in message and "safetensors" in message
    assert not marker.exists()


def test_a_plain_tensor_checkpoint_still_loads_as_tensors(tmp_path):
    """A ``pytorch_model.bin`` of tensors only (what older checkpoints ship) loads, with the saved values."""
    folder = tiny.save(tmp_path / "bin", "llama")
    reference = tiny.model("llama", len(tiny.tokenizer(True)))  # the same seed: the weights tiny.save wrote
    for path in folder.glob("*.safetensors"):
        path.unlink()
    torch.save(reference.state_dict(), folder / "pytorch_model.bin")
    lm = load_model(str(folder), device="cpu")
    loaded = lm.model.state_dict()
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0)


def cache_entry(cache_root: Path) -> Path:
    (folder,) = [p for p in cache_root.glob("activations/*/*") if p.is_dir()]
    return folder


@pytest.mark.parametrize("victim", ["order.npy", "pooled_mean.npy", "nll_sum.npy"])
def test_an_object_array_planted_in_the_cache_is_a_miss_and_never_unpickled(isolated_cache, tmp_path, victim):
    check_live(tmp_path)
    lm = tiny.tiny_lm("llama")
    clean = extract(lm, tiny.TEXTS, batch_size=4)
    marker = tmp_path / "unpickled"
    np.save(cache_entry(isolated_cache) / victim, np.array([Bomb(marker)] * len(tiny.TEXTS), dtype=object),
            allow_pickle=True)

    again = extract(lm, tiny.TEXTS, batch_size=4)
    assert not marker.exists()
    assert again.stats.batches_computed == 3 and again.stats.batches_reused == 0  # nothing of it trusted
    for pooling in clean.pooled:
        np.testing.assert_array_equal(np.asarray(again.pooled[pooling]), np.asarray(clean.pooled[pooling]))
    np.testing.assert_array_equal(again.nll_sum, clean.nll_sum)
    assert np.load(cache_entry(isolated_cache) / victim, allow_pickle=False).dtype != object  # written anew
    assert extract(lm, tiny.TEXTS, batch_size=4).stats.batches_computed == 0


def test_a_saved_activations_file_with_pickled_objects_is_refused(isolated_cache, tmp_path):
    check_live(tmp_path)
    acts = extract(tiny.tiny_lm("llama"), tiny.TEXTS[:3], cache=False)
    path = tmp_path / "acts.npz"
    acts.save(path)
    with np.load(path) as z:
        arrays = {key: z[key] for key in z.files}
    marker = tmp_path / "unpickled"
    arrays["nll_sum"] = np.array([Bomb(marker)] * 3, dtype=object)
    np.savez(path, **arrays)

    with pytest.raises(ExtractionError, match="holds pickled Python objects, which layerscope never loads"):
        Activations.load(path)
    assert not marker.exists()
