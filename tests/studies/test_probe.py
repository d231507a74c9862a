"""`layerscope run probe` on a tiny random model: the tidy table, the mass-mean probe's accuracy and the in-sample
steering effect recomputed by hand (a plain transformers loop with an ordinary forward hook), for the pair side and
for a labels file with two classes in uneven groups; the same table with and without prefix reuse; -alpha flipping
the sign on a planted contrast; held-out groups holding both classes; the figures, report and verdict rows, and bad
input refused in one line."""

import csv
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
from layerscope.models import decoder_layers
from layerscope.studies.probe.steering import SteerOptions, split_groups, steer_states

runner = CliRunner()
N_LAYERS = 3
N_PAIRS = 12  # per category, 2 categories
FAST = ["--n-bootstrap", "200", "--n-permutations", "20", "--n-random", "20", "--folds", "3", "--steer-every", "1"]
SHORT = ["--n-bootstrap", "200", "--n-permutations", "20", "--n-random", "20", "--folds", "3"]
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
    steer = table[table["method"] == "steer"]  # the category set has two classes here (cat0, cat1): steered too
    assert set(steer["label_set"]) == {"side", "category"} and set(steer["alpha"]) == {1.0, 2.0, -1.0, -2.0}
    assert set(steer["split"]) == {"in-sample"}
    (summary,) = result["summary"]["models"].values()
    assert summary["label_sets"]["side"]["steering"]["in_sample"] is True
    assert summary["label_sets"]["side"]["steering"]["classes"] == ["A", "B"]
    assert summary["label_sets"]["category"]["steering"]["classes"] == ["cat0", "cat1"]
    assert result["manifest"]["timings"]["steering_s"] > 0


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
            row = table[(table["label_set"] == "side") & (table["method"] == "steer") & (table["state"] == state)
                        & (table["alpha"] == alpha)]
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


C, T = tiny.CORPUS, tiny.TEXTS
LABEL_ROWS = [  # two classes in groups of one to three texts, the groups' rows interleaved in the file
    (C[0], "calm", "g1"), (C[1], "busy", "g5"), (C[2], "calm", "g1"), (C[4], "calm", "g2"), (C[3], "busy", "g5"),
    (C[5], "calm", "g3"), (C[6], "busy", "g6"), (T[0], "calm", "g3"), (C[7], "busy", "g6"), (T[9], "calm", "g3"),
    (C[8], "busy", "g7"), (T[1], "calm", "g4"), (T[3], "busy", "g8"), (T[7], "calm", "g4"),
]


@pytest.fixture(scope="module")
def labelled(inputs):
    """A labels file (mood.csv: busy and calm in 8 groups of uneven size) beside six pairs, steered in-sample at
    states 0, 2 and 3; run twice, with prefix reuse (the default) and with --no-prefix-reuse."""
    root, model, _ = inputs
    pairs = root / "six.json"
    pairs.write_text(json.dumps(tiny.pairs(1, 6)))
    labels = root / "mood.csv"
    with labels.open("w", newline="") as f:
        csv.writer(f).writerows([("text", "label", "group"), *LABEL_ROWS])
    args = ["--model", model, "--dataset", pairs, "--label-sets", "side", "--labels", labels, "--steer-holdout", "0",
            "--steer-pairs", "1000", "--steer-every", "2", *SHORT]
    outs = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-reuse"])):
        out = root / f"labels-{name}"
        result = run(root, *args, *extra, "--out", out)
        assert result.exit_code == 0, result.output
        outs[name] = pd.read_csv(out / "table.csv"), json.loads((out / "result.json").read_text())
    return outs


def test_prefix_reuse_on_and_off_give_the_same_table(labelled):
    (on, result_on), (off, result_off) = labelled["on"], labelled["off"]
    assert result_on["config"]["prefix_reuse"] is True and result_off["config"]["prefix_reuse"] is False
    assert list(on.columns) == list(off.columns) and len(on) == len(off)
    text = [c for c in on.columns if not pd.api.types.is_numeric_dtype(on[c])]
    pd.testing.assert_frame_equal(on[text].fillna(""), off[text].fillna(""))
    numbers = [c for c in on.columns if c not in text]
    np.testing.assert_allclose(on[numbers].to_numpy(float), off[numbers].to_numpy(float), rtol=1e-6, atol=1e-12)
    steer = on[on["method"] == "steer"]
    assert set(steer["label_set"]) == {"side", "mood"} and sorted(set(steer["state"])) == [0, 2, N_LAYERS]
    for result in (result_on, result_off):
        assert result["manifest"]["timings"]["steering_s"] > 0
    blocks = {name: next(iter(r["summary"]["models"].values()))["label_sets"]["mood"]["steering"]["blocks_run"]
              for name, r in (("on", result_on), ("off", result_off))}
    assert blocks["on"] < blocks["off"]  # the switch reaches the engine: whole passes run more blocks


