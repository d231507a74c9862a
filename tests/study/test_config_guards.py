"""Config-file guards (issue 11): YAML keys given twice, alias bombs, TOML in a .yaml file, bounded
error messages, settings a study does not read, folders given as files, and local paths stored absolute."""

import json
import time

import pytest
import yaml

from layerscope.data import load_pairs
from layerscope.data.languages import load_languages
from layerscope.data.prompts import load_prompts
from layerscope.data.reference import load_phase_reference
from layerscope.errors import DatasetError
from layerscope.run.config_file import (
    MAX_ALIAS_REPEATS,
    dump_configs,
    load_config_file,
    read_config_file,
    resolve_configs,
)
from layerscope.studies.ablation.configs import load_configs, read_configs
from layerscope.study import ConfigError, StudyConfig


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, key, line, first", [
    ("study: phases\nseed: 1\nseed: 2\n", "seed", 3, 2),
    ("studies: [phases]\nphases:\n  n_bootstrap: 200\n  pooling: last\n  n_bootstrap: 300\n", "n_bootstrap", 5, 3),
    ("studies:\n  phases: {seed: 1}\n  divergence: {}\n  phases: {seed: 2}\n", "phases", 4, 2),
])
def test_a_yaml_key_given_twice_at_any_depth_names_the_key_and_lines(tmp_path, text, key, line, first):
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert f"line {line}: the key '{key}' appears twice in one mapping (first on line {first})" in str(err.value)


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine(tmp_path):
    text = ("base: &base {seed: 5}\nstudies: [phases, divergence]\nphases: {seed: 1}\ndivergence:\n  <<: *base\n"
            "  seed: 2\n")
    data = read_config_file(write(tmp_path, "c.yaml", text))
    assert data["phases"] == {"seed": 1} and data["divergence"] == {"seed": 2}  # an explicit key beats the merge


