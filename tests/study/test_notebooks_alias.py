"""``notebooks`` is the name of the method that reproduces the five research notebooks (``compat``) and of their
layer choice (``layers``); ``seed``, the name up to 0.4.0, still works until 0.5.0: it becomes ``notebooks`` where
it comes in (StudyConfig, the settings, ``extract``) with a DeprecationWarning that names the new spelling, at the
caller's line. A run folder written with ``seed`` loads as ``notebooks``, quietly. The random seed (``seed=42``)
is another setting and keeps its name."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

import tiny
from layerscope.engine.forward.activations import ExtractSettings
from layerscope.engine.forward.extract import _keyed, extract
from layerscope.errors import ExtractionError
from layerscope.modes import NOTEBOOKS, renamed_config
from layerscope.study import StudyResult
from layerscope.study.config import ConfigError, StudyConfig, parse_layers, select_layers

RENAMED = r"'seed' is deprecated: use (compat|layers) 'notebooks' .*0\.5\.0"


def old_spelling(call):
    """``call()`` under its old spelling: the value, and that it warned once, at this file's line."""
    with pytest.warns(DeprecationWarning, match=RENAMED) as caught:
        value = call()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1 and deprecations[0].filename == __file__
    return value


@pytest.mark.parametrize("study", ["phases", "divergence", "atlas"])
def test_compat_seed_is_compat_notebooks_with_a_warning(study):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        new = StudyConfig(study=study, compat="notebooks")
    old = old_spelling(lambda: StudyConfig(study=study, compat="seed"))
    assert old == new and old.compat == NOTEBOOKS and old.to_dict() == new.to_dict()
    assert old.layer_spec == new.layer_spec == "notebooks"


@pytest.mark.parametrize("study", ["phases", "atlas"])
def test_layers_seed_is_layers_notebooks_with_a_warning(study):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = StudyConfig(study=study, layers="notebooks")
    old = old_spelling(lambda: StudyConfig(study=study, layers="seed"))
    assert old == new and old.layers == "notebooks" and old.to_dict()["layers"] == "notebooks"
    assert select_layers(old.layer_spec, 30) == [0, 4, 8, 12, 16, 20, 24, 28, 30]


def test_the_layer_helpers_take_the_old_spelling_too():
    assert old_spelling(lambda: parse_layers(" seed ")) == parse_layers("notebooks") == "notebooks"
    assert old_spelling(lambda: select_layers("seed", 6)) == select_layers("notebooks", 6) == [0, 4, 6]


def test_the_random_seed_is_not_the_alias():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = StudyConfig(study="phases", seed=7)
    assert config.seed == 7 and config.compat is None and config.layer_spec == "all"


@pytest.mark.parametrize("bad", ["Seed", "notebook", "true"])
def test_an_unknown_compat_mode_names_notebooks(bad):
    with pytest.raises(ConfigError, match=rf"unknown compat mode '{bad}'; use 'notebooks' or leave it out"):
        StudyConfig(study="phases", compat=bad)


def test_an_unknown_layer_spec_names_notebooks():
    with pytest.raises(ConfigError, match="must be 'all', 'notebooks', a list"):
        StudyConfig(study="phases", layers=4)
    with pytest.raises(ConfigError, match="use 'all', 'notebooks' or comma-separated"):
        StudyConfig(study="phases", layers="seeds")


def test_extract_takes_compat_seed_as_notebooks_and_keeps_the_cache_key():
    lm = tiny.tiny_lm("llama")
    new = extract(lm, tiny.TEXTS[:4], compat="notebooks", cache=False)
    old = old_spelling(lambda: extract(lm, tiny.TEXTS[:4], compat="seed", cache=False))
    assert old.settings == new.settings and old.settings.compat == NOTEBOOKS and old.fingerprint == new.fingerprint
    assert _keyed(new.settings)["compat"] == "seed" and _keyed(ExtractSettings())["compat"] is None
    with pytest.raises(ExtractionError, match="use None \\(corrected\\) or 'notebooks'"):
        extract(lm, tiny.TEXTS[:4], compat="notebook", cache=False)


def test_the_cache_key_spells_the_mode_as_before_the_rename(monkeypatch):
    """Activations cached by 0.4.0 (whose settings said "seed") are still found: same fingerprint."""
    from layerscope.engine.forward import extract as module

    lm = tiny.tiny_lm("llama")
    now = extract(lm, tiny.TEXTS[:4], compat="notebooks", cache=False).fingerprint
    validate = module._validate
    monkeypatch.setattr(module, "_validate", lambda *args: dataclasses.replace(validate(*args), compat="seed"))
    assert extract(lm, tiny.TEXTS[:4], compat="notebooks", cache=False).fingerprint == now  # 0.4.0's settings


def test_settings_saved_before_the_rename_read_back_as_notebooks():
    saved = {**ExtractSettings(compat="notebooks").to_dict(), "compat": "seed"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file is a record: no warning
        assert ExtractSettings.from_dict(saved) == ExtractSettings(compat="notebooks")
    assert renamed_config({"compat": "seed", "layers": "seed", "seed": 3}) == {
        "compat": "notebooks", "layers": "notebooks", "seed": 3}
    assert renamed_config({"compat": None, "layers": "0,4"}) == {"compat": None, "layers": "0,4"}


def test_a_result_written_with_compat_seed_loads_as_notebooks(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    config = {"study": "phases", "compat": "seed", "layers": "seed", "seed": 42}  # as layerscope 0.4.0 wrote it
    (folder / "result.json").write_text(json.dumps({"schema_version": 1, "study": "phases", "config": config,
                                                    "manifest": {}, "summary": {"models": {}}}))
    tiny_table().to_csv(folder / "table.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = StudyResult.load(folder)
    assert (loaded.config["compat"], loaded.config["layers"], loaded.config["seed"]) == ("notebooks", "notebooks", 42)


def tiny_table():
    from layerscope.study.result import make_table

    return make_table([{"model": "m", "layer": 0, "n_layers": 2, "depth": 0.0, "pooling": "mean",
                        "metric": "r_centroid_pref", "value": 0.1}])
