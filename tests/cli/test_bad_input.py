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
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, BertConfig, BertForMaskedLM
from typer.testing import CliRunner

import tiny
from layerscope.cli import app

runner = CliRunner()


def bert_folder(folder):
    """An encoder-only BERT (saved as BertForMaskedLM) with tiny's tokenizer."""
    tok = tiny.tokenizer(False)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def nan_folder(folder):
    """A tiny Llama with one NaN weight in decoder block 1: hidden states from layer 2 on are NaN."""
    tiny.save(folder, "llama", adds_bos=False)
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.1.mlp.down_proj.weight"][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def short_gpt2_folder(folder):
    """A tiny GPT-2 with 16 positions."""
    tok = tiny.tokenizer(False)
    config = tiny.config("gpt2", len(tok))
    config.n_positions = 16
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def corrupt_folder(folder):
    tiny.save(folder, "llama", adds_bos=False)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    return folder


def no_tokenizer_folder(folder):
    tiny.save(folder, "llama", adds_bos=False)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    return folder


DEEP = "[" * 100_000 + "]" * 100_000
"""JSON nested 100,000 levels deep: Python's parser raises RecursionError on it."""


def deep_config_folder(folder):
    """A tiny model whose config.json is :data:`DEEP` inside an object."""
    tiny.save(folder, "llama", adds_bos=False)
    (folder / "config.json").write_text('{"architectures": ' + DEEP + "}")
    return folder


def deep_lens_folder(folder):
    """A tuned-lens folder whose config.json is :data:`DEEP`, beside an empty params.pt."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(DEEP)
    (folder / "params.pt").write_bytes(b"")
    return folder


MODEL_BUILDERS = {
    "model": lambda folder: tiny.save(folder, "llama", adds_bos=False),
    "bert": bert_folder,
    "nan_model": nan_folder,
    "short_gpt2": short_gpt2_folder,
    "corrupt_model": corrupt_folder,
    "no_tokenizer": no_tokenizer_folder,
    "deep_config": deep_config_folder,
    "deep_lens": deep_lens_folder,
}
"""Model folders a case can name as ``{key}``: ``key -> builder(folder) -> folder``."""

COMMANDS = ("report", "sweep", "extract", "lens")


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


def topics(n: int) -> str:
    """A valid pair dataset of ``n`` categories, two distinct pairs each."""
    return pairs(**{f"t{c}": [[f"Topic {c} is big, {i}.", f"Topic {c} is small, {i}."] for i in range(2)]
                    for c in range(n)})


GOOD_PAIRS = [["One cat sat here.", "A cat sat here."], ["Two dogs ran.", "Some dogs ran."],
              ["Three birds sang.", "Birds sang."]]
HIGH = {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose."]}
LONG = "The committee will review every application before the end of March, said the chair of the board."
"""More than 16 tokens for tiny's tokenizer (the positions of ``{short_gpt2}``)."""
MORE_PAIRS = [["Four fish swam.", "Fish swam."], ["Five owls flew.", "Owls flew."]]
OTHER_PAIRS = [["Six cows ate.", "Cows ate."], ["Nine bees flew.", "Bees flew."]]
LAST_PAIRS = [["Ten ants dug.", "Ants dug."], ["Two frogs sat.", "Frogs sat."]]
LOW = {"resource": "low", "texts": ["Ice floats on water.", "Bread dough rises."]}
TABLE_HEAD = "model,layer,n_layers,depth,pooling,metric,value,ci_lo,ci_hi,p,n\n"
RESULT = json.dumps({"schema_version": 1, "study": "divergence", "config": {"study": "divergence"},
                     "manifest": {"models": []}, "summary": {"warnings": []}}, indent=2)
