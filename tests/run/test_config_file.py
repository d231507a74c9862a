"""Config files: YAML and TOML, shared and per-study settings, validation that names the key, and
resolved configs that load back to the same settings."""

import pytest

from layerscope.run.config_file import SUITE, dump_configs, load_config_file, resolve_configs
from layerscope.study import ConfigError, StudyConfig


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_and_toml_spell_the_same_suite(tmp_path):
    yaml_file = write(tmp_path, "s.yaml", "studies: [phases, divergence]\nseed: 7\nlayers: [0, 2]\n"
                                          "phases:\n  n_bootstrap: 500\n  pooling: last\n")
    toml_file = write(tmp_path, "s.toml", 'studies = ["phases", "divergence"]\nseed = 7\nlayers = [0, 2]\n'
                                          '[phases]\nn_bootstrap = 500\npooling = "last"\n')
    configs = load_config_file(yaml_file)
    assert configs == load_config_file(toml_file)
    assert list(configs) == ["divergence", "phases"]  # suite order, whatever the file's order
    assert configs["phases"] == StudyConfig(study="phases", seed=7, layers="0,2", n_bootstrap=500, pooling="last")
    assert configs["divergence"] == StudyConfig(study="divergence", seed=7, layers="0,2")


def test_no_study_named_means_all_five_and_the_command_line_wins(tmp_path):
    configs = load_config_file(write(tmp_path, "s.yaml", "seed: 7\nbits: 3\n"), {"seed": 9, "models": ("m",)})
    assert list(configs) == list(SUITE)
    assert all(c.seed == 9 and c.models == ("m",) for c in configs.values())
    assert configs["ablation"].bits == 3  # a study's own setting reaches the study that reads it, and only it
    assert [n for n, c in configs.items() if "bits" in c.to_dict()] == ["ablation"]


def test_relative_paths_are_relative_to_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", "c.yaml", "study: divergence\ndataset: data/pairs.json\n")
    monkeypatch.chdir(tmp_path)
    assert load_config_file(path)["divergence"].dataset == str(tmp_path / "sub" / "data" / "pairs.json")
    assert resolve_configs(None, {"dataset": "x.csv"})["divergence"].dataset == str(tmp_path / "x.csv")


@pytest.mark.parametrize("names", [["divergence"], ["divergence", "phases", "ablation"]])
def test_a_dumped_config_loads_back_to_the_same_settings(tmp_path, names):
    configs = resolve_configs({"studies": names, "seed": 3, "drop_category": "c1", "ablation": None}
                              if "ablation" in names else {"studies": names, "seed": 3}, {"models": ("a", "b")})
    text = dump_configs({n: c.to_dict() for n, c in configs.items()})
    again = load_config_file(write(tmp_path, "resolved.yaml", text))
    assert again == configs


@pytest.mark.parametrize("text, message", [
    ("seed: 1\nsede: 2\n", "unknown setting 'sede'"),
    ("studies: [phases]\nphases: {n_boot: 5}\n", "unknown setting 'phases.n_boot'"),
    ("seed: '42'\n", "setting 'seed' must be an integer, got '42' (str)"),
    ("seed: 4.5\n", "setting 'seed' must be an integer"),
    ("seed: true\n", "setting 'seed' must be an integer"),
    ("ci_level: high\n", "setting 'ci_level' must be a number"),
    ("exclude_bos: 1\n", "setting 'exclude_bos' must be true or false"),
    ("models: [a, 3]\n", "setting 'models' must be a list of strings"),
    ("pooling: null\n", "setting 'pooling' cannot be empty"),
    ("study: phases\nstudies: [phases]\n", "either 'study' or 'studies'"),
    ("studies: [phases, nope]\n", "unknown study 'nope'"),
    ("studies: []\n", "non-empty list of study names"),
    ("studies: [phases]\ndivergence: {seed: 1}\n", "settings for 'divergence', which this config does not run"),
    ("- a\n- b\n", "must hold a mapping"),
    ("seed: [1\n", "is not valid YAML"),
    ("pooling: median\n", "unknown pooling 'median'"),
])
def test_bad_configs_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load_config_file(write(tmp_path, "bad.yaml", text))
    assert message in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="must end in .yaml, .yml or .toml"):
        load_config_file(write(tmp_path, "c.json", "{}"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config_file(write(tmp_path, "c.toml", "seed = = 3\n"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        (tmp_path / "b.yaml").write_bytes(b"seed: \xff\xfe\n")
        load_config_file(tmp_path / "b.yaml")
