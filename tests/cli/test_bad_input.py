"""The bad-input matrix: each mistake gives one clear `error:` line, exit status 2, and no output
(no run folder, no hidden partial folder beside it, every file of the user's unchanged byte for byte).

A case is ``(name, files, args, message)`` or ``(name, files, args, message, env)``:

- ``files``: ``{relative path: text or bytes}`` written into the test's working folder first;
- ``args``: the arguments after ``layerscope run`` (or after ``layerscope`` when the first one is
  another command, e.g. ``report``); ``--model`` and ``--out out`` are added to ``run`` unless given;
- ``message``: a part of the one ``error:`` line;
- ``env``: environment variables for the command.

``{tmp}`` (the working folder) and ``{name}`` for each entry of ``MODEL_BUILDERS`` (a model folder
built once per module) are filled in everywhere: in ``args``, file texts and ``env`` values.
"""

import hashlib
import json
import os
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

import tiny
from layerscope.cli import app

runner = CliRunner()


MODEL_BUILDERS = {
    "model": lambda folder: tiny.save(folder, "llama", adds_bos=False),
}
"""Model folders a case can name as ``{key}``: ``key -> builder(folder) -> folder``."""

COMMANDS = ("report", "sweep", "extract")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {key: str(build(root / key)) for key, build in MODEL_BUILDERS.items()}


@pytest.fixture(scope="module")
def model(models):
    return models["model"]


def fill(value, names: dict[str, str]):
    """``value`` (str, bytes, list or dict) with every ``{name}`` replaced."""
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    if isinstance(value, bytes):
        return value
    for key, text in names.items():
        value = value.replace("{" + key + "}", text)
    return value


def snapshot(folder) -> dict[str, str]:
    """Every path under ``folder`` with the SHA-256 of its bytes ("dir" for folders)."""
    return {p.relative_to(folder).as_posix(): "dir" if p.is_dir() and not p.is_symlink() else
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "other"
            for p in sorted(folder.rglob("*"))}


def pairs(**categories):
    return json.dumps({name: {"pairs": p} for name, p in categories.items()})


GOOD_PAIRS = [["One cat sat here.", "A cat sat here."], ["Two dogs ran.", "Some dogs ran."],
              ["Three birds sang.", "Birds sang."]]
