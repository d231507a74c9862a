import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import tiny`

from layerscope.paths import models_dir  # noqa: E402

USER_MODELS = models_dir()
"""Converted zoo models in the real cache, found before any test redirects $LAYERSCOPE_CACHE;
shared by every test so each zoo model is converted once per machine, not once per test."""


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty activation cache and never reaches the hub."""
    root = tmp_path_factory.mktemp("cache")
    USER_MODELS.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(USER_MODELS, target_is_directory=True)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M from its PyPI package."""
    import layerscope

    return layerscope.load_model("smollm2-135m")


SMALL_TEXTS = {"en": {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose by four percent."]},
               "xx": {"resource": "low", "texts": ["Bread dough doubles in size.", "Ice floats on water."]}}


@pytest.fixture(scope="session")
def tiny_suite(tmp_path_factory):
    """A finished suite run (`layerscope run` with no study) of two tiny models, in its own cache.

    Returns ``(run_folder, args)``: the folder, and the command-line arguments that made it."""
    import json

    from typer.testing import CliRunner

    import tiny
    from layerscope.cli import app

    root = tmp_path_factory.mktemp("suite")
    models = [str(tiny.save(root / "tiny-a", "llama", adds_bos=False)),
              str(tiny.save(root / "tiny-b", "gpt2", adds_bos=True))]
    texts, dataset = root / "texts.json", root / "pairs.json"
    texts.write_text(json.dumps(SMALL_TEXTS))
    dataset.write_text(json.dumps(small_pairs()))
    args = ["--model", models[0], "--model", models[1], "--texts", str(texts), "--dataset", str(dataset),
            "--n-bootstrap", "200",
            "--n-permutations", "200"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = CliRunner().invoke(app, ["run", *args, "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    return root / "run", args


def small_pairs(n_categories: int = 4, n_pairs: int = 5) -> dict:
    """A pairs dataset in the notebooks' JSON format: short distinct statements, A vs B framings."""
    subjects = ["the river", "the market", "our team", "the garden", "the library", "the bridge", "the school"]
    return {f"cat{c}": {"pairs": [[f"Without doubt {subjects[i]} grew {c + 2} times in year {i}.",
                                    f"Maybe {subjects[i]} grew a little in year {i}, some say."]
                                   for i in range(n_pairs)]} for c in range(n_categories)}


@pytest.fixture
def languages(tmp_path):
    """Two languages of tiny texts (en high-resource: 4 texts, sw low-resource: 3), as the ablation loads them."""
    import json

    import tiny
    from layerscope.data.languages import load_languages

    path = tmp_path / "languages.json"
    path.write_text(json.dumps({"en": {"resource": "high", "texts": tiny.TEXTS[:4]},
                                "sw": {"resource": "low", "texts": tiny.TEXTS[4:7]}}))
    return load_languages(path)


# -- what the ownership tests (tests/test_out_safety.py, tests/security/test_out_symlink.py) share --

MARK = '{"written_by": "layerscope", "kind": "run", "version": "0"}'
"""The marker of a folder layerscope wrote, planted by hand."""


def error_line(result) -> str:
    """The one ``error:`` line of a CLI result that exited 2 (and printed no traceback)."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def out_model(tmp_path_factory):
    """A tiny Llama saved once per module: the model the ownership tests run."""
    import tiny

    return str(tiny.save(tmp_path_factory.mktemp("model") / "tiny", "llama", adds_bos=False))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, out_model):
    """A divergence run folder that layerscope wrote."""
    from typer.testing import CliRunner

    from layerscope.cli import app

    root = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        result = CliRunner().invoke(app, ["run", "divergence", "--model", out_model, "--n-permutations", "100",
                                          "--out", str(root / "div")])
    assert result.exit_code == 0, result.output
    return root / "div"
