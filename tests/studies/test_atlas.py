"""The atlas study on tiny random models: `layerscope run atlas` through the CLI (files, metrics, linear and
debiased CKA recomputed with numpy from the pass's pooled vectors, boundary rows), bad input, ``--max-tokens``, and
the atlas inside the tiny suite and a serial sweep."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import tiny
from layerscope import load_model
from layerscope.cli import app
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.run import run_study
from layerscope.study import StudyConfig, StudyResult

runner = CliRunner()

# -- `layerscope run atlas` on tiny models --

FILE_LINES = ["# short texts", "", *tiny.TEXTS[:4], "", "#  longer ones", *tiny.TEXTS[4:], "", ""]
FILE_TEXTS = [line for line in FILE_LINES if line and not line.startswith("#")]
METRICS = ["lens_ce", "lens_entropy", "lens_kl", "lens_top1_agree", "block_influence", "angular_distance", "cka",
           "twonn_id", "prompt_entropy", "dataset_entropy", "massive_ratio", "norm"]
N_LAYERS = 6


def run(*args):
    return runner.invoke(app, ["run", "atlas", *map(str, args)])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two tiny 6-layer models (Llama without BOS, GPT-2 with BOS) and a texts file with comments and blanks."""
    root = tmp_path_factory.mktemp("atlas")
    models = [str(tiny.save(root / "llama", "llama", adds_bos=False, n_layers=N_LAYERS)),
              str(tiny.save(root / "gpt2", "gpt2", adds_bos=True, n_layers=N_LAYERS))]
    texts = root / "texts.txt"
    texts.write_text("\n".join(FILE_LINES))
    return root, models, texts


@pytest.fixture(scope="module")
def two_models(inputs):
    """`layerscope run atlas` on both models: (out folder, result.json, table)."""
    root, models, texts = inputs
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        result = run("--model", models[0], "--model", models[1], "--texts", texts, "--out", out)
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "result.json").read_text()), pd.read_csv(out / "table.csv")


def test_run_writes_every_file_and_every_metric_of_the_issue(two_models, inputs):
    out, data, table = two_models
    _, models, _ = inputs
    names = {p.name for p in out.iterdir()}
    assert {"result.json", "table.csv", "report.md", "atlas_profiles.png", "index.html"} <= names
    assert len(list(out.glob("cka_*.png"))) == 3  # each model's own, and one across the two
    assert len(list(out.glob("cka_*_vs_*.png"))) == 1 and len(list(out.glob("massive_map_*.png"))) == 2
    assert data["study"] == "atlas" and data["manifest"]["dataset"]["n_texts"] == len(FILE_TEXTS) == 11
    assert {"pass_s", "analysis_s", "after_extraction_s"} <= data["manifest"]["timings"].keys()
    assert set(METRICS) <= set(table["metric"])
    for model in models:
        rows = table[(table["model"] == model) & table["model_b"].isna()]
        assert data["summary"]["models"][model]["n_texts"] == 11
        for metric in METRICS:
            if metric in ("block_influence", "angular_distance"):
                expected = list(range(N_LAYERS))  # block l: state l -> state l + 1
            elif metric == "cka":
                expected = sorted(list(range(N_LAYERS + 1)) * (N_LAYERS + 1))
            else:
                expected = list(range(N_LAYERS + 1))
            got = rows[rows["metric"] == metric]
            if metric == "block_influence":
                assert sorted(got["tokens"]) == ["all"] * N_LAYERS + ["excl_massive"] * N_LAYERS
                got = got[got["tokens"] == "all"]
            assert sorted(got["layer"].astype(int)) == expected, metric
            assert np.isfinite(got["value"]).all(), metric
    report = (out / "report.md").read_text()
    assert report.startswith("# Layer atlas") and "## Across models" in report