HIGH = {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose."]}

# (name, files to write {name: text}, command-line arguments; "{model}" and file names are filled in, message)
CASES = [
    ("malformed JSON dataset", {"d.json": '{"c": {"pairs": [["a", "b"]'}, ["divergence", "--dataset", "d.json"],
     "not valid JSON"),
    ("malformed YAML config", {"c.yaml": "study: phases\nseed: [1\n"}, ["--config", "c.yaml"], "not valid YAML"),
    ("unknown config key", {"c.yaml": "study: phases\nn_boot: 5\n"}, ["--config", "c.yaml"],
     "unknown setting 'n_boot'"),
    ("wrong type in config", {"c.toml": 'study = "phases"\nseed = "x"\n'}, ["--config", "c.toml"],
     "setting 'seed' must be an integer"),
    ("missing dataset file", {}, ["divergence", "--dataset", "missing.json"], "does not exist"),
    ("missing config file", {}, ["--config", "missing.yaml"], "does not exist"),
    ("empty dataset", {"d.json": "{}"}, ["divergence", "--dataset", "d.json"], "no categories"),
    ("one-pair category", {"d.json": pairs(a=GOOD_PAIRS, b=GOOD_PAIRS[:1])}, ["phases", "--dataset", "d.json"],
     "category 'b' has 1 pair"),
    ("non-string pair", {"d.json": pairs(a=GOOD_PAIRS, b=[["x", 3], ["y", "z"]])}, ["divergence", "--dataset", "d.json"],
     "pair 0"),
    ("duplicate texts", {"d.json": pairs(a=GOOD_PAIRS, b=[GOOD_PAIRS[0], ["Four fish swam.", "Fish swam."]])},
     ["divergence", "--dataset", "d.json"], "duplicate"),
    ("unknown model", {}, ["phases", "--model", "no-such-model-xyz"], "could not load model 'no-such-model-xyz'"),
    ("unknown study", {}, ["nope"], "unknown study 'nope'"),
    ("bad layer list", {}, ["divergence", "--layers", "zero"], "bad layer list"),
    ("unknown device map", {}, ["divergence", "--device-map", "balanced"], "unknown device map 'balanced'"),
    ("layer out of range", {}, ["divergence", "--layers", "0,9"], "layer 9 is out of range"),
    ("zero bits", {}, ["ablation", "--bits", "0"], "2 to 16 bits"),
    ("no low-resource language", {"t.json": json.dumps({"en": HIGH, "de": HIGH})}, ["ablation", "--texts", "t.json"],
     "low-resource"),
    ("prompts file with one prompt", {"p.txt": "# only\nJust one prompt here\n"}, ["anisotropy", "--prompts", "p.txt"],
     "1 prompt(s)"),
    ("unknown drop category", {}, ["phases", "--drop-category", "nope"], "'nope' is not a category"),
    ("suite with a bad dataset", {"d.json": "[1, 2]"}, ["--dataset", "d.json"], "d.json"),
    ("suite config with an unknown study", {"c.yaml": "studies: [phases, nope]\n"}, ["--config", "c.yaml"],
     "unknown study 'nope'"),
    ("bootstrap too small", {}, ["phases", "--n-bootstrap", "5"], "too few"),
    ("missing reference file", {}, ["phases", "--reference", "missing.csv"], "reference file"),
    ("unknown quantization scheme", {}, ["ablation", "--scheme", "group:x"], "unknown quantization scheme"),
    ("unknown quantization targets", {}, ["ablation", "--targets", "norms"], "unknown --targets"),
    ("missing ablation configs file", {}, ["ablation", "--configs", "missing.json"], "missing.json does not exist"),
    ("missing texts file", {}, ["ablation", "--texts", "missing.json"], "does not exist"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_error_exit_2_and_no_output(tmp_path, monkeypatch, models, case):
    name, files, args, message, *rest = case
    names = {**models, "tmp": str(tmp_path)}
    monkeypatch.chdir(tmp_path)
    for key, value in fill(rest[0] if rest else {}, names).items():
        monkeypatch.setenv(key, value)
    for file, text in fill(files, names).items():
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_bytes(text if isinstance(text, bytes) else text.encode())
    args = fill(args, names)
    if args and args[0] in COMMANDS:
        command = args
    else:
        extra = [] if "--model" in args or "--config" in args else ["--model", models["model"]]
        command = ["run", *args, *extra, *([] if "--out" in args else ["--out", "out"])]
    before = snapshot(tmp_path)
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1], result.output
    assert sum(line.startswith("error: ") for line in lines) == 1 and "Traceback" not in result.output
    assert snapshot(tmp_path) == before  # no out/, no .out.partial, every file of the user's as it was


def test_existing_out_folder_is_kept_without_force(tmp_path, model):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["run", "divergence", "--model", model, "--out", str(out)])
    assert result.exit_code == 2 and "already exists and is not empty" in result.output and "--force" in result.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_out_inside_a_file_is_refused(tmp_path, model):
    (tmp_path / "file.txt").write_text("x")
    result = runner.invoke(app, ["run", "--model", model, "--out", str(tmp_path / "file.txt" / "out")])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output


def test_unwritable_out_folder(tmp_path, model):
    """A folder nobody may write to: read-only for a normal user; immutable (chattr +i) for root,
    whom permission bits do not stop."""
    parent = tmp_path / "locked"
    parent.mkdir()
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(parent)]).returncode != 0:
            pytest.skip("running as root on a file system without chattr +i: no folder is unwritable")
    else:
        parent.chmod(0o555)
    try:
        result = runner.invoke(app, ["run", "divergence", "--model", model, "--out", str(parent / "out")])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: cannot write to") and "choose a writable --out" in result.output
        assert list(parent.iterdir()) == []
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(parent)])
        else:
            parent.chmod(0o755)