"""A result.json that parses but holds none of the study's numbers."""

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
    ("non-string pair", {"d.json": pairs(a=GOOD_PAIRS, b=[["x", 3], ["y", "z"]])},
     ["divergence", "--dataset", "d.json"],
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
    # -- issue 11: data loss (--force, report, sweep reruns) --
    ("--out . --force", {"notes.txt": "mine", ".layerscope.json": '{"written_by": "layerscope", "kind": "run"}'},
     ["divergence", "--out", ".", "--force"], "will not write into .: it is the current folder; choose another --out"),
    ("--out the working folder's full path --force", {"notes.txt": "mine"}, ["divergence", "--out", "{tmp}", "--force"],
     "it is the current folder"),
    ("--out $HOME --force", {"home/notes.txt": "mine", "home/.layerscope.json": '{"written_by": "layerscope"}'},
     ["divergence", "--out", "{tmp}/home", "--force"], "it is your home folder", {"HOME": "{tmp}/home"}),
    ("--out / --force", {}, ["divergence", "--out", "/", "--force"], "will not write into /: it is the root folder"),
    ("--out the dataset's folder --force",
     {"data/d.json": topics(4), "data/.layerscope.json": '{"written_by": "layerscope"}'},
     ["divergence", "--dataset", "data/d.json", "--out", "data", "--force"], "data/d.json, an input of this run"),
    ("--out the model folder --force", {}, ["divergence", "--out", "{model}", "--force"],
     "models0/model, an input of this run; choose another --out"),
    ("--force on a folder layerscope did not write", {"out/notes.txt": "mine"},
     ["divergence", "--out", "out", "--force"],
     "will not replace out: layerscope did not write it (it has no .layerscope.json)"),
    ("non-empty folder layerscope did not write", {"out/notes.txt": "mine"}, ["divergence", "--out", "out"],
     "layerscope did not write it (it has no .layerscope.json), so it may hold files of yours: --force will not"),
    ("suite --out . --force", {"notes.txt": "mine"}, ["--out", ".", "--force"], "it is the current folder"),
    ("--config inside --out --force", {"prev/c.yaml": "study: divergence\n",
                                       "prev/.layerscope.json": '{"written_by": "layerscope"}'},
     ["--config", "prev/c.yaml", "--model", "{model}", "--out", "prev", "--force"],
     "it holds prev/c.yaml, an input of this run"),
    ("sweep --out . --force", {"s.yaml": "study: divergence\nmodels: [{model}]\n"},
     ["sweep", "--config", "s.yaml", "--out", ".", "--force"], "it is the current folder"),
    ("sweep --force on a folder layerscope did not write", {"s.yaml": "study: divergence\nmodels: [{model}]\n",
                                                            "out/holiday.png": "mine"},
     ["sweep", "--config", "s.yaml", "--out", "out", "--force"], "layerscope did not write it"),
    ("report over the user's own index.html", {"run1/result.json": "{}", "run1/index.html": "<p>my notes</p>\n"},
     ["report", "run1"], "run1/index.html was not written by layerscope"),
    # -- issue 11: config files, options and messages --
    ("YAML alias bomb", {"c.yaml": "study: phases\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                         + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
                         + "layers: *a8\n"}, ["--config", "c.yaml"], "more than the 1000 allowed"),
    ("duplicate YAML key", {"c.yaml": "study: phases\nphases:\n  seed: 1\n  seed: 2\n"}, ["--config", "c.yaml"],
     "line 4: the key 'seed' appears twice in one mapping (first on line 3)"),
    ("TOML text in a .yaml config", {"c.yaml": 'study = "phases"\nseed = 3\n'}, ["--config", "c.yaml"],
     "holds TOML, not YAML; rename it to c.toml"),
    ("folder as --config", {"conf.yaml/notes.txt": "mine"}, ["--config", "conf.yaml"], "is a folder, not a file"),
    ("--batch-size 0", {}, ["divergence", "--batch-size", "0"], "Invalid value for '--batch-size'"),
    ("--seed abc", {}, ["divergence", "--seed", "abc"], "Invalid value for '--seed'"),
    ("unknown option", {}, ["divergence", "--bootstraps", "5"], "No such option: --bootstraps"),
    ("extract --batch-size 0", {}, ["extract", "--model", "{model}", "--batch-size", "0", "--out", "out"],
     "Invalid value for '--batch-size'"),
    ("sweep without --config", {}, ["sweep", "--model", "{model}"], "Missing option '--config'"),
    ("--seed -1", {}, ["divergence", "--seed", "-1"], "--seed -1 is out of range"),
    ("--seed 2**32", {}, ["anisotropy", "--seed", str(2**32)], f"--seed {2**32} is out of range"),
    ("seed out of range in a config file", {"c.toml": 'study = "phases"\nseed = -5\n'}, ["--config", "c.toml"],
     "--seed -5 is out of range"),
    ("folder as --dataset", {"data/d.json": pairs(a=GOOD_PAIRS, b=GOOD_PAIRS[1:])}, ["divergence", "--dataset", "data"],
     "data is a folder, not a file; pass a file to --dataset"),
    ("folder as --prompts", {"p/x.txt": "a\nb\n"}, ["anisotropy", "--prompts", "p"], "is a folder, not a file"),
    ("folder as --texts", {"t/x.json": "{}"}, ["ablation", "--texts", "t"], "is a folder, not a file"),
    ("folder as --reference", {"r/x.csv": ""}, ["phases", "--reference", "r"], "is a folder, not a file"),
    ("ablation --configs with layer 10**9", {"c.json": '{"big": [1000000000]}'}, ["ablation", "--configs", "c.json"],
     "config 'big': layer 1000000000 is out of range"),
    ("unused --dataset naming a missing file", {}, ["anisotropy", "--dataset", "missing.json"],
     "missing.json, which does not exist; it is not used by anisotropy anyway"),
    ("unused config key naming a missing file", {"c.yaml": "study: ablation\nprompts: nope.txt\n"},
     ["--config", "c.yaml"], "nope.txt, which does not exist; it is not used by ablation anyway"),
    # -- issue 11: cache, sweeps, report --
    ("LAYERSCOPE_CACHE names a file", {"cache.txt": "my notes\n"}, ["divergence"],
     "cache.txt is a file, not a folder; set LAYERSCOPE_CACHE to another folder",
     {"LAYERSCOPE_CACHE": "{tmp}/cache.txt"}),
    ("LAYERSCOPE_CACHE inside a file", {"cache.txt": "my notes\n"}, ["divergence"], "or pass --no-cache",
     {"LAYERSCOPE_CACHE": "{tmp}/cache.txt/layerscope"}),
    ("report on a corrupt result.json", {"run1/result.json": "{", "run1/table.csv": TABLE_HEAD}, ["report", "run1"],
     "cannot read run1/result.json: not valid JSON"),
    ("report on a deeply nested result.json", {"run1/result.json": DEEP, "run1/table.csv": TABLE_HEAD},
     ["report", "run1"], "cannot read run1/result.json: JSON nested too deeply (more than 64 levels)"),
    ("model config.json nested too deeply", {}, ["divergence", "--model", "{deep_config}"],
     "config.json: JSON nested too deeply"),
    ("tuned-lens config.json nested too deeply", {}, ["lens", "Hi", "--model", "{model}", "--tuned", "{deep_lens}"],
     "config.json: JSON nested too deeply"),
    ("report on a truncated result.json", {"run1/result.json": RESULT[:len(RESULT) // 2], "run1/table.csv": TABLE_HEAD,
                                           "run1/config.yaml": "divergence: {}\n"}, ["report", "run1"],
     "damaged or truncated: rerun the study: layerscope run --config run1/config.yaml"),
    ("report on a result.json that is not a result", {"run1/result.json": "[1, 2]", "run1/table.csv": TABLE_HEAD},
     ["report", "run1"], "run1/result.json is not a layerscope result"),
    ("report on a result.json without the study's numbers", {"run1/result.json": RESULT, "run1/table.csv": TABLE_HEAD},
     ["report", "run1"], "run1/result.json lacks what a divergence run writes"),
    ("report without table.csv", {"run1/result.json": RESULT}, ["report", "run1"], "run1/table.csv is missing"),
    ("report on a corrupt table.csv", {"run1/result.json": RESULT, "run1/table.csv": 'model,layer\n"a,1\n'},
     ["report", "run1"], "cannot read run1/table.csv"),
    ("report on a suite with one corrupt study",
     {"run1/phases/result.json": "{\"stu", "run1/phases/table.csv": TABLE_HEAD}, ["report", "run1"],
     "cannot read run1/phases/result.json"),
    # -- issue 11: models and texts --
    ("one-category dataset", {"d.json": topics(1)}, ["divergence", "--dataset", "d.json"],
     "1 category ('t0'); the pair studies (divergence, scaling, phases) need at least 4 categories"),
    ("two-category dataset", {"d.json": topics(2)}, ["scaling", "--dataset", "d.json"],
     "a correlation over 2 category means is +1 or -1 whatever the data"),
    ("three-category dataset", {"d.json": topics(3)}, ["phases", "--dataset", "d.json"],
     "3 categories ('t0', 't1', 't2'); the pair studies (divergence, scaling, phases) need at least 4"),
    ("drop-category leaves three", {"d.json": topics(4)},
     ["divergence", "--dataset", "d.json", "--drop-category", "t2"], "--drop-category 't2' leaves 3 categories"),
    ("suite with a two-category dataset", {"d.json": topics(2)}, ["--dataset", "d.json"], "need at least 4 categories"),
    ("encoder-only BERT folder", {}, ["divergence", "--model", "{bert}"],
     "saved as BertForMaskedLM, which is not a causal LM"),
    ("NaN weight, pair study", {}, ["divergence", "--model", "{nan_model}"],
     "computed a NaN or inf hidden state at layer 2 of 0..3"),
    ("NaN weight, anisotropy", {}, ["anisotropy", "--model", "{nan_model}"],
     "computed a NaN or inf hidden state at layer 2 of 0..3"),
    ("NaN weight, ablation", {"t.json": json.dumps({"en": HIGH, "xx": LOW})},
     ["ablation", "--model", "{nan_model}", "--texts", "t.json"],
     "computed a NaN or inf hidden state at layer 2 of 0..3"),
    ("NaN weight, extract", {}, ["extract", "--model", "{nan_model}", "--out", "out"],
     "computed a NaN or inf hidden state at layer 2 of 0..3"),
    ("text longer than the model's positions", {"d.json": pairs(a=GOOD_PAIRS, b=[[LONG, "Short one."], *MORE_PAIRS],
                                                                 c=OTHER_PAIRS, d=LAST_PAIRS)},
     ["divergence", "--model", "{short_gpt2}", "--dataset", "d.json"],
     'text 6 ("The committee will review every application ...") has '),
    ("prompt longer than the model's positions", {"p.txt": f"Short prompt one.\nAnother prompt.\n{LONG}\n"},
     ["anisotropy", "--model", "{short_gpt2}", "--prompts", "p.txt"], "more than the 16 positions of model"),
    ("ablation text longer than the model's positions",
     {"t.json": json.dumps({"en": HIGH, "xx": {"resource": "low", "texts": [LONG, "Ice floats."]}})},
     ["ablation", "--model", "{short_gpt2}", "--texts", "t.json"], "more than the 16 positions of model"),
    ("--max-length above the model's positions", {}, ["anisotropy", "--model", "{short_gpt2}", "--max-length", "64"],
     "--max-length 64 is above that limit: lower it to 16"),
    ("single-token text in a pair", {"d.json": pairs(a=GOOD_PAIRS, b=[["7", "Seven."], *MORE_PAIRS], c=OTHER_PAIRS,
                                                     d=LAST_PAIRS)},
     ["divergence", "--dataset", "d.json"], 'text 6 ("7") has only 1 token'),
    ("single-token ablation text",
     {"t.json": json.dumps({"en": HIGH, "xx": {"resource": "low", "texts": ["7", "Ice."]}})},
     ["ablation", "--texts", "t.json"], 'text 2 ("7") has only 1 token'),
    ("corrupt safetensors file", {}, ["divergence", "--model", "{corrupt_model}"],
     "model.safetensors is not a readable safetensors file"),
    ("file that is not GGUF", {"m.gguf": b"not a gguf file"}, ["divergence", "--model", "m.gguf"],
     "m.gguf is not a GGUF file"),
    ("model folder without tokenizer files", {}, ["divergence", "--model", "{no_tokenizer}"],
     "has no tokenizer files"),
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