def test_cka_within_a_model_is_a_symmetric_layer_by_layer_matrix_with_ones_on_the_diagonal(two_models, inputs):
    _, _, table = two_models
    _, models, _ = inputs
    for model in models:
        rows = table[(table["model"] == model) & (table["metric"] == "cka") & table["model_b"].isna()]
        assert len(rows) == (N_LAYERS + 1) ** 2 and not rows.duplicated(["layer", "layer_b"]).any()
        matrix = rows.pivot(index="layer", columns="layer_b", values="value").to_numpy()
        assert matrix.shape == (N_LAYERS + 1, N_LAYERS + 1)
        assert np.abs(np.diag(matrix) - 1).max() < 1e-9
        assert np.array_equal(matrix, matrix.T)
        assert ((matrix >= -1e-9) & (matrix <= 1 + 1e-9)).all()


def numpy_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA (Kornblith et al. 2019) of x (n, d1) and y (n, d2): ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on
    the column-centred matrices, float64."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x, axis=0, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64) - np.mean(y, axis=0, dtype=np.float64)
    return np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))


def test_cross_model_cka_equals_numpy_on_each_models_pooled_vectors(two_models, inputs):
    _, _, table = two_models
    _, (a, b), _ = inputs
    pooled = {spec: atlas_pass(load_model(spec), FILE_TEXTS, progress=False).pooled for spec in (a, b)}
    assert pooled[a].shape[:2] == pooled[b].shape[:2] == (11, N_LAYERS + 1)
    rows = table[(table["metric"] == "cka") & table["model_b"].notna()]
    assert set(zip(rows["model"], rows["model_b"], strict=True)) == {(a, b)} and len(rows) == (N_LAYERS + 1) ** 2
    for row in rows.itertuples():
        expected = numpy_cka(pooled[a][:, int(row.layer)], pooled[b][:, int(row.layer_b)])
        assert row.value == pytest.approx(expected, abs=1e-6), (row.layer, row.layer_b)
    assert (rows["n"] == 11).all() and (rows["depth_b"] == rows["layer_b"] / N_LAYERS).all()


def hand_debiased_cka(x, y):
    """Song et al. 2012's unbiased HSIC written out: K~, L~ the Gram matrices with zero diagonals,
    HSIC = [tr(K~L~) + 1'K~1 1'L~1 / ((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3));
    CKA = HSIC(K,L) / sqrt(HSIC(K,K) HSIC(L,L))."""
    def hsic(k, m):
        n = len(k)
        k, m = k - np.diag(np.diag(k)), m - np.diag(np.diag(m))
        one = np.ones(n)
        return (np.trace(k @ m) + (one @ k @ one) * (one @ m @ one) / ((n - 1) * (n - 2))
                - 2 / (n - 2) * one @ k @ m @ one) / (n * (n - 3))
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    k, m = x @ x.T, y @ y.T
    return hsic(k, m) / np.sqrt(hsic(k, k) * hsic(m, m))


def test_debiased_cka_rows_equal_the_hand_formula_within_and_across_models(two_models, inputs):
    _, _, table = two_models
    _, (a, b), _ = inputs
    pooled = {spec: atlas_pass(load_model(spec), FILE_TEXTS, progress=False).pooled for spec in (a, b)}
    rows = table[table["metric"] == "cka_debiased"]
    own = rows[(rows["model"] == a) & rows["model_b"].isna()]
    cross = rows[rows["model_b"].notna()]
    assert len(own) == len(cross) == (N_LAYERS + 1) ** 2
    for frame, other in ((own, a), (cross, b)):
        for row in frame.itertuples():
            expected = hand_debiased_cka(pooled[a][:, int(row.layer)], pooled[other][:, int(row.layer_b)])
            assert row.value == pytest.approx(expected, rel=1e-6, abs=1e-9), (row.layer, row.layer_b)


