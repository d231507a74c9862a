import pytest

from layerscope import ModelLoadError
from layerscope.run import get_study
from layerscope.study import ConfigError, StudyConfig
from layerscope.study import per_model as runner
from layerscope.study.config import select_layers


def test_seed_layers_are_every_fourth_plus_the_last():
    assert select_layers("notebooks", 30) == [0, 4, 8, 12, 16, 20, 24, 28, 30]
    assert select_layers("notebooks", 32) == [0, 4, 8, 12, 16, 20, 24, 28, 32]
    assert select_layers("all", 3) == [0, 1, 2, 3]
    assert select_layers(" 8, 0,4 ", 30) == [0, 4, 8]


def test_compat_seed_implies_seed_layers_unless_layers_are_given():
    assert StudyConfig(study="phases", compat="notebooks").layer_spec == "notebooks"
    assert StudyConfig(study="phases").layer_spec == "all"
    assert StudyConfig(study="phases", compat="notebooks", layers="0,30").layer_spec == "0,30"


@pytest.mark.parametrize("kwargs, message", [
    ({"layers": "0,x"}, "bad layer list"),
    ({"layers": "-1,3"}, "negative"),
    ({"compat": "old"}, "unknown compat mode"),
    ({"pooling": "max"}, "unknown pooling"),
    ({"n_bootstrap": 10}, "too few"),
    ({"ci_level": 1.5}, "confidence level"),
    ({"models": ("a", "a")}, "listed twice"),
    ({"device_map": "balanced"}, "unknown device map 'balanced'; use 'auto' or leave it out"),
])
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        StudyConfig(study="phases", **kwargs)


def test_layer_out_of_range_names_the_model():
    with pytest.raises(ConfigError, match="layer 31 is out of range for smol, which has layers 0 to 30"):
        select_layers("0,31", 30, "smol")


@pytest.mark.parametrize("study", ["phases", "anisotropy", "ablation"])
def test_every_study_loads_its_models_with_the_device_map(monkeypatch, study):
    module = runner  # one runner loads every study's models
    asked = {}

    def fake_load(spec, **kwargs):
        asked.update(kwargs, spec=spec)
        raise ModelLoadError("stop here")

    monkeypatch.setattr(module, "load_model", fake_load)
    with pytest.raises(ModelLoadError, match="stop here"):
        get_study(study).run(StudyConfig(study=study, models=("m",), device_map="auto"))
    assert asked == {"spec": "m", "dtype": "auto", "device": None, "device_map": "auto"}
