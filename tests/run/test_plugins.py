"""Study plugins: a study another package adds through the ``layerscope.studies`` entry point runs from the
command line, in a suite and in a sweep; a broken plugin costs one warning line; a renamed built-in runs; each
result's manifest names the package its study came from (name clashes: tests/security/test_plugins.py).

Each plugin is a real module file plus a ``*.dist-info`` folder (METADATA, entry_points.txt) in a temporary
folder put on ``PYTHONPATH`` of a ``python -m layerscope.cli`` subprocess, as ``pip install`` would leave it,
so nothing is registered in the test process itself.
"""

import json
import os
import runpy
import subprocess
import sys
import textwrap
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tiny

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-study.md"


def guide_file(name: str) -> str:
    """The fenced block that follows the line naming ``name`` in docs/writing-a-study.md: the plugin a reader
    copies is the plugin these tests install and run."""
    text = GUIDE.read_text(encoding="utf-8")
    after = text[text.index(f"`{name}`:"):]
    return after.split("```", 2)[1].split("\n", 1)[1]


ANISO2_STUDY = '''\
from layerscope.studies.anisotropy import Anisotropy


class Aniso2(Anisotropy):
    name = "aniso2"
    title = "Anisotropy again"
'''


def pip_install(source, target) -> None:
    """``pip install --no-deps --target TARGET SOURCE``: what a user's install leaves (the module, its
    dist-info with METADATA and entry_points.txt), without the network (setuptools is in the environment)."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def dist(folder, name: str, entry_points: str) -> None:
    """What ``pip install`` leaves for a distribution ``name``: its metadata and entry points."""
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[layerscope.studies]\n{entry_points}\n")


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    """Two tiny Llama models (different seeds), a prompts file, and two plugin folders: ``toy`` (package
    toy-plugin, as docs/writing-a-study.md writes it, installed there by pip) and ``extra`` (aniso2 from package
    aniso-again, and the broken package broken-plugin)."""
    root = tmp_path_factory.mktemp("plugins")
    models = [str(tiny.save(root / name, "llama", adds_bos=False, seed=seed)) for name, seed in (("a", 0), ("b", 1))]
    (root / "prompts.txt").write_text("\n".join(tiny.TEXTS[:6]) + "\n")
    source, toy, extra = root / "toy-plugin", root / "toy", root / "extra"
    source.mkdir()
    extra.mkdir()
    for name in ("pyproject.toml", "toy_study.py"):
        (source / name).write_text(guide_file(f"toy-plugin/{name}"))
    pip_install(source, toy)
    (extra / "aniso2_study.py").write_text(ANISO2_STUDY)
    dist(extra, "aniso-again", "aniso2 = aniso2_study:Aniso2")
    (extra / "broken_study.py").write_text("raise ImportError('broken_study needs a package that is missing')\n")
    dist(extra, "broken-plugin", "broken = broken_study:Broken")
    return root, models, toy, extra


def layerscope(*args, path, cache, cwd) -> subprocess.Popen:
    """Start ``python -m layerscope.cli ARGS`` with the plugin folders ``path`` on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), "LAYERSCOPE_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # four of them share the cores
    return subprocess.Popen([sys.executable, "-m", "layerscope.cli", *map(str, args)], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=300)
    command = " ".join(process.args[3:])
    assert process.returncode == 0, f"layerscope {command}:\n{stdout}\n{stderr}"
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def runs(plugins):
    """Four command lines at once (each spends most of its time importing torch), sharing one activation cache
    (locked per entry, so the toy runs on model a all read the same extracted states):

    - ``single``: `layerscope run toy --scale 2` on model a;
    - ``sweep``: `layerscope run toy` over models a and b (scale 1) with ``--executor serial``;
    - ``suite``: `layerscope run --config suite.yaml` with ``studies: [anisotropy, toy]`` and ``toy: {scale: 3}``;
    - ``aniso2``: `layerscope run aniso2` with the broken plugin on the path too."""
    root, models, toy, extra = plugins
    (root / "suite.yaml").write_text(textwrap.dedent(f"""\
        studies: [anisotropy, toy]
        models: [{models[0]}]
        anisotropy:
          prompts: prompts.txt
        toy:
          scale: 3
        """))
    common = {"cache": root / "cache", "cwd": root}
    started = {
        "single": layerscope("run", "toy", "--model", models[0], "--scale", "2", "--out", root / "single",
                             path=[toy], **common),
        "sweep": layerscope("run", "toy", "--model", models[0], "--model", models[1], "--executor", "serial",
                            "--out", root / "sweep", path=[toy], **common),
        "suite": layerscope("run", "--config", root / "suite.yaml", "--out", root / "suite", path=[toy], **common),
        "aniso2": layerscope("run", "aniso2", "--model", models[0], "--prompts", root / "prompts.txt", "--out",
                             root / "aniso2", path=[toy, extra], **common),
    }
    try:
        return {name: finished(process) for name, process in started.items()}
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


def hand_norms(folder, texts, per_text: bool = False) -> np.ndarray:
    """(n_layers + 1,): per hidden state, the mean over ``texts`` of the L2 norm of the average of the text's
    token states (the tiny tokenizer adds no BOS, so every token is averaged), each text run alone;
    ``per_text``: (n_texts, n_layers + 1), before the mean."""
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    norms = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states  # n_layers + 1 x (1, T, d)
            norms.append([h[0].double().mean(dim=0).norm().item() for h in hidden])
    return np.array(norms) if per_text else np.mean(norms, axis=0)


