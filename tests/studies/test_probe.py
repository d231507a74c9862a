"""`layerscope run probe` on a tiny random model: the tidy table, the mass-mean probe's accuracy and the in-sample
steering effect recomputed by hand (a plain transformers loop with an ordinary forward hook), the figures,
report and verdict rows, and bad input refused in one line."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

import tiny
from conftest import error_line
from layerscope.cli import app

runner = CliRunner()
N_LAYERS = 3
N_PAIRS = 12  # per category, 2 categories
FAST = ["--n-bootstrap", "200", "--n-permutations", "20", "--n-random", "20", "--folds", "3", "--steer-every", "1"]
COLUMNS = ["model", "state", "label_set", "method", "metric", "value", "ci_lo", "ci_hi", "p", "q", "n"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    model = str(tiny.save(root / "llama", "llama", adds_bos=False, n_layers=N_LAYERS))
    pairs = root / "pairs.json"
    pairs.write_text(json.dumps(tiny.pairs(2, N_PAIRS)))
    return root, model, pairs


def run(root, *args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSCOPE_CACHE", str(root / "cache"))
        return runner.invoke(app, ["run", "probe", *map(str, args)])


@pytest.fixture(scope="module")
def finished(inputs):
    """In-sample steering (--steer-holdout 0), so the hand computation below fits and measures on every pair."""
    root, model, pairs = inputs
    out = root / "out"
    result = run(root, "--model", model, "--dataset", pairs, "--label-sets", "side,category", "--steer-holdout", "0",
                 "--steer-pairs", "1000", "--alpha", "1.0,2.0", *FAST, "--out", out)
    assert result.exit_code == 0, result.output
    return out, pd.read_csv(out / "table.csv"), json.loads((out / "result.json").read_text())


def hand_states(folder, texts) -> tuple[np.ndarray, list]:
    """(n, L + 1, d) mean over each text's tokens of every hidden state (the tiny tokenizer adds no BOS), the last
    one the last block's output before the final norm (a hook), one text at a time; and the model."""
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    last = model.model.layers[-1]
    out, seen = [], {}
    handle = last.register_forward_hook(lambda m, a, o: seen.__setitem__("x", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        for text in texts:
            ids = tok(text, return_tensors="pt")["input_ids"]
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
            states = [h[0].double().mean(0) for h in hidden[:-1]] + [seen["x"][0].double().mean(0)]
            out.append(torch.stack(states).numpy())
    handle.remove()
    return np.array(out), (model, tok)


def hand_nll(model, tok, text, state, vector) -> float:
    """Mean next-token NLL of ``text`` with ``vector`` added at every position of hidden state ``state``: an
    ordinary forward hook on the embeddings (state 0) or on block state - 1, the loss from the logits here."""
    target = model.model.embed_tokens if state == 0 else model.model.layers[state - 1]
    add = torch.tensor(vector, dtype=torch.float32)

    def hook(module, args, output):
        if isinstance(output, tuple):
            return (output[0] + add, *output[1:])
        return output + add

    handle = target.register_forward_hook(hook)
    try:
        with torch.no_grad():
            ids = tok(text, return_tensors="pt")["input_ids"]
            logits = model(input_ids=ids).logits[0, :-1].double()
            return float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item())
    finally:
        handle.remove()


def test_table_is_tidy_with_every_state_label_set_method_and_metric(finished):
    _, table, result = finished
    assert set(COLUMNS) <= set(table.columns)
    assert set(table["method"]) == {"logreg", "mass_mean", "control", "steer", "random_band"}
    assert set(table["metric"]) == {"accuracy", "auroc", "selectivity", "effect"}
    assert set(table["label_set"]) == {"side", "category"}
    for (label_set, method, metric), rows in table.groupby(["label_set", "method", "metric"]):
        if method in ("steer",):
            continue
        assert sorted(rows["state"]) == list(range(N_LAYERS + 1)), (label_set, method, metric)
    steer = table[table["method"] == "steer"]
    assert set(steer["label_set"]) == {"side"} and set(steer["alpha"]) == {1.0, 2.0, -1.0, -2.0}
    assert set(steer["split"]) == {"in-sample"}
    assert result["summary"]["models"][next(iter(result["summary"]["models"]))]["label_sets"]["side"]["steering"][
        "in_sample"] is True


def test_in_sample_steering_effect_equals_a_hand_hooked_forward(inputs, finished):
    root, model_dir, _ = inputs
    _, table, _ = finished
    texts = [t for cat in tiny.pairs(2, N_PAIRS).values() for pair in cat["pairs"] for t in pair]
    X, (model, tok) = hand_states(model_dir, texts)
    intact = np.array([hand_nll(model, tok, t, 0, np.zeros(X.shape[-1])) for t in texts])
    for state in (0, 2, N_LAYERS):
        v = (X[0::2, state] - X[1::2, state]).mean(axis=0)
        for alpha in (1.0, -2.0):
            steered = np.array([hand_nll(model, tok, t, state, alpha * v) for t in texts])
            pref = lambda nll: nll[1::2] - nll[0::2]  # noqa: E731 - NLL(B) - NLL(A) per pair
            expected = (pref(steered) - pref(intact)).mean()
            row = table[(table["method"] == "steer") & (table["state"] == state) & (table["alpha"] == alpha)]
            np.testing.assert_allclose(row["value"].item(), expected, rtol=1e-3, atol=1e-6)


def test_mass_mean_accuracy_at_the_embeddings_is_separable_and_significant(finished):
    """Side A starts 'Without doubt', side B 'Maybe': the embeddings' mean differs in those tokens, so the
    mass-mean probe separates every held-out text at state 0 (by hand: each text is nearer its class mean)."""
    _, table, _ = finished
    row = table[(table["label_set"] == "side") & (table["method"] == "mass_mean") & (table["metric"] == "accuracy")
                & (table["state"] == 0)]
    assert row["value"].item() == 1.0 and row["q"].item() < 0.05


def test_figures_report_and_verdict_rows(finished):
    out, _, _ = finished
    figures = sorted(p.name for p in out.glob("probe_*.png"))
    assert len(figures) == 2 and figures[0].startswith("probe_category_") and figures[1].startswith("probe_side_")
    report = (out / "report.md").read_text()
    assert "## Conventions" in report and "Hewitt & Liang" in report and "in-sample" in report
    page = (out / "index.html").read_text()
    assert "side: linearly decodable" in page and "side: steering moves the preference" in page


@pytest.mark.parametrize("args, words", [
    (["--alpha", "-1"], "--alpha '-1' must be positive numbers"),
    (["--steer-holdout", "1.5"], "--steer-holdout 1.5 must lie in [0, 1)"),
    (["--label-sets", "nope"], "unknown label set 'nope'"),
    (["--n-random", "5"], "the random band needs at least 20 directions"),
])
def test_bad_settings_are_one_error_line(inputs, args, words):
    root, model, pairs = inputs
    result = run(root, "--model", model, "--dataset", pairs, *args, "--out", root / "bad")
    assert words in error_line(result)
    assert not (root / "bad").exists()


def test_a_labels_file_with_one_class_is_refused_before_any_model_loads(inputs):
    root, model, pairs = inputs
    labels = root / "one.csv"
    labels.write_text("text,label\n" + "".join(f"text {i},x\n" for i in range(12)))
    result = run(root, "--model", model, "--dataset", pairs, "--labels", labels, "--out", root / "bad2")
    line = error_line(result)
    assert "one.csv" in line and "class" in line
    assert not (root / "bad2").exists()


def test_the_steering_p_is_a_prediction_t_test_by_the_closed_form_of_t_with_two_degrees_of_freedom():
    from layerscope.studies.probe.steering import prediction_p

    # null -1, 0, 1: mean 0, sd 1, n 3; effect 2: t = 2 / sqrt(4 / 3) = sqrt(3); with 2 degrees of freedom the
    # two-sided p is 1 - t / sqrt(2 + t^2) (the t distribution's closed form for df = 2)
    t = np.sqrt(3)
    assert prediction_p(2.0, np.array([-1.0, 0.0, 1.0])) == pytest.approx(1 - t / np.sqrt(2 + t**2), rel=1e-12)


def test_a_label_set_with_too_few_groups_for_the_folds_is_skipped_with_a_warning(inputs):
    """3 categories x 4 pairs: the category task has 4 groups per class, fewer than 5 folds; the side task has 12
    pairs. The run finishes, probes the side, and names the category set it could not probe."""
    root, model, _ = inputs
    small = root / "small.json"
    small.write_text(json.dumps(tiny.pairs(3, 4)))
    out = root / "skipped"
    result = run(root, "--model", model, "--dataset", small, "--no-steer", "--n-bootstrap", "200",
                 "--n-permutations", "20", "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "result.json").read_text())
    (summary,) = data["summary"]["models"].values()
    assert list(summary["label_sets"]) == ["side"]
    (warning,) = data["summary"]["warnings"]
    assert "label set category was not probed" in warning and "fewer than folds=5" in warning
