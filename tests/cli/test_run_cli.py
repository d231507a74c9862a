"""`layerscope run STUDY` end to end on tiny random models and the bundled dataset."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import tiny
from layerscope import load_model, load_pairs
from layerscope.cli import app
from layerscope.report.markdown import md_text, with_models
from layerscope.run import get_study
from layerscope.study import StudyResult
from layerscope.study.result import TABLE_COLUMNS

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {name: str(tiny.save(root / name, arch, adds_bos=bos))
            for name, arch, bos in (("tiny-llama", "llama", False), ("tiny-gpt2", "gpt2", True))}


def run(*args):
    return runner.invoke(app, ["run", *map(str, args)])


@pytest.mark.parametrize("study, metric", [("divergence", "r_ua_pref"), ("scaling", "r_ua_pref"),
                                           ("phases", "r_centroid_pref")])
def test_each_study_writes_its_run_folder(tmp_path, models, study, metric):
    out = tmp_path / study
    bootstrap = ["--n-bootstrap", 200] if study == "phases" else []  # an option a study does not read is an error
    result = run(study, "--model", models["tiny-llama"], "--model", models["tiny-gpt2"], "--out", out, *bootstrap)
    assert result.exit_code == 0, result.output
    assert {"result.json", "table.csv", "report.md", f"{study}.png"} <= {p.name for p in out.iterdir()}
    data = json.loads((out / "result.json").read_text())
    assert data["schema_version"] == 1 and data["study"] == study
    assert data["config"]["models"] == [models["tiny-llama"], models["tiny-gpt2"]] and data["config"]["seed"] == 42
    manifest = data["manifest"]
    assert [m["n_layers"] for m in manifest["models"]] == [3, 3]
    assert all(len(m["weights_hash"]) == 64 for m in manifest["models"])
    assert manifest["dataset"]["hash"] == load_pairs().hash
    assert {"torch", "transformers", "numpy"} <= manifest["versions"].keys()
    assert {"load_s", "extract_s", "analysis_s", "write_s", "after_extraction_s"} <= manifest["timings"].keys()
    table = pd.read_csv(out / "table.csv")
    assert list(table.columns[: len(TABLE_COLUMNS)]) == TABLE_COLUMNS
    rows = table[(table["metric"] == metric) & (table.get("subset", "all") == "all")]  # not the checks' rows
    assert len(rows) == 2 * 4 * (3 if study == "divergence" else 1)  # models x layers 0..3 (x poolings)
    assert (rows["depth"] == rows["layer"] / rows["n_layers"]).all()
    assert "# " in (out / "report.md").read_text()
    assert study in result.output


def test_a_second_study_reuses_the_first_ones_extraction(tmp_path, models):
    assert run("divergence", "--model", models["tiny-gpt2"], "--out", tmp_path / "a").exit_code == 0
    assert run("phases", "--model", models["tiny-gpt2"], "--out", tmp_path / "b", "--n-bootstrap", 200).exit_code == 0
    first = json.loads((tmp_path / "a" / "result.json").read_text())["manifest"]["models"][0]
    second = json.loads((tmp_path / "b" / "result.json").read_text())["manifest"]["models"][0]
    assert first["extraction"]["computed"] > 0
    assert second["extraction"] == {**first["extraction"], "computed": 0, "reused": first["extraction"]["batches"]}
    assert second["activations_fingerprint"] == first["activations_fingerprint"]


def test_seed_compat_tests_every_fourth_layer(tmp_path, models):
    folder = tiny.save(tmp_path / "deep", "llama", adds_bos=False, n_layers=6)
    result = run("phases", "--model", folder, "--compat", "notebooks", "--out", tmp_path / "o", "--n-bootstrap", 200)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "o" / "result.json").read_text())["summary"]["models"][str(folder)]
    assert summary["layers"] == [0, 4, 6]


def test_device_map_reaches_the_loader_and_the_saved_config(tmp_path, models, monkeypatch):
    from layerscope.study import per_model as runner

    asked = []

    def spy(spec, **kwargs):
        asked.append(kwargs["device_map"])
        return load_model(spec, **kwargs)

    monkeypatch.setattr(runner, "load_model", spy)
    result = run("divergence", "--model", models["tiny-llama"], "--device-map", "auto", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert asked == ["auto"]
    assert yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())["device_map"] == "auto"
    assert json.loads((tmp_path / "o" / "result.json").read_text())["config"]["device_map"] == "auto"


def test_written_folder_reloads_and_re_renders(tmp_path, models):
    out = tmp_path / "p"
    assert run("phases", "--model", models["tiny-llama"], "--out", out, "--n-bootstrap", 200).exit_code == 0
    loaded = StudyResult.load(out)
    assert with_models(get_study("phases").report(loaded), loaded.manifest) == (out / "report.md").read_text()
    assert set(get_study("phases").figures(loaded)) == {"phases"}


def test_anisotropy_writes_profiles_for_both_token_sets_and_a_zip(tmp_path, models):
    import zipfile

    out = tmp_path / "an"
    result = run("anisotropy", "--model", models["tiny-gpt2"], "--out", out, "--reference-lstar", 1)
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"anisotropy_profile.png", "eigenvalue_spectrum.png", "anisotropy_results.zip", "report.md"} <= names
    with zipfile.ZipFile(out / "anisotropy_results.zip") as archive:
        assert set(archive.namelist()) == {"result.json", "table.csv", "report.md"}  # the data, not the page
    table = pd.read_csv(out / "table.csv")
    top1 = table[table["metric"] == "top1_ratio"]
    sets = ["all", "excl_massive", "excl_pos0", "excl_pos0_massive"]
    assert sorted(top1["tokens"].unique()) == sets and len(top1) == 4 * 5
    s = json.loads((out / "result.json").read_text())["summary"]["models"][models["tiny-gpt2"]]
    profile = top1[(top1["tokens"] == "all") & (top1["stage"] != "post_norm")]  # layer 3 taken before the norm
    primary = profile.sort_values("layer")["value"].to_numpy()
    assert s["l_star"] == int(primary.argmax()) and s["primary"] == "all" and s["n_prompts"] == 36
    assert s["token_sets"]["all"]["reference"]["reference_l_star"] == 1
    n_tokens = s["token_sets"]["all"]["n_tokens"]
    assert s["token_sets"]["excl_pos0"]["n_tokens"] == n_tokens - 36
    # 3 layers: whichever L*, a segment of the bell test has fewer than 10 layers
    warnings = json.loads((out / "result.json").read_text())["summary"]["warnings"]
    assert warnings and all("bell test fits a line to" in w for w in warnings)
    assert f"> **Warning:** {md_text(warnings[0])}" in (out / "report.md").read_text()  # escaped as markdown text


def test_anisotropy_seed_compat_keeps_to_all_tokens(tmp_path, models):
    out = tmp_path / "an"
    assert run("anisotropy", "--model", models["tiny-llama"], "--out", out, "--compat", "notebooks").exit_code == 0
    s = json.loads((out / "result.json").read_text())["summary"]["models"][models["tiny-llama"]]
    assert list(s["token_sets"]) == ["all"]


def test_one_prompt_is_not_enough(tmp_path, models):
    prompts = tmp_path / "p.txt"
    prompts.write_text("# only\nJust one prompt here\n\n")
    result = run("anisotropy", "--model", models["tiny-llama"], "--prompts", prompts, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "1 prompt(s)" in result.output and not (tmp_path / "o").exists()


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "texts.json"
    path.write_text(json.dumps({"en": {"resource": "high", "texts": ["The cat sat on the mat.", "Prices rose."]},
                                "xx": {"resource": "low", "texts": ["Bread dough doubles.", "Ice floats on water.",
                                                                   "Hey, grab some milk tonight?"]}}))
    return path


def test_ablation_with_sweep_writes_per_text_rows_panels_and_heatmap(tmp_path, models, texts):
    out = tmp_path / "ab"
    result = run("ablation", "--model", models["tiny-llama"], "--texts", texts, "--sweep", "--out", out)
    assert result.exit_code == 0, result.output
    assert {"ablation.png", "ablation_sweep.png", "ablation_notebook_scheme.png", "report.md"} <= {
        p.name for p in out.iterdir()}
    table = pd.read_csv(out / "table.csv")
    assert {"model", "config", "lang", "resource", "sample", "metric", "value"} <= set(table.columns)
    per_text = table[table["metric"] == "ppl"]
    primary = per_text[per_text["scheme"] == "per-channel"]
    assert len(primary) == (8 + 3) * 5 and len(per_text) - len(primary) == 8 * 5  # the notebook variant: no sweep
    assert sorted(primary[primary["config"] == "baseline"]["sample"]) == [0, 0, 1, 1, 2]
    swept = primary[primary["config"] == "only_L2"]
    assert (swept["layer"] == 2).all() and (swept["depth"] == 2 / 3).all()
    base = primary[primary["config"] == "baseline"].set_index(["lang", "sample"])["value"]
    for r in table[(table["metric"] == "delta_nll") & (table["scheme"] == "per-channel")].itertuples():
        ppl = primary[(primary["config"] == r.config) & (primary["lang"] == r.lang) & (primary["sample"] == r.sample)]
        assert r.value == pytest.approx(np.log(ppl["value"].item()) - np.log(base[(r.lang, r.sample)]), abs=1e-6)
    text = (out / "result.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    s = json.loads(text)["summary"]["models"][models["tiny-llama"]]
    variant = s["variants"]["per-channel/linear"]
    baseline = variant["per_config"][0]
    assert baseline["config"] == "baseline" and baseline["disparity_ratio"] is None \
        and "below" in baseline["disparity_note"]
    assert sorted(variant["most_sensitive_layer"]) == ["en", "xx"]
    assert variant["verdicts"]["h5"]["result"] in ("SUPPORTED", "NOT_SUPPORTED", "INCONCLUSIVE", "NOT_APPLICABLE",
                                                   "UNDETERMINED")
    assert "H5" in (out / "report.md").read_text()
    assert json.loads(text)["summary"]["warnings"] == [
        "ablation: the disparity ratio compares the mean degradation of 1 high- with 1 low-resource languages "
        "(< 10 each): one language can swing it; treat H5 as descriptive."]
    assert "> **Warning:** ablation: the disparity ratio" in (out / "report.md").read_text()


def test_ablation_seed_compat_is_the_notebook_scheme_only(tmp_path, models, texts):
    out = tmp_path / "ab"
    assert run("ablation", "--model", models["tiny-gpt2"], "--texts", texts, "--compat", "notebooks",
               "--out", out).exit_code == 0
    s = json.loads((out / "result.json").read_text())["summary"]["models"][models["tiny-gpt2"]]
    assert list(s["variants"]) == ["per-tensor/all-weights"]