def test_boundary_rows_name_family_variant_interval_and_support(two_models, inputs):
    out, result, table = two_models
    _, models, _ = inputs
    rows = table[table["metric"] == "boundary"]
    for model in models:
        mine = rows[rows["model"] == model]
        # 7 layers: 2 segments of 3 need 6 points, so every check is fitted (the number of breaks is chosen)
        assert set(mine["variant"]) == {"default", "excl_massive", "no_layer0", "min_segment_3"}
        default = mine[mine["variant"] == "default"]
        assert set(default["family"]) <= {"lens", "similarity", "spectrum", "consensus"}
        assert "consensus" in set(default["family"])
        assert not default.duplicated(["family", "boundary"]).any()
        assert ((default["ci_lo"] <= default["value"]) & (default["value"] <= default["ci_hi"])).all()
        assert ((default["support"] >= 0) & (default["support"] <= 1)).all() and (default["n"] <= 200).all()
        assert (default["layer"] == default["value"]).all()
        s = result["summary"]["models"][model]["boundaries"]
        consensus = default[default["family"] == "consensus"].sort_values("boundary")["value"].astype(int).tolist()
        assert consensus == s["consensus"]
    report = (out / "report.md").read_text()
    for words in ("debiased", "threshold", "100x the median", "Matrix entropy: the authors' convention",
                  "TwoNN estimator: maximum likelihood", "**Sensitivity.**", "excl_massive", "no_layer0",
                  "min_segment_3", "[95 % interval]", "seen by", "penalties per break (noise units)"):
        assert words in report, words