def test_steering_a_two_class_labels_file_equals_a_hand_computation(inputs, labelled):
    """v_s = the mean of the class-A rows' states (busy: the first sorted class) minus that of the class-B rows'
    (calm), over rows, not groups; effect = mean NLL of the calm texts - that of the busy texts, steered, less the
    same intact."""
    _, model_dir, _ = inputs
    table, result = labelled["on"]
    texts = [t for t, _, _ in LABEL_ROWS]
    is_a = np.array([label == "busy" for _, label, _ in LABEL_ROWS])
    X, (model, tok) = hand_states(model_dir, texts)
    intact = np.array([hand_nll(model, tok, t, 0, np.zeros(X.shape[-1])) for t in texts])

    def preference(nll):  # mean NLL over class B (calm) - mean NLL over class A (busy)
        return nll[~is_a].mean() - nll[is_a].mean()

    for state in (0, 2, N_LAYERS):
        v = X[is_a, state].mean(axis=0) - X[~is_a, state].mean(axis=0)
        for alpha in (1.0, -1.0):
            steered = np.array([hand_nll(model, tok, t, state, alpha * v) for t in texts])
            row = table[(table["label_set"] == "mood") & (table["method"] == "steer") & (table["state"] == state)
                        & (table["alpha"] == alpha)]
            np.testing.assert_allclose(row["value"].item(), preference(steered) - preference(intact), rtol=1e-3,
                                       atol=1e-6)
            assert row["n"].item() == 8 and row["split"].item() == "in-sample"  # n: the groups steered
    (summary,) = result["summary"]["models"].values()
    steering = summary["label_sets"]["mood"]["steering"]
    assert steering["classes"] == ["busy", "calm"] and steering["n_test_pairs"] == 8


def planted_lm():
    """A tiny Llama whose blocks write nothing into the residual stream (attention and MLP output projections zero)
    and whose unembedding is its embedding: every hidden state is the token's embedding and the logits read it, so
    pushing a state towards the mean embedding of one set of words makes those words likelier."""
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    with torch.no_grad():
        for block in decoder_layers(lm.model):
            block.self_attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
        lm.model.lm_head.weight.copy_(lm.model.model.embed_tokens.weight)
    return lm


def test_minus_alpha_flips_the_sign_on_a_planted_direction():
    """Class A texts are drawn from one set of words, class B from another; through steer_states (in-sample, pairs of
    one A and one B text plus single-text groups), +alpha along A - B must lower A's NLL relative to B's (effect
    > 0) and -alpha raise it (effect < 0), at every state steered; one effect is recomputed with a hook."""
    lm = planted_lm()
    rng = np.random.default_rng(0)
    words = {"A": ["river", "boats", "mill", "morning", "orchard", "breeze"],
             "B": ["prices", "percent", "quarter", "analysts", "committee", "application"]}
    labels = np.array(["A", "B"] * 6 + ["A", "B", "B"])
    groups = np.array([f"pair{i // 2}" for i in range(12)] + ["x", "y", "z"])
    texts = [" ".join(rng.choice(words[c], size=8)) for c in labels]
    ids = [lm.tokenizer(t, return_tensors="pt")["input_ids"][0] for t in texts]
    with torch.no_grad():  # by hand: each state of a text is its tokens' embeddings; pooled, their mean
        pooled = np.stack([lm.model.model.embed_tokens(x).double().mean(0).numpy() for x in ids])
    X = np.repeat(pooled[:, None], N_LAYERS + 1, axis=1)
    alpha = 2.0
    out = steer_states(lm, X, texts, labels, groups, SteerOptions((alpha,), 20, 0.0, 1000, 200, 0.95, 0, every=2))
    assert out["states"] == [0, 2, N_LAYERS] and out["classes"] == ("A", "B")
    for s in out["states"]:
        assert np.sign(out["effect"][s, 0]) == 1 and np.sign(out["effect_neg"][s, 0]) == -1, s
        assert out["ci_lo"][s, 0] > 0 and out["p"][s] < 0.05, s  # over the 9 groups' resamples; beyond random
    v = pooled[labels == "A"].mean(axis=0) - pooled[labels == "B"].mean(axis=0)
    nll = {a: np.array([hand_nll(lm.model, lm.tokenizer, t, 2, a * v) for t in texts]) for a in (0.0, alpha)}
    pref = {a: x[labels == "B"].mean() - x[labels == "A"].mean() for a, x in nll.items()}
    np.testing.assert_allclose(out["effect"][2, 0], pref[alpha] - pref[0.0], rtol=1e-4)


def test_held_out_groups_hold_both_classes_in_proportion_and_pairs_keep_the_permutation():
    single = np.array([[True, False]] * 10 + [[False, True]] * 2)  # ten groups of class A, two of class B
    train, test = split_groups(single, 0.5, 8, seed=3)
    assert len(test) == 6 and len(train) == 6 and set(train) | set(test) == set(range(12))
    assert single[test].any(axis=0).all() and single[train].any(axis=0).all()
    assert single[test, 0].sum() == 5  # 6 held out in proportion 10 : 2
    train, test = split_groups(single, 0.1, 8, seed=3)  # 2 held out: one of each class, not two of A
    assert single[test].any(axis=0).all()
    pairs = np.ones((20, 2), dtype=bool)  # every group holds both classes: today's rule, the first groups of one
    order = np.random.default_rng(7).permutation(20)  # seeded permutation
    train, test = split_groups(pairs, 0.5, 8, seed=7)
    np.testing.assert_array_equal(test, np.sort(order[:8]))
    np.testing.assert_array_equal(train, np.sort(order[8:]))
    every = split_groups(single, 0.0, 8, seed=3)
    np.testing.assert_array_equal(every[0], np.arange(12))
    np.testing.assert_array_equal(every[1], np.arange(12))