def alias_bomb(levels: int, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(["study: phases", *lines, f"layers: *a{levels}"]) + "\n"


def test_an_alias_bomb_is_refused_fast_with_a_short_message(tmp_path):
    path = write(tmp_path, "c.yaml", alias_bomb(8))
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert time.perf_counter() - start < 2
    # nodes with aliases expanded: level i has 1 + 9 * size(i - 1) nodes, level 0 has 10; the root mapping, its
    # 11 keys and the scalar 'phases' add 13, and 'layers' repeats level 8. 31 of them are distinct nodes.
    sizes = [10]
    for _ in range(8):
        sizes.append(1 + 9 * sizes[-1])
    repeats = 13 + sum(sizes) + sizes[-1] - 31
    assert f"repeat {repeats:,} values, more than the {MAX_ALIAS_REPEATS} allowed" in str(err.value)
    assert len(str(err.value)) - len(str(path)) < 140


def test_small_aliases_and_a_recursive_one(tmp_path):
    text = "studies: [phases, divergence]\nphases: {layers: &l [0, 1]}\ndivergence: {layers: *l}\n"
    configs = load_config_file(write(tmp_path, "ok.yaml", text))
    assert configs["phases"].layers == configs["divergence"].layers == "0,1"
    with pytest.raises(ConfigError, match="line 1: a YAML alias refers to a value that contains it"):
        load_config_file(write(tmp_path, "rec.yaml", "seed: &a [*a]\n"))


def test_a_long_value_is_cut_in_the_message(tmp_path):
    path = write(tmp_path, "c.yaml", "study: phases\npooling: " + "x" * 100_000 + "\n")
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert str(err.value) == "unknown pooling '" + "x" * 76 + "...; use mean, last or first"  # 80 characters of it
    path = write(tmp_path, "d.yaml", f"study: phases\nseed: [{', '.join(['7'] * 50_000)}]\n")
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    assert "setting 'seed' must be an integer, got [7, 7," in str(err.value)
    assert len(str(err.value)) - len(str(path)) < 140


@pytest.mark.parametrize("name, text, message", [
    ("c.yaml", 'study = "phases"\nseed = 3\n', "c.yaml holds TOML, not YAML; rename it to c.toml"),
    ("c.yml", 'studies = ["phases"]\n[phases]\nn_bootstrap = 300\n', "c.yml holds TOML, not YAML; rename it to c.toml"),
    ("c.toml", "study: phases\nseed: 3\n", "c.toml holds YAML, not TOML; rename it to c.yaml"),
])
def test_the_other_format_is_recognised(tmp_path, name, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config_file(write(tmp_path, name, text))


def test_a_folder_given_as_a_file_says_so(tmp_path):
    folder = tmp_path / "inputs.json"
    folder.mkdir()
    cases = [(load_pairs, "dataset file", "--dataset"), (load_languages, "texts file", "--texts"),
             (load_prompts, "prompts file", "--prompts"), (load_phase_reference, "reference file", "--reference"),
             (read_configs, "configs file", "--configs")]
    for load, what, option in cases:
        with pytest.raises(DatasetError) as err:
            load(folder)
        assert str(err.value).startswith(f"{what} {folder} is a folder, not a file; pass a file to {option}")
    folder_yaml = tmp_path / "c.yaml"
    folder_yaml.mkdir()
    with pytest.raises(ConfigError, match=f"config file {folder_yaml} is a folder, not a file"):
        load_config_file(folder_yaml)


def test_configs_are_checked_without_a_model_and_without_building_ranges(tmp_path):
    path = write(tmp_path, "c.json", json.dumps({"big": [10**9], "odd": {"quantize": [1, 3]}}))
    start = time.perf_counter()
    configs = read_configs(path)
    assert sorted(configs["big"].quantize) == [10**9] and sorted(configs["odd"].quantize) == [1, 3]
    with pytest.raises(DatasetError, match="config 'big': layer 1000000000 is out of range; this model has "
                                           "decoder layers 0 to 4"):
        load_configs(path, 5)
    assert time.perf_counter() - start < 1
    with pytest.raises(DatasetError, match="config 'neg': layer -2 is negative"):
        read_configs(write(tmp_path, "n.json", '{"neg": [1, -2]}'))
    with pytest.raises(DatasetError, match="appears twice"):
        read_configs(write(tmp_path, "d.json", '{"a": [1], "a": [2]}'))


def collect(data, overrides, **kwargs):
    messages = []
    configs = resolve_configs(data, overrides, warn=messages.append, **kwargs)
    return configs, messages


def test_settings_no_study_reads_are_warned_about_once(tmp_path):
    # issue 13: an option the chosen study does not read is an error (it used to be a warning)
    with pytest.raises(ConfigError, match=r"--bits is not used by anisotropy; leave it out \(see `layerscope run "
                                          "anisotropy --help`"):
        collect({"study": "anisotropy"}, {"bits": 3, "seed": 1, "n_bootstrap": 500})
    configs, warnings = collect({"study": "anisotropy"}, {"seed": 1})
    assert warnings == [] and configs["anisotropy"].seed == 1
    _, warnings = collect({"studies": ["ablation", "phases"]}, {"bits": 3, "n_bootstrap": 500})
    assert warnings == []  # a suite uses an option when any of its studies reads it
    _, warnings = collect({"studies": ["divergence", "scaling", "anisotropy"], "sweep": True,
                           "divergence": {"bits": 3}, "anisotropy": {"bits": 4}}, {}, source="s.yaml")
    assert warnings == ["s.yaml: setting 'sweep' is not used by divergence, scaling or anisotropy; ignored",
                        "s.yaml: setting 'divergence.bits' is not used by divergence; ignored"]  # bits 4: the default


def test_an_unused_setting_naming_a_missing_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"--dataset names {tmp_path / 'missing.json'}, which does not exist; "
                                          "it is not used by anisotropy anyway, so leave it out"):
        collect({"study": "anisotropy"}, {"dataset": "missing.json"})
    (tmp_path / "data").mkdir()
    with pytest.raises(ConfigError, match="which is a folder, not a file; it is not used by ablation"):
        collect({"study": "ablation", "prompts": "data"}, {}, base=tmp_path, source="c.yaml")
    write(tmp_path, "p.txt", "a\nb\n")
    with pytest.raises(ConfigError, match="--prompts is not used by ablation; leave it out"):  # issue 13: an error
        collect({"study": "ablation"}, {"prompts": "p.txt"})


@pytest.mark.parametrize("names", [["anisotropy"], ["divergence", "anisotropy", "ablation"]])
def test_a_resolved_config_reruns_without_warnings(tmp_path, names):
    configs, _ = collect({"studies": names}, {"seed": 3} if len(names) == 1 else {"bits": 3})
    path = write(tmp_path, "config.yaml", dump_configs({n: c.to_dict() for n, c in configs.items()}))
    warnings = []
    again = load_config_file(path, warn=warnings.append)
    assert again == configs
    assert warnings == []  # issue 13: each study's section holds only its own settings


def test_local_models_and_files_are_stored_absolute(tmp_path, monkeypatch):
    (tmp_path / "work" / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "work" / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "elsewhere").mkdir()
    path = write(tmp_path / "work", "c.yaml", "study: phases\nmodels: [models/tiny, m.gguf, smollm2-135m, "
                                              "EleutherAI/pythia-70m@step1000, models/tiny@v1]\ndataset: d.json\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config_file(path)["phases"]
    work = tmp_path / "work"
    assert config.models == (str(work / "models" / "tiny"), str(work / "m.gguf"), "smollm2-135m",
                             "EleutherAI/pythia-70m@step1000", f"{work / 'models' / 'tiny'}@v1")
    assert config.dataset == str(work / "d.json")
    monkeypatch.chdir(work)
    python = StudyConfig(study="anisotropy", models=["./models/tiny", "no-such-folder"], prompts="p.txt")
    assert python.models == (str(work / "models" / "tiny"), "no-such-folder") and python.prompts == str(work / "p.txt")
    dumped = yaml.safe_load(dump_configs({"anisotropy": python.to_dict()}))
    assert dumped["models"] == [str(work / "models" / "tiny"), "no-such-folder"]


def test_layers_as_a_list_in_python():
    assert StudyConfig(study="phases", layers=[0, 4, 8]) == StudyConfig(study="phases", layers="0,4,8")
    assert StudyConfig(study="phases", layers=(8, 0)).layers == "8,0"
    with pytest.raises(ConfigError, match=r"layers \[0, '4'\] must be whole numbers"):
        StudyConfig(study="phases", layers=[0, "4"])
    with pytest.raises(ConfigError, match="layers 4 must be 'all', 'notebooks', a list"):
        StudyConfig(study="phases", layers=4)
    with pytest.raises(ConfigError, match="models must be a list of models"):
        StudyConfig(study="phases", models="smollm2-135m")