@pytest.mark.parametrize("option, value, message", [
    ("--boundary-resamples", 5, "--boundary-resamples 5 is too small; use at least 20 (at most 10,000)"),
    ("--boundary-resamples", 20_000, "--boundary-resamples 20,000 is above the limit of 10,000"),
    ("--entropy-convention", "centred", "--entropy-convention 'centred' is not one of skean, raw"),
    ("--twonn-estimator", "levina", "--twonn-estimator 'levina' is not one of mle, facco"),
])
def test_bad_atlas_settings_are_one_clear_error(tmp_path, inputs, option, value, message):
    _, models, texts = inputs
    result = run("--model", models[0], "--texts", texts, option, value, "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


# -- bad input --

@pytest.mark.parametrize("name, make, message", [
    ("missing texts file", lambda root, texts: ["--texts", root / "missing.txt"], "does not exist"),
    ("a texts file with one text", lambda root, texts: ["--texts", one_text(root)], "1 prompt(s)"),
    ("--max-tokens 1", lambda root, texts: ["--texts", texts, "--max-tokens", 1], "--max-tokens 1"),
    ("--layers 99 on a 3-layer model", lambda root, texts: ["--texts", texts, "--layers", 99], "layer 99"),
])
def test_bad_input_is_one_clear_error_and_no_output(tmp_path, inputs, name, make, message):
    root, _, texts = inputs
    model = shallow_model(root)
    result = run("--model", model, *make(tmp_path, texts), "--out", tmp_path / "out")
    assert result.exit_code == 2, (name, result.output)
    assert result.output.startswith("error: ") and message in result.output and result.output.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no hidden partial folder


def one_text(root):
    path = root / "one.txt"
    path.write_text("# a comment\n\nOnly one text here.\n\n")
    return path


def shallow_model(root):
    """A tiny 3-layer Llama, saved once per module."""
    folder = root / "llama3"
    if not folder.exists():
        tiny.save(folder, "llama", adds_bos=False, n_layers=3)
    return folder


@pytest.mark.parametrize("case", ["two texts", "--max-tokens keeps one text"])
def test_too_few_texts_for_twonn_is_a_clear_error(tmp_path, inputs, case):
    root, _, texts = inputs
    lengths = token_lengths(shallow_model(root))
    if case == "two texts":
        two = tmp_path / "two.txt"
        two.write_text("\n".join(FILE_TEXTS[:2]) + "\n")
        args = ["--texts", two]
    else:
        args = ["--texts", texts, "--max-tokens", lengths[0]]
    result = run("--model", shallow_model(root), *args, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and not (tmp_path / "out").exists()


def token_lengths(model) -> list[int]:
    """Tokens of each of FILE_TEXTS as the model's tokenizer encodes it (BOS included where it adds one)."""
    tokenizer = load_model(str(model)).tokenizer
    return [len(tokenizer(text)["input_ids"]) for text in FILE_TEXTS]


# -- --max-tokens --

def test_max_tokens_keeps_the_first_texts_that_fit(tmp_path, inputs):
    root, models, texts = inputs
    lengths = {spec: token_lengths(spec) for spec in models}  # GPT-2 adds BOS: it counts
    budget = sum(lengths[models[1]][:5]) + lengths[models[1]][5] - 1  # GPT-2's 6th text does not fit by one token
    expected = {}
    for spec in models:
        kept, total = 0, 0
        for n in lengths[spec]:  # the first texts, in file order, while the running total stays within the budget
            if total + n > budget:
                break
            kept, total = kept + 1, total + n
        expected[spec] = (kept, total)
    assert expected[models[1]][0] == 5 and expected[models[0]][0] >= 5  # Llama's texts have no BOS: shorter
    data = {spec: run_study(StudyConfig(study="atlas", models=(spec,), texts=str(texts), max_tokens=budget))
            for spec in models}
    for spec, result in data.items():
        s = result.summary["models"][spec]
        assert (s["n_texts"], s["n_tokens"]) == expected[spec]
        assert result.manifest["dataset"]["max_tokens"] == budget
        cka = result.table[result.table["metric"] == "cka"]
        assert len(cka) == (N_LAYERS + 1) ** 2 and (cka["n"] == expected[spec][0]).all()


def test_a_one_model_run_writes_its_figures(tmp_path, inputs):
    _, models, texts = inputs
    result = run("--model", models[0], "--texts", texts, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"atlas_profiles.png", "result.json", "table.csv", "report.md"} <= names
    assert [p.name.startswith("cka_") for p in (tmp_path / "o").glob("cka_*.png")] == [True]  # no cross-model map
    assert len(list((tmp_path / "o").glob("massive_map_*.png"))) == 1


# -- the suite and a sweep --

def test_the_suite_runs_the_atlas_and_its_page_shows_it(tiny_suite):
    from layerscope.run import get_study

    folder, args = tiny_suite
    assert (folder / "atlas" / "result.json").is_file()
    result = StudyResult.load(folder / "atlas")
    assert result.study == "atlas" and result.config["models"] == [args[1], args[3]]
    assert result.manifest["dataset"]["n_texts"] == 4  # the suite's languages file: 2 texts in each of 2 languages
    page = (folder / "index.html").read_text()
    assert 'id="atlas"' in page and "Layer atlas" in page
    assert page.index("Summary of verdicts") < page.index('id="atlas"')
    for line in get_study("atlas").headline(result):
        assert line.replace("&", "&amp;").replace("'", "&#x27;").replace('"', "&quot;")[:60] in page


def massive_model(folder):
    """A tiny 6-layer Llama whose embedding of one common token holds 1000 in dimension 7: that token's residual
    state is massive at every block output, so block influence without massive tokens differs from all tokens."""
    tok = tiny.tokenizer(False)
    model = tiny.model("llama", len(tok), N_LAYERS)
    planted = tok("The")["input_ids"][0]
    with torch.no_grad():
        model.get_input_embeddings().weight[planted, 7] = 1000.0
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_a_serial_sweep_gathers_the_atlas_numbers(tmp_path, inputs):
    from layerscope.sweep import SweepPlan, run_sweep
    from layerscope.sweep.gather import profile_rows

    _, models, texts = inputs
    specs = [models[0], massive_model(tmp_path / "massive")]
    config = StudyConfig(study="atlas", models=tuple(specs), texts=str(texts))
    summary = run_sweep(SweepPlan(config), tmp_path / "sweep", echo=lambda _line: None)
    assert [row["status"] for row in summary["tasks"]] == ["done", "done"]
    for row in summary["tasks"]:
        (s,) = StudyResult.load(tmp_path / "sweep" / row["folder"]).summary["models"].values()
        b = s["boundaries"]
        shared = [x for x in b["intervals"] if x["family"] == "consensus" and len(x["families"]) >= 2]
        first, second = (shared + [None, None])[:2]
        nan = float("nan")
        assert row["numbers"] == pytest.approx({
            "n_boundaries": len(b["consensus"]), "n_shared_boundaries": len(shared),
            "boundary_1_depth_pct": 100 * first["value"] / N_LAYERS if first else nan,
            "boundary_2_depth_pct": 100 * second["value"] / N_LAYERS if second else nan,
            "boundary_1_ci_width": first["ci_hi"] - first["ci_lo"] if first else nan,
            "boundary_2_ci_width": second["ci_hi"] - second["ci_lo"] if second else nan,
            "l_star": s["l_star"], "twonn_peak_layer": s["twonn_peak_layer"],
            "lens_kl_half_depth_pct": 100 * s["lens_kl_half_layer"] / N_LAYERS}, nan_ok=True)
    table = pd.read_csv(tmp_path / "sweep" / "table.csv")
    planted = table[(table["model"] == specs[1]) & (table["metric"] == "block_influence")]
    assert not np.allclose(planted[planted["tokens"] == "all"]["value"],
                           planted[planted["tokens"] == "excl_massive"]["value"])  # the planting took
    assert {"block_influence.png", "lens_kl.png"} <= {p.name for p in (tmp_path / "sweep").iterdir()}
    profiles = profile_rows(pd.read_csv(tmp_path / "sweep" / "table.csv"), config)
    assert set(profiles["model"]) == set(specs)


def test_a_sweeps_block_influence_profile_is_the_all_token_rows(tmp_path, inputs):
    from layerscope.sweep.gather import profile_rows

    config = StudyConfig(study="atlas", models=(massive_model(tmp_path / "massive"),), texts=str(inputs[2]))
    table = run_study(config).table
    table["revision"], table["step"] = None, pd.array([pd.NA] * len(table), dtype="Int64")  # as gather_table adds
    rows = table[(table["metric"] == "block_influence") & (table["tokens"] == "all")].sort_values("layer")
    assert not np.allclose(rows["value"], table[(table["metric"] == "block_influence")
                                                & (table["tokens"] == "excl_massive")].sort_values("layer")["value"])
    got = profile_rows(table, config)
    got = got[got["metric"] == "block_influence"].sort_values("layer")
    assert got["value"].tolist() == pytest.approx(rows["value"].tolist())


def test_the_report_and_figure_show_the_tables_nats_in_bits(two_models):
    """table.csv keeps the lens numbers in nats; report.md and atlas_profiles.png show them in bits per token."""
    import math

    from layerscope.report.markdown import number
    from layerscope.studies.atlas.figures import profiles

    out, _, table = two_models
    result = StudyResult.load(out)
    model = next(iter(result.summary["models"]))
    rows = table[(table["model"] == model) & (table["metric"] == "lens_kl")]
    rows = rows[rows["tokens"].isna() | (rows["tokens"] == "all")].sort_values("layer") if "tokens" in rows else rows
    nats = rows["value"].to_numpy(dtype=float)
    report = (out / "report.md").read_text()
    assert "| lens_kl (bits/token) |" in report and "lens_ce (bits/token)" in report
    assert f"| {number(nats[0] / math.log(2))} |" in report
    panel = profiles(table, result.summary, {m: "k" for m in result.summary["models"]}).axes[1]  # lens_kl
    assert panel.get_ylabel() == "KL (bits/token)"
    np.testing.assert_allclose(panel.lines[0].get_ydata(), nats / math.log(2))
