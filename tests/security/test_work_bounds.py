"""Work is bounded before it starts (issue 26): every setting that multiplies work (resamples, permutations,
layers, tokens per text, texts per batch, models, sweep tasks, Ray workers) has a documented upper bound, checked
when the config is built. Exceeding one is one ``error:`` line naming the option, the limit and the fix, exit
status 2, no model loaded and no output folder."""

import hashlib
import sys

import pytest
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.study import StudyConfig
from layerscope.study.config import ConfigError
from layerscope.study.settings import (
    BOUNDS,
    MAX_BATCH_SIZE,
    MAX_BOOTSTRAP,
    MAX_GPUS_PER_TASK,
    MAX_LAYER,
    MAX_LENGTH,
    MAX_MODELS,
    MAX_PERMUTATIONS,
    MAX_WORKERS,
    check_count,
)
from layerscope.sweep import SweepPlan

runner = CliRunner()


def snapshot(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    """``load_model`` raises wherever layerscope holds it: a bound must stop the run before any model loads."""
    import layerscope.models.load  # noqa: F401 - where every other binding comes from

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for name, module in list(sys.modules.items()):
        if name.startswith("layerscope") and callable(getattr(module, "load_model", None)):
            monkeypatch.setattr(module, "load_model", refuse)


def test_the_documented_bounds():
    """The numbers the README table lists."""
    assert (MAX_BOOTSTRAP, MAX_PERMUTATIONS, MAX_LAYER, MAX_LENGTH, MAX_BATCH_SIZE) == (100_000, 100_000, 4096,
                                                                                        131_072, 4096)
    assert (MAX_MODELS, MAX_WORKERS, MAX_GPUS_PER_TASK) == (10_000, 1024, 64)
    assert {option: bound[:2] for option, bound in BOUNDS.items()} == {
        "--n-bootstrap": (100, 100_000), "--n-permutations": (100, 100_000), "--layers": (0, 4096),
        "--max-length": (2, 131_072), "--batch-size": (1, 4096), "models per study (--model)": (0, 10_000),
        "tasks per sweep (models x revisions)": (1, 10_000), "--workers": (1, 1024)}
    assert all(isinstance(why, str) and why for _, _, why in BOUNDS.values())


ZEROS = ",".join(["0"] * (MAX_LAYER + 2))
"""A --layers list one item longer than the limit (4,098 items, every one layer 0)."""

TASKS = "".join(f"  - step{i}\n" for i in range(MAX_MODELS + 1))
"""10,001 revisions: one model swept at each is one task over the limit."""

# (name, files, arguments after `layerscope`, what the error line holds)
CASES = [
    ("--n-bootstrap above the limit", {}, ["run", "phases", "--n-bootstrap", "100001"],
     "--n-bootstrap 100,001 is above the limit of 100,000; use 100 to 100,000"),
    ("ablation --n-bootstrap 10**9", {}, ["run", "ablation", "--n-bootstrap", str(10**9)],
     "--n-bootstrap 1,000,000,000 is above the limit of 100,000"),
    ("--n-permutations above the limit", {}, ["run", "divergence", "--n-permutations", "100001"],
     "--n-permutations 100,001 is above the limit of 100,000; use 100 to 100,000"),
    ("scaling --n-permutations 10**12", {}, ["run", "scaling", "--n-permutations", str(10**12)],
     "--n-permutations 1,000,000,000,000 is above the limit of 100,000"),
    ("suite --n-permutations above the limit", {}, ["run", "--n-permutations", "200000"],
     "--n-permutations 200,000 is above the limit of 100,000"),
    ("layer index above the limit", {}, ["run", "phases", "--layers", "0,4097"],
     "layer 4097 in --layers is above the limit of 4,096; list layers from 0 to 4,096"),
    ("layer index 10**30", {}, ["run", "divergence", "--layers", str(10**30)],
     f"layer {10**30} in --layers is above the limit of 4,096"),
    ("too many layers listed", {}, ["run", "divergence", "--layers", ZEROS],
     "--layers lists 4,098 layers, above the limit of 4,097 (layers 0 to 4,096)"),
    ("--max-length above the limit", {}, ["run", "anisotropy", "--max-length", "131073"],
     "--max-length 131,073 is above the limit of 131,072; use 2 to 131,072"),
    ("--max-length below the minimum", {}, ["run", "anisotropy", "--max-length", "1"],
     "--max-length 1 is too small; use at least 2"),
    ("--batch-size above the limit", {}, ["run", "divergence", "--batch-size", "4097"],
     "--batch-size 4,097 is above the limit of 4,096; use 1 to 4,096"),
    ("--reference-lstar above the limit", {}, ["run", "anisotropy", "--reference-lstar", "4097"],
     "--reference-lstar 4,097 is above the limit of 4,096"),
    ("YAML config n_bootstrap 10**9", {"c.yaml": "study: phases\nn_bootstrap: 1000000000\n"},
     ["run", "--config", "c.yaml"], "--n-bootstrap 1,000,000,000 is above the limit of 100,000"),
    ("TOML config layer list", {"c.toml": 'study = "divergence"\nlayers = [0, 99999]\n'},
     ["run", "--config", "c.toml"], "layer 99999 in --layers is above the limit of 4,096"),
    ("suite config per-study section", {"c.yaml": "studies: [divergence, phases]\nphases: {n_bootstrap: 500000}\n"},
     ["run", "--config", "c.yaml"], "--n-bootstrap 500,000 is above the limit of 100,000"),
    ("sweep of too many tasks", {"s.yaml": f"study: scaling\nmodels: [org/a]\nrevisions:\n{TASKS}"},
     ["sweep", "--config", "s.yaml", "--out", "out"],
     "tasks per sweep (models x revisions) 10,001 is above the limit of 10,000"),
    ("sweep file n_permutations above the limit", {"s.yaml": "study: scaling\nmodels: [org/a]\n"
                                                             "n_permutations: 100001\n"},
     ["sweep", "--config", "s.yaml", "--out", "out"], "--n-permutations 100,001 is above the limit of 100,000"),
    ("--workers above the limit", {}, ["run", "scaling", "--executor", "ray", "--workers", "5000"],
     "--workers 5,000 is above the limit of 1,024; use 1 to 1,024"),
    ("--gpus-per-task above the limit", {"s.yaml": "study: scaling\nmodels: [org/a]\n"},
     ["sweep", "--config", "s.yaml", "--executor", "ray", "--gpus-per-task", "100", "--out", "out"],
     "--gpus-per-task 100.0 is out of range; use 0 to 64"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_bound_exceeded_is_one_error_exit_2_no_model_and_no_output(tmp_path, monkeypatch, case):
    _, files, args, message = case
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    command = [*args, *([] if "--config" in args or "--model" in args else ["--model", "smollm2-135m"]),
               *([] if "--out" in args else ["--out", "out"])]
    before = snapshot(tmp_path)
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output  # a model load would raise AssertionError: exit 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    assert message in lines[0], lines[0]
    assert snapshot(tmp_path) == before  # no out/, no partial folder


@pytest.mark.parametrize("study, kwargs, message", [
    ("phases", {"n_bootstrap": MAX_BOOTSTRAP + 1}, "n_bootstrap 100,001 is above the limit of 100,000"),
    ("ablation", {"n_bootstrap": 99}, "n_bootstrap 99 is too small; use at least 100"),
    ("divergence", {"n_permutations": MAX_PERMUTATIONS + 1}, "n_permutations 100,001 is above the limit"),
    ("scaling", {"layers": [0, MAX_LAYER + 1]}, "layer 4097 in layers is above the limit of 4,096"),
    ("phases", {"layers": list(range(MAX_LAYER + 2))}, "layers lists 4,098 layers"),
    ("anisotropy", {"max_length": MAX_LENGTH + 1}, "max_length 131,073 is above the limit of 131,072"),
    ("divergence", {"batch_size": MAX_BATCH_SIZE + 1}, "batch_size 4,097 is above the limit of 4,096"),
    ("divergence", {"batch_size": 2.5}, "batch_size must be a whole number from 1 to 4,096, got 2.5"),
    ("divergence", {"batch_size": True}, "batch_size must be a whole number from 1 to 4,096, got True"),
    ("phases", {"n_bootstrap": "1e9"}, "n_bootstrap must be a whole number from 100 to 100,000, got '1e9'"),
    ("anisotropy", {"reference_lstar": MAX_LAYER + 1}, "reference_lstar 4,097 is above the limit of 4,096"),
    ("divergence", {"models": tuple(f"org/m{i}" for i in range(MAX_MODELS + 1))},
     "models per study (--model) 10,001 is above the limit of 10,000"),
])
def test_python_api_bounds_are_config_errors_in_python_spelling(study, kwargs, message):
    with pytest.raises(ConfigError) as err:
        StudyConfig(study=study, **kwargs)
    assert message in str(err.value), str(err.value)


@pytest.mark.parametrize("study, kwargs", [
    ("phases", {"n_bootstrap": MAX_BOOTSTRAP}),
    ("ablation", {"n_bootstrap": 100}),
    ("divergence", {"n_permutations": MAX_PERMUTATIONS, "layers": [0, MAX_LAYER]}),
    ("phases", {"layers": ",".join(map(str, range(MAX_LAYER + 1)))}),  # every layer 0..4096, once each
    ("anisotropy", {"max_length": MAX_LENGTH, "batch_size": MAX_BATCH_SIZE, "reference_lstar": MAX_LAYER}),
    ("scaling", {"models": tuple(f"org/m{i}" for i in range(MAX_MODELS))}),
])
def test_values_at_the_limits_are_accepted(study, kwargs):
    config = StudyConfig(study=study, **kwargs)
    for key, value in kwargs.items():
        expected = ",".join(map(str, value)) if key == "layers" and isinstance(value, list) else value
        assert getattr(config, key) == expected


def test_sweep_bounds_in_python():
    base = StudyConfig(study="scaling", models=("org/a", "org/b"))
    revisions = tuple(f"step{i}" for i in range(MAX_MODELS // 2 + 1))  # 2 x 5,001 = 10,002 tasks
    with pytest.raises(ConfigError, match="tasks per sweep \\(models x revisions\\) 10,002 is above the limit"):
        SweepPlan(base, revisions=revisions)
    assert len(SweepPlan(base, revisions=revisions[:-1]).specs) == MAX_MODELS
    with pytest.raises(ConfigError, match="workers 1,025 is above the limit of 1,024"):
        SweepPlan(base, executor="ray", workers=MAX_WORKERS + 1)
    with pytest.raises(ConfigError, match="gpus-per-task 64.5 is out of range; use 0 to 64"):
        SweepPlan(base, executor="ray", gpus_per_task=64.5)
    assert SweepPlan(base, executor="ray", workers=MAX_WORKERS, gpus_per_task=0.5).workers == MAX_WORKERS


def test_check_count_names_the_option_the_limit_and_the_fix():
    """The helper other studies call (the atlas's --boundary-resamples): ``check_count(value, name, low, high,
    why)`` returns the value, or raises a ConfigError in the CLI's or Python's spelling."""
    why = "resamples of the texts per boundary interval"
    assert check_count(500, "--boundary-resamples", 100, 10_000, why) == 500
    with pytest.raises(ConfigError) as err:
        check_count(20_000, "--boundary-resamples", 100, 10_000, why)
    assert err.value.cli_message() == ("--boundary-resamples 20,000 is above the limit of 10,000; use 100 to 10,000: "
                                       f"{why}")
    assert str(err.value).startswith("boundary_resamples 20,000 is above the limit of 10,000")
    with pytest.raises(ConfigError, match="boundary_resamples 5 is too small; use at least 100 \\(at most 10,000\\)"):
        check_count(5, "--boundary-resamples", 100, 10_000, why)
    with pytest.raises(ConfigError, match="must be a whole number from 100 to 10,000, got None"):
        check_count(None, "--boundary-resamples", 100, 10_000, why)
    with pytest.raises(ConfigError, match="^tasks 3 is above the limit of 2"):  # a name that is no option: as given
        check_count(3, "tasks", 1, 2, "why")
