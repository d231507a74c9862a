import json

import numpy as np
import pytest
from typer.testing import CliRunner

import tiny
from layerscope import Activations, load_pairs
from layerscope.cli import app

runner = CliRunner()


@pytest.fixture
def model_dir(tmp_path):
    return tiny.save(tmp_path / "tiny-gpt2", "gpt2", adds_bos=True)


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({
        "c1": {"pairs": [["One cat sat.", "A single cat sat."], ["Two dogs ran far.", "A pair of dogs ran."]]},
        "c2": {"pairs": [["Ice floats.", "Ice is less dense than water."], ["Rain fell.", "It rained."],
                         ["The sun rose early.", "Dawn came early."]]},
    }))
    return path


def test_extract_writes_activations_and_manifest(tmp_path, model_dir, dataset):
    out = tmp_path / "out"
    result = runner.invoke(app, ["extract", "--model", str(model_dir), "--dataset", str(dataset), "--out", str(out),
                                 "--batch-size", "3", "--compat", "notebooks"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [".layerscope.json", "activations.npz", "manifest.json"]
    acts = Activations.load(out / "activations.npz")
    pairs = load_pairs(dataset)
    assert acts.texts == pairs.texts()
    assert acts.pooled["mean"].shape == (10, 4, 32)
    m = json.loads((out / "manifest.json").read_text())
    assert m["model"]["weights_hash"] == acts.model.weights_hash
    assert m["dataset"]["hash"] == pairs.hash and m["dataset"]["n_pairs"] == 5
    assert m["settings"]["compat"] == "notebooks" and m["batch_size"] == 3
    assert {"torch", "transformers", "numpy", "python", "layerscope"} <= m["versions"].keys()
    assert m["timing"]["total_s"] >= m["timing"]["extract_s"] > 0
    assert m["cache"] == {"batches": 4, "computed": 4, "reused": 0}
    # the printed summary: per-category mean NLL of A and B, from the saved numbers (nats), in bits per token
    nll = acts.nll_mean / np.log(2)
    assert "(mean next-token NLL in bits per token;" in result.output
    assert f"{nll[0:4:2].mean():7.3f} {nll[1:4:2].mean():7.3f}" in result.output
    assert "c2" in result.output


def test_bad_dataset_exits_2_with_one_line_and_writes_nothing(tmp_path, model_dir):
    bad = tmp_path / "bad.json"
    bad.write_text('{"c": {"pairs": [["a", "b"], ["c"]]}}')
    out = tmp_path / "out"
    result = runner.invoke(app, ["extract", "--model", str(model_dir), "--dataset", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "category 'c', pair 1" in result.output
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_unknown_model_exits_2(tmp_path, dataset):
    result = runner.invoke(app, ["extract", "--model", "nope-model", "--dataset", str(dataset),
                                 "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "error: could not load model 'nope-model'" in result.output


def test_existing_out_folder_is_kept_without_force(tmp_path, model_dir, dataset):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["extract", "--model", str(model_dir), "--dataset", str(dataset), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--force" in result.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    result = runner.invoke(app, args + ["--force"])  # issue 11: --force replaces only a folder layerscope wrote
    assert result.exit_code == 2 and "layerscope did not write it" in result.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    assert runner.invoke(app, args).exit_code == 0  # an empty folder is filled
    result = runner.invoke(app, args + ["--force"])
    assert result.exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [".layerscope.json", "activations.npz", "manifest.json"]


def test_second_cli_run_is_served_from_cache(tmp_path, model_dir, dataset):
    base = ["extract", "--model", str(model_dir), "--dataset", str(dataset)]
    runner.invoke(app, base + ["--out", str(tmp_path / "a")])
    result = runner.invoke(app, base + ["--out", str(tmp_path / "b")])
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["cache"]["computed"] == 0
    a = Activations.load(tmp_path / "a" / "activations.npz")
    b = Activations.load(tmp_path / "b" / "activations.npz")
    np.testing.assert_array_equal(a.pooled["last"], b.pooled["last"])
    assert "0 computed" in result.output


@pytest.mark.parametrize("command", [[], ["extract"]])
def test_help_explains_every_option(command):
    result = runner.invoke(app, command + ["--help"])
    assert result.exit_code == 0
    if command:
        for option in ("--model", "--dataset", "--out", "--compat", "--batch-size", "--dtype", "--device",
                       "--device-map", "--force", "--no-cache"):
            assert option in result.output
        assert "zoo name" in result.output and "bundled dataset" in result.output
    else:
        assert "extract" in result.output
