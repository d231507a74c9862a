"""The Python API (issue 11): a wrapped model wherever a model name goes, layers as a list, and
Activations.load on a folder as StudyResult.load takes one."""

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import tiny
from layerscope.cli import app
from layerscope.engine import Activations, extract
from layerscope.errors import LayerscopeError
from layerscope.models import load_model
from layerscope.run import run_study
from layerscope.study import ConfigError, StudyConfig, StudyResult

TEXTS = {"en": {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose by four percent."]},
         "xx": {"resource": "low", "texts": ["Bread dough doubles in size.", "Ice floats on water."]}}


@pytest.fixture(scope="module")
def lm():
    return tiny.tiny_lm("llama", adds_bos=False)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "pairs.json").write_text(json.dumps(tiny.pairs(4, 6)))
    (root / "texts.json").write_text(json.dumps(TEXTS))
    return root


def test_load_model_returns_a_loaded_model_as_it_is(lm):
    assert load_model(lm) is lm


def test_a_wrapped_model_stands_where_a_name_does(lm):
    config = StudyConfig(study="divergence", models=[lm, "smollm2-135m"])
    assert config.models[0] is lm and config.model_names == ("tiny-llama-nobos", "smollm2-135m")
    assert config.to_dict()["models"] == ["tiny-llama-nobos", "smollm2-135m"]
    with pytest.raises(ConfigError, match=r"a model is listed twice in \['tiny-llama-nobos', 'tiny-llama-nobos'\]"):
        StudyConfig(study="divergence", models=[lm, tiny.tiny_lm("llama", adds_bos=False, seed=1)])
    with pytest.raises(ConfigError, match="model 3 is neither a model spec"):
        StudyConfig(study="divergence", models=[lm, 3])


@pytest.mark.parametrize("study, settings", [
    ("divergence", {"dataset": "pairs.json", "n_permutations": 100, "layers": [0, 2, 3]}),
    ("phases", {"dataset": "pairs.json", "n_permutations": 100, "n_bootstrap": 100}),
    ("anisotropy", {}),
    ("ablation", {"texts": "texts.json"}),
])
def test_every_study_runs_on_a_wrapped_model(lm, inputs, tmp_path, monkeypatch, study, settings):
    monkeypatch.chdir(inputs)
    weights = {name: p.detach().clone() for name, p in lm.model.named_parameters()}
    result = run_study(StudyConfig(study=study, models=[lm], **settings))
    assert list(result.summary["models"]) == ["tiny-llama-nobos"]
    assert result.config["models"] == ["tiny-llama-nobos"]
    assert [m["name"] for m in result.manifest["models"]] == ["tiny-llama-nobos"]
    assert set(result.table["model"]) == {"tiny-llama-nobos"}
    if "layers" in settings:
        assert sorted(set(result.table["layer"].dropna())) == [0, 2, 3]
    assert all(torch_equal(p, weights[name]) for name, p in lm.model.named_parameters())  # left as it was
    result.write(tmp_path / "run")
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["models"] == ["tiny-llama-nobos"]
    assert StudyResult.load(tmp_path / "run").summary.keys() == result.summary.keys()


def torch_equal(a, b) -> bool:
    return bool((a.detach() == b).all())


def test_activations_load_takes_the_file_or_its_folder(lm, tmp_path):
    acts = extract(lm, ["One cat sat here.", "Two dogs ran far away."], cache=False)
    acts.save(tmp_path / "activations.npz")
    for path in (tmp_path / "activations.npz", tmp_path, str(tmp_path)):
        loaded = Activations.load(path)
        assert loaded.texts == acts.texts and loaded.fingerprint == acts.fingerprint
        np.testing.assert_array_equal(loaded.pooled["mean"], acts.pooled["mean"])
        np.testing.assert_array_equal(loaded.nll_sum, acts.nll_sum)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LayerscopeError, match="holds no activations.npz; pass a folder written by `layerscope "
                                              "extract`"):
        Activations.load(tmp_path / "empty")
    with pytest.raises(LayerscopeError, match="does not exist"):
        Activations.load(tmp_path / "missing.npz")


def test_activations_load_reads_the_extract_commands_folder(tmp_path, inputs):
    model = tiny.save(tmp_path / "tm", "llama", adds_bos=False)
    result = CliRunner().invoke(app, ["extract", "--model", str(model), "--dataset", str(inputs / "pairs.json"),
                                      "--out", str(tmp_path / "ex")])
    assert result.exit_code == 0, result.output
    acts = Activations.load(tmp_path / "ex")
    manifest = json.loads((tmp_path / "ex" / "manifest.json").read_text())
    assert acts.fingerprint == manifest["fingerprint"] and acts.n_texts == 2 * 4 * 6
    assert list(acts.pooled["mean"].shape) == manifest["arrays"]["pooled_mean"]
