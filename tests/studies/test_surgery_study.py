"""`layerscope run surgery` on tiny random models: the tidy table (columns, rows per intervention, prune rows
with k and rule, per-language rows), numbers recomputed from the engine's per-text measures, the figures and
report, bad input, and reuse on vs off through the CLI."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tiny
from conftest import error_line
from layerscope import load_model
from layerscope.cli import app
from layerscope.engine.interventions.surgery import Intervention
from layerscope.engine.interventions.surgery_run import measure_interventions
from layerscope.report.markdown import number
from layerscope.study import StudyResult

runner = CliRunner()
N_LAYERS = 6
COLUMNS = ["model", "intervention", "layer", "k", "rule", "lang", "metric", "value", "ci_lo", "ci_hi", "p", "n"]
FAST = ["--n-bootstrap", "200", "--n-permutations", "200", "--max-texts", "8"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("surgery")
    model = str(tiny.save(root / "llama", "llama", adds_bos=False, n_layers=N_LAYERS))
    texts = root / "texts.txt"
    texts.write_text("\n".join(tiny.TEXTS))
    langs = root / "langs.json"
    langs.write_text(json.dumps({"en": {"resource": "high", "texts": tiny.TEXTS[:5]},
                                 "sw": {"resource": "low", "texts": tiny.TEXTS[5:]}}))
    return root, model, texts, langs


def run(root, *args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        return runner.invoke(app, ["run", "surgery", *map(str, args)])


@pytest.fixture(scope="module")
def finished(inputs):
    root, model, texts, _ = inputs
    out = root / "out"
    result = run(root, "--model", model, "--texts", texts, *FAST, "--out", out)
    assert result.exit_code == 0, result.output
    return out, pd.read_csv(out / "table.csv"), json.loads((out / "result.json").read_text())


def test_table_is_tidy_with_a_row_per_block_and_intervention(finished):
    out, table, _ = finished
    assert set(COLUMNS) <= set(table.columns)
    main = table[(table["lang"] == "all") & (table["metric"] == "delta_nll")]
    for kind, count in (("skip", N_LAYERS), ("repeat", N_LAYERS), ("swap", N_LAYERS - 1)):
        rows = main[main["intervention"] == kind]
        assert sorted(rows["layer"]) == list(range(count))
        assert rows["k"].isna().all() and rows["rule"].isna().all()
        assert (rows["n"] == 8).all()
    prune = table[(table["intervention"] == "prune") & (table["metric"] == "delta_nll")]
    assert set(prune["rule"]) == {"block_influence", "angular_distance", "random"}
    assert set(prune["k"]) == {1}  # a quarter of 6 blocks
    assert (prune[prune["rule"] == "random"]["draws"] == 20).all()
    assert set(table["metric"]) >= {"delta_nll", "kl", "top1_agree", "final_cos", "block_influence"}
    assert len(list(out.glob("surgery_layers_*llama.png"))) == 1
    assert len(list(out.glob("surgery_pruning_*llama.png"))) == 1


def test_numbers_equal_the_engine_and_formulas(finished, inputs):
    _, table, result = finished
    _, model, texts, _ = inputs
    lm = load_model(model)
    all_texts = texts.read_text().splitlines()
    rng = np.random.default_rng(42)  # the config's seed picks the subset
    index = sorted(int(i) for i in rng.choice(len(all_texts), size=8, replace=False))
    picked = [all_texts[i] for i in index]
    m = measure_interventions(lm, picked, [Intervention.skip(3), Intervention.swap(0)], prefix_reuse=False)
    for iv, kind in ((Intervention.skip(3), "skip"), (Intervention.swap(0), "swap")):
        row = table[(table["intervention"] == kind) & (table["layer"] == iv.layers[0]) & (table["lang"] == "all")]
        by = row.set_index("metric")["value"]
        assert by["delta_nll"] == pytest.approx(np.mean(m[iv].nll - m.intact_nll), rel=1e-5)
        assert by["kl"] == pytest.approx(np.mean(m[iv].kl), rel=1e-5)
        assert by["top1_agree"] == pytest.approx(np.mean(m[iv].agreement), rel=1e-6)
        assert by["final_cos"] == pytest.approx(np.mean(m[iv].cosine), rel=1e-6)
    (s,) = result["summary"]["models"].values()
    skip = table[(table["intervention"] == "skip") & (table["metric"] == "delta_nll") & (table["lang"] == "all")]
    from scipy.stats import spearmanr

    influence = table[table["metric"] == "block_influence"].sort_values("layer")["value"].to_numpy()
    rho = spearmanr(influence, skip.sort_values("layer")["value"].to_numpy()).statistic
    assert s["geometry"]["block_influence"]["rho"] == pytest.approx(rho)


def test_report_headline_and_result_reload(finished):
    out, _, _ = finished
    report = (out / "report.md").read_text()
    for heading in ("Critical blocks", "Does geometry predict", "phase boundaries hold", "Swap sensitivity",
                    "Pruning curve"):
        assert heading in report
    loaded = StudyResult.load(out)
    assert loaded.study == "surgery"
    # the summary keeps nats; the report speaks bits per token
    s = loaded.summary["models"][next(iter(loaded.summary["models"]))]
    assert f"intact NLL {number(s['intact_nll'] / math.log(2))} bits/token" in report and "nats" not in report


def test_languages_give_per_language_and_low_minus_high_rows(inputs):
    root, model, _, langs = inputs
    out = root / "langs_out"
    result = run(root, "--model", model, "--texts", langs, *FAST, "--interventions", "skip", "--out", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "table.csv", keep_default_na=False, na_values=[""])
    assert set(table["intervention"].dropna()) == {"skip"}
    per_lang = table[table["lang"].isin(["en", "sw"])]
    assert len(per_lang) == 2 * N_LAYERS and (per_lang.groupby("lang")["n"].first() == 4).all()
    contrast = table[table["metric"] == "delta_nll_low_minus_high"]
    assert len(contrast) == N_LAYERS
    en = per_lang[per_lang["lang"] == "en"].set_index("layer")["value"]
    sw = per_lang[per_lang["lang"] == "sw"].set_index("layer")["value"]
    np.testing.assert_allclose(contrast.set_index("layer")["value"], sw - en, rtol=1e-6)
    assert len(list(out.glob("surgery_languages_*llama.png"))) == 1


def test_reuse_off_gives_the_same_table(inputs, finished):
    root, model, texts, _ = inputs
    out = root / "off"
    result = run(root, "--model", model, "--texts", texts, *FAST, "--no-prefix-reuse", "--out", out)
    assert result.exit_code == 0, result.output
    on, off = finished[1], pd.read_csv(out / "table.csv")
    np.testing.assert_allclose(off["value"], on["value"], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--interventions", "skip,cut"], "--interventions"),
    (["--random-draws", "5"], "--random-draws"),
    (["--max-texts", "2"], "--max-texts"),
    (["--boundaries", "all"], "--boundaries"),
])
def test_bad_settings_are_one_clear_error(inputs, args, fragment):
    root, model, texts, _ = inputs
    result = run(root, "--model", model, "--texts", texts, *args, "--out", root / "bad")
    assert fragment in error_line(result)
    assert not (root / "bad").exists()


def test_boundaries_out_of_range_name_the_models_layers(inputs):
    root, model, texts, _ = inputs
    result = run(root, "--model", model, "--texts", texts, *FAST, "--boundaries", "2,40", "--out", root / "bad2")
    assert "0..6" in error_line(result)


def test_too_few_texts_name_what_surgery_needs_not_the_atlas(inputs):
    root, model, _, _ = inputs
    one = root / "one.txt"
    one.write_text("# a heading\nThe cat sat on the mat.\n\n")  # one text: the heading and blank line skipped
    line = error_line(run(root, "--model", model, "--texts", one, "--out", root / "few"))
    assert line.startswith(f"error: {one}: 1 text(s); surgery needs at least 3: ")
    assert "split-half" in line and line.endswith(f"give at least 3 lines in {one}, one text per line (blank lines "
                                                  "and '#' lines are skipped)")
    assert "atlas" not in line
    langs = root / "two_langs.json"  # a languages file of 2 texts in all
    langs.write_text(json.dumps({"en": {"resource": "high", "texts": tiny.TEXTS[:1]},
                                 "sw": {"resource": "low", "texts": tiny.TEXTS[1:2]}}))
    line = error_line(run(root, "--model", model, "--texts", langs, "--out", root / "few"))
    assert f"{langs}: 2 text(s); surgery needs at least 3" in line
    assert line.endswith(f"give at least 3 texts across the languages of {langs}")
    assert not (root / "few").exists()


@pytest.mark.parametrize("max_k", [N_LAYERS, 40])
def test_max_k_above_the_blocks_is_refused_before_any_pass(inputs, monkeypatch, max_k):
    import layerscope.studies.surgery as surgery

    def no_pass(*_args, **_kwargs):
        raise AssertionError("a forward pass ran before --max-k was checked")

    monkeypatch.setattr(surgery, "block_transitions", no_pass)
    monkeypatch.setattr(surgery, "measure_interventions", no_pass)
    root, model, texts, _ = inputs
    line = error_line(run(root, "--model", model, "--texts", texts, *FAST, "--max-k", max_k, "--out", root / "k"))
    assert line == (f"error: --max-k {max_k} is more blocks than {model} can lose: it has {N_LAYERS} decoder blocks "
                    f"and pruning keeps at least one, so use --max-k from 1 to {N_LAYERS - 1} (or leave it out for "
                    f"a quarter of the blocks, {N_LAYERS // 4})")
    assert not (root / "k").exists()


def test_max_k_of_all_blocks_but_one_prunes_every_k(inputs):
    root, model, texts, _ = inputs
    out = root / "k_top"
    result = run(root, "--model", model, "--texts", texts, *FAST, "--interventions", "prune",
                 "--max-k", N_LAYERS - 1, "--out", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "table.csv")
    prune = table[(table["intervention"] == "prune") & (table["metric"] == "delta_nll")]
    assert sorted(set(prune["k"])) == list(range(1, N_LAYERS))
    assert set(prune[prune["rule"] == "random"]["draws"]) == {20}


def test_surgery_jobs_never_cut_max_k():
    from layerscope.studies.surgery.jobs import surgery_jobs

    with pytest.raises(ValueError, match="max_k=6: a model of 6 blocks can prune 1 to 5"):
        surgery_jobs(6, ("prune",), object(), max_k=6, draws=20, seed=0)


# -- the suite and a sweep --

def test_the_suite_runs_surgery_and_its_page_shows_it(tiny_suite):
    from layerscope.run import get_study

    folder, args = tiny_suite
    result = StudyResult.load(folder / "surgery")
    assert result.study == "surgery" and result.config["models"] == [args[1], args[3]]
    assert result.manifest["dataset"]["n_texts"] == 4  # the suite's languages file: 2 texts in each of 2 languages
    assert set(result.table["lang"].dropna()) >= {"en", "xx", "low-high"}
    page = (folder / "index.html").read_text()
    assert 'id="surgery"' in page and "Surgery" in page
    assert page.index("Summary of verdicts") < page.index('id="surgery"')
    for line in get_study("surgery").headline(result):
        assert line.replace("&", "&amp;").replace("'", "&#x27;").replace('"', "&quot;")[:60] in page


def test_a_two_model_sweep_gathers_the_surgery_numbers(tmp_path, inputs):
    from layerscope.study import StudyConfig
    from layerscope.sweep import SweepPlan, run_sweep
    from layerscope.sweep.gather import profile_rows

    root, model, texts, _ = inputs
    other = str(tiny.save(tmp_path / "gpt2", "gpt2", adds_bos=True, n_layers=4))
    config = StudyConfig(study="surgery", models=(model, other), texts=str(texts), max_texts=6, n_bootstrap=200,
                         n_permutations=200, interventions="skip,swap")
    summary = run_sweep(SweepPlan(config), tmp_path / "sweep", echo=lambda _line: None)
    assert [row["status"] for row in summary["tasks"]] == ["done", "done"]
    for row in summary["tasks"]:
        (s,) = StudyResult.load(tmp_path / "sweep" / row["folder"]).summary["models"].values()
        assert row["numbers"]["first_skip_cost"] == pytest.approx(s["skip"]["mean"][0])
        assert row["numbers"]["critical_interior"] == len(s["critical"]["interior"])
    profiles = profile_rows(pd.read_csv(tmp_path / "sweep" / "table.csv"), config)
    skip = profiles[profiles["metric"] == "delta_nll"]
    assert sorted(skip.groupby("model").size()) == [4, N_LAYERS]  # one row per skipped block of each model
