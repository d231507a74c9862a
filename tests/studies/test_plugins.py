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

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tiny

TOY_STUDY = '''\
"""A toy study: the mean L2 norm of each layer's mean-pooled hidden state, times --scale."""

import hashlib
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from layerscope.engine import extract
from layerscope.models import load_model
from layerscope.studies import Settings, Study, StudyConfig, StudyResult, setting
from layerscope.studies.manifest import manifest, model_entry
from layerscope.studies.result import layer_row, make_table

TEXTS = ["The cat sat on the mat.", "Prices rose by four percent.", "Ice floats on water.",
         "She tuned the violin slowly, listening for the beat."]


@dataclass(frozen=True)
class ToySettings(Settings):
    scale: float = setting("Multiply every norm by this.", default=1.0)


class Toy(Study):
    name = "toy"                                  # layerscope run toy
    title = "Toy: hidden-state norms"
    question = "How long is each layer's mean-pooled hidden state?"
    Settings = ToySettings                        # --scale on the command line, `toy: {scale: 2}` in a config

    def run(self, config: StudyConfig) -> StudyResult:
        rows, models, summary = [], [], {}
        for spec in config.models:
            lm = load_model(spec, dtype=config.dtype, device=config.device, device_map=config.device_map)
            acts = extract(lm, TEXTS, poolings=("mean",), batch_size=config.batch_size,
                           max_length=config.max_length, cache=config.cache)
            norms = config.scale * np.linalg.norm(acts.pooled["mean"], axis=-1).mean(axis=0)  # (n_layers + 1,)
            info = acts.model
            rows += [layer_row(info.name, layer, info.n_layers, "mean_norm", float(value), pooling="mean",
                               n=len(TEXTS)) for layer, value in enumerate(norms)]
            peak = int(norms.argmax())
            summary[info.name] = {"n_layers": info.n_layers, "peak_layer": peak, "peak_norm": float(norms[peak])}
            models.append(model_entry(info, acts))
        dataset = {"kind": "texts", "source": "toy_study.TEXTS", "n_texts": len(TEXTS),
                   "hash": hashlib.sha256("\\n".join(TEXTS).encode()).hexdigest()}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest(config, models, dataset, {}),
                           summary={"models": summary, "warnings": []}, table=make_table(rows))

    def figures(self, result: StudyResult) -> dict[str, Figure]:
        fig = Figure(figsize=(5, 3))
        ax = fig.subplots()
        for model, rows in result.table.groupby("model"):
            ax.plot(rows["layer"], rows["value"], marker="o", label=model)
        ax.set(xlabel="layer", ylabel="mean L2 norm")
        return {"toy": fig}                       # -> toy.png

    def report(self, result: StudyResult) -> str:
        lines = ["# Toy: hidden-state norms", "", "| model | layer | mean norm |", "| --- | --- | --- |"]
        lines += [f"| {r.model} | {r.layer} | {r.value:.4g} |" for r in result.table.itertuples()]
        return "\\n".join(lines) + "\\n"

    def headline(self, result: StudyResult) -> list[str]:
        return [f"{model}: largest mean norm {s['peak_norm']:.4g} at layer {s['peak_layer']} of {s['n_layers']}"
                for model, s in result.summary["models"].items()]

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        return {"peak_norm": result.summary["models"][model]["peak_norm"]}
'''

ANISO2_STUDY = '''\
from layerscope.studies.anisotropy import Anisotropy


class Aniso2(Anisotropy):
    name = "aniso2"
    title = "Anisotropy again"
'''


def dist(folder, name: str, entry_points: str) -> None:
    """What ``pip install`` leaves for a distribution ``name``: its metadata and entry points."""
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[layerscope.studies]\n{entry_points}\n")


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    """Two tiny Llama models (different seeds), a prompts file, and two plugin folders: ``toy`` (package
    toy-plugin) and ``extra`` (aniso2 from package aniso-again, and the broken package broken-plugin)."""
    root = tmp_path_factory.mktemp("plugins")
    models = [str(tiny.save(root / name, "llama", adds_bos=False, seed=seed)) for name, seed in (("a", 0), ("b", 1))]
    (root / "prompts.txt").write_text("\n".join(tiny.TEXTS[:6]) + "\n")
    toy, extra = root / "toy", root / "extra"
    toy.mkdir()
    extra.mkdir()
    (toy / "toy_study.py").write_text(TOY_STUDY)
    dist(toy, "toy-plugin", "toy = toy_study:Toy")
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


def hand_norms(folder, texts) -> np.ndarray:
    """(n_layers + 1,): per hidden state, the mean over ``texts`` of the L2 norm of the average of the text's
    token states (the tiny tokenizer adds no BOS, so every token is averaged), each text run alone."""
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    norms = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states  # n_layers + 1 x (1, T, d)
            norms.append([h[0].double().mean(dim=0).norm().item() for h in hidden])
    return np.mean(norms, axis=0)


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