@pytest.fixture(scope="module")
def hand(plugins) -> np.ndarray:
    """The toy metric at scale 1 for model a, by hand from the plugin file's TEXTS."""
    _, models, toy, _ = plugins
    return hand_norms(models[0], runpy.run_path(str(toy / "toy_study.py"))["TEXTS"])


def test_toy_study_from_the_command_line_equals_a_hand_computation(plugins, runs, hand):
    root, models, _, _ = plugins
    single = runs["single"]
    assert "warning:" not in single.stderr
    table = pd.read_csv(root / "single" / "table.csv")
    assert set(table["metric"]) == {"mean_norm"} and list(table["layer"]) == [0, 1, 2, 3]
    expected = 2 * hand
    np.testing.assert_allclose(table["value"], expected, rtol=1e-5)
    assert (root / "single" / "toy.png").is_file() and (root / "single" / "index.html").is_file()
    peak = int(np.argmax(expected))
    assert f"toy: {models[0]}: largest mean norm {expected[peak]:.4g} at layer {peak} of 3" in single.stdout
    assert json.loads((root / "single" / "result.json").read_text())["manifest"]["study_origin"] == "toy-plugin 0.1"


def test_toy_sweep_gathers_both_models_and_scale_is_a_factor(plugins, runs):
    root, models, _, _ = plugins
    swept = pd.read_csv(root / "sweep" / "table.csv")
    assert sorted(swept["model"].unique()) == sorted(models)
    a, b = (swept[swept["model"] == m].sort_values("layer") for m in models)
    assert len(a) == len(b) == 4 and not np.allclose(a["value"], b["value"])  # two models, two profiles
    single = pd.read_csv(root / "single" / "table.csv").sort_values("layer")
    assert list(single["value"] / a["value"].to_numpy()) == [2.0] * 4  # same cached states; --scale 2 vs 1


def test_suite_runs_a_plugin_beside_a_built_in_study(plugins, runs, hand):
    root, models, _, _ = plugins
    assert "warning:" not in runs["suite"].stderr
    folder = root / "suite"
    assert (folder / "anisotropy" / "table.csv").is_file() and (folder / "toy" / "table.csv").is_file()
    expected = 3 * hand
    np.testing.assert_allclose(pd.read_csv(folder / "toy" / "table.csv")["value"], expected, rtol=1e-5)
    page = (folder / "index.html").read_text()
    peak = int(np.argmax(expected))
    assert "Toy: hidden-state norms" in page and "Anisotropy" in page
    origins = {study: json.loads((folder / study / "result.json").read_text())["manifest"]["study_origin"]
               for study in ("anisotropy", "toy")}
    assert origins == {"anisotropy": "built-in", "toy": "toy-plugin 0.1"}
    assert f"{models[0]}: largest mean norm {expected[peak]:.4g} at layer {peak} of 3" in page


def test_renamed_built_in_runs_and_a_broken_plugin_is_one_warning(plugins, runs):
    root, models, _, _ = plugins
    done = runs["aniso2"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "'broken'" in warnings[0] and "broken-plugin" in warnings[0], done.stderr
    assert "warning:" not in done.stderr.replace(warnings[0], "")
    result = (root / "aniso2" / "result.json").read_text()
    assert '"study": "aniso2"' in result
    assert json.loads(result)["manifest"]["study_origin"] == "aniso-again 0.1"  # a subclass of a built-in: a plugin
    table = pd.read_csv(root / "aniso2" / "table.csv")
    assert {"top1_ratio", "effective_rank"} <= set(table["metric"]) and table["layer"].max() == 3
    assert "Anisotropy again" in (root / "aniso2" / "index.html").read_text()


def sign_test(norms: np.ndarray) -> tuple[int, float]:
    """(k, P(X >= k)) for X ~ Binomial(n, 1/2): how many texts' last-layer norm exceeds their embeddings', and the
    one-sided sign test's p, summed term by term."""
    n, k = len(norms), int((norms[:, -1] > norms[:, 0]).sum())
    return k, sum(comb(n, i) for i in range(k, n + 1)) / 2**n


def test_toy_verdict_is_the_sign_test_by_hand_beside_its_check(plugins, runs):
    root, models, toy, _ = plugins
    texts = runpy.run_path(str(toy / "toy_study.py"))["TEXTS"]
    norms = hand_norms(models[0], texts, per_text=True)
    k, p = sign_test(norms)
    longest = max(range(len(texts)), key=lambda i: len(texts[i]))
    _, p_without = sign_test(np.delete(norms, longest, axis=0))
    summary = json.loads((root / "single" / "result.json").read_text())["summary"]["models"][models[0]]
    assert summary["texts_longer"] == k
    np.testing.assert_allclose([summary["p"], summary["q"], summary["p_without_longest"]], [p, p, p_without])
    status = ("not significant" if p >= 0.05 else
              "holds but fragile" if p_without >= 0.05 else "holds and robust")  # one model: q = p
    page = (root / "single" / "index.html").read_text()
    flips = "without the longest text" if status == "holds but fragile" else "none"
    badge = {"holds and robust": "status-robust", "holds but fragile": "status-fragile",
             "not significant": "status-not-significant"}[status]
    row = (f"<td>{models[0]}</td><td>the last layer&#x27;s state is longer than the embeddings&#x27;</td><td>"
           f'<span class="status {badge}">{status}</span></td><td>texts = {k}, q = ')
    assert row in page
    assert f"</td><td>{flips}</td></tr>" in page[page.index(row):]
