"""`layerscope run probe` on a tiny random model: the tidy table; the held-out removal and steering numbers
recomputed by hand (a plain transformers loop with an ordinary forward hook, the direction fitted on the training
pairs only, position 0 left alone, the push scaled by the training texts' mean token norm); the same table with and
without prefix reuse; the figures, report and verdict rows; plain text in the terminal; bad input refused in one
line."""

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
from layerscope.data import load_pairs
from layerscope.studies.probe.causal_design import split_contrast
from layerscope.studies.probe.labels import pair_tasks

runner = CliRunner()
N_LAYERS = 3
N_PAIRS = 12  # per category, 2 categories
FAST = ["--folds", "3", "--n-bootstrap", "200", "--n-permutations", "20", "--control-seeds", "2", "--n-random", "3"]
CAUSAL = ["--steer-every", "1", "--alpha", "0.1,0.5", "--test-alpha", "0.5"]


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
    root, model, pairs = inputs
    out = root / "out"
    result = run(root, "--model", model, "--dataset", pairs, "--label-sets", "side,category", *FAST, *CAUSAL,
                 "--out", out)
    assert result.exit_code == 0, result.output
    return out, pd.read_csv(out / "table.csv"), json.loads((out / "result.json").read_text()), result.output


def test_table_is_tidy_with_every_label_set_method_and_metric(finished):
    _, table, result, _ = finished
    assert {"model", "state", "label_set", "method", "metric", "value", "ci_lo", "ci_hi", "p", "q", "n",
            "direction", "alpha", "at_state", "check"} <= set(table.columns)
    assert set(table["label_set"]) == {"side:cat0", "side:cat1", "side", "category"}
    assert {"logreg", "mass_mean", "surface", "remove", "remove_null", "interchange", "steer", "steer_null",
            "skip", "direction"} <= set(table["method"])
    assert {"accuracy", "auroc", "gain_over_surface", "effect", "sign_effect", "damage", "slope",
            "wrong_way_share", "nie", "min_detectable", "probe_drop", "pos0_cosine", "consistency",
            "norm_ratio", "transfer_accuracy"} <= set(table["metric"])
    main = table[table["check"].isna()]
    for (label_set, method), rows in main[main["metric"] == "accuracy"].groupby(["label_set", "method"]):
        if method in ("logreg", "mass_mean"):
            assert sorted(rows["state"]) == list(range(N_LAYERS + 1)), (label_set, method)
    (summary,) = result["summary"]["models"].values()
    assert summary["label_sets"]["side"]["kind"] == "mixture" and "causal" not in summary["label_sets"]["side"]
    for name, n_test in (("side:cat0", 6), ("side:cat1", 6), ("category", 12)):  # half the pairs of each
        c = summary["label_sets"][name]["causal"]
        assert c["states"] == list(range(N_LAYERS + 1)) and c["n_test_units"] == n_test, name
    steer = main[(main["method"] == "steer") & (main["metric"] == "effect")]
    assert set(steer["alpha"]) == {0.1, 0.5, -0.1, -0.5} and set(steer["direction"]) == {"mass_mean", "logistic"}
    transfer = table[table["metric"] == "transfer_accuracy"]
    assert set(transfer["label_set"]) == {"side:cat0", "side:cat1"}
    assert result["manifest"]["timings"]["causal_s"] > 0


def hand_model(folder):
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def module_at(model, state):
    return model.model.embed_tokens if state == 0 else model.model.layers[state - 1]


@torch.no_grad()
def hand_pass(model, tok, text, state=None, edit=None, start=1):
    """A plain forward of one text; ``edit(h)`` applied by an ordinary hook to positions >= 1 of hidden state
    ``state``. Returns (summed NLL over targets at positions >= start, every state's (T, d) stream, state L before
    the final norm from a hook on the last block)."""
    seen = {}
    last = model.model.layers[-1].register_forward_hook(
        lambda m, a, o: seen.__setitem__("L", (o[0] if isinstance(o, tuple) else o)[0].double()))
    handle = None
    if edit is not None:
        def hook(module, args, output):
            h = output[0] if isinstance(output, tuple) else output
            changed = h.clone()
            changed[:, 1:] = edit(h[:, 1:].double()).to(h.dtype)
            return (changed, *output[1:]) if isinstance(output, tuple) else changed
        handle = module_at(model, state).register_forward_hook(hook)
    try:
        ids = tok(text, return_tensors="pt")["input_ids"]
        out = model(input_ids=ids, output_hidden_states=True)
        logits = out.logits[0, :-1].double()
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
        states = [h[0].double() for h in out.hidden_states[:-1]] + [seen["L"]]
        return float(nll[start - 1:].sum()), states
    finally:
        last.remove()
        if handle is not None:
            handle.remove()


def shared_start(tok, a, b):
    x, y = tok(a)["input_ids"], tok(b)["input_ids"]
    k = 0
    while k < min(len(x), len(y)) and x[k] == y[k]:
        k += 1
    return max(1, k)


def test_held_out_removal_and_steering_equal_a_hand_hooked_forward(inputs, finished):
    """side:cat0 at states 0 and 2: u from the training pairs' pooled states (every token but position 0) only;
    removal h - (h.u)u and the push 0.5 * r_s * u at every position but 0; pref and damage from summed NLLs over
    the tokens after the pair's shared start, on the held-out pairs."""
    _, model_dir, pairs_path = inputs
    _, table, _, _ = finished
    task = next(t for t in pair_tasks(load_pairs(pairs_path), ("side",), 3)[0] if t.name == "side:cat0")
    split = split_contrast(task, 0.5, 0, seed=42)  # the config's default seed
    model, tok = hand_model(model_dir)
    texts = task.texts
    base = [hand_pass(model, tok, t) for t in texts]
    pooled = np.stack([np.stack([h[1:].mean(0).numpy() for h in states]) for _, states in base])  # (n, S, d)
    starts = [shared_start(tok, texts[i], texts[i ^ 1]) for i in range(len(texts))]
    test_pairs = sorted({int(r) // 2 for r in split.test})
    train_a = [r for r in split.train if r % 2 == 0]
    assert not set(split.train) & set(split.test)
    for state in (0, 2):
        v = (pooled[train_a, state] - pooled[[r + 1 for r in train_a], state]).mean(axis=0)
        u = torch.tensor(v / np.linalg.norm(v))
        norms = [states[state][1:].norm(dim=1) for _, states in (base[r] for r in split.train)]
        r_s = float(torch.cat(norms).mean())
        edits = {"remove": lambda h, u=u: h - (h @ u)[..., None] * u,
                 "push": lambda h, u=u, r_s=r_s: h + 0.5 * r_s * u}
        for name, edit in edits.items():
            intact = {i: hand_pass(model, tok, texts[i], start=starts[i])[0] for p in test_pairs for i in (2 * p,
                                                                                                       2 * p + 1)}
            edited = {i: hand_pass(model, tok, texts[i], state, edit, start=starts[i])[0] for i in intact}
            pref = [(edited[2 * p + 1] - edited[2 * p]) - (intact[2 * p + 1] - intact[2 * p]) for p in test_pairs]
            damage = [((edited[2 * p] - intact[2 * p]) + (edited[2 * p + 1] - intact[2 * p + 1])) / 2
                      for p in test_pairs]
            rows = table[(table["label_set"] == "side:cat0") & (table["state"] == state) & table["check"].isna()]
            if name == "remove":
                effect = rows[(rows["method"] == "remove") & (rows["metric"] == "effect")]["value"].item()
                dmg = rows[(rows["method"] == "remove") & (rows["metric"] == "damage")]["value"].item()
                np.testing.assert_allclose(dmg, np.mean(damage), rtol=1e-4, atol=1e-6)
            else:
                effect = rows[(rows["method"] == "steer") & (rows["metric"] == "effect")
                              & (rows["direction"] == "mass_mean") & (rows["alpha"] == 0.5)]["value"].item()
            np.testing.assert_allclose(effect, np.mean(pref), rtol=1e-4, atol=1e-6, err_msg=f"{name} {state}")


def test_figures_report_and_verdict_rows(finished):
    out, _, _, output = finished
    figures = sorted(p.name for p in out.glob("probe_*.png"))
    assert len(figures) == 4
    report = (out / "report.md").read_text()
    assert "## Conventions" in report and "Hewitt & Liang" in report and "decodable vs used" in report
    page = (out / "index.html").read_text()
    for words in ("side:cat0: decodable beyond the best shallow reader", "side:cat0: ", "removal", "steer"):
        assert words in page
    findings = report.split("## Conventions")[0]
    assert "not used" not in findings and "used nowhere" not in findings


LABEL_ROWS = [(t, "calm" if i % 2 else "busy", f"g{i // 2}") for i, t in enumerate(tiny.CORPUS + tiny.TEXTS)]


@pytest.fixture(scope="module")
def labelled(inputs):
    """A labels file named with underscores (markup_labels.csv) beside the pairs' side, run with prefix reuse and
    with --no-prefix-reuse, causal tests at states 0, 2 and 3."""
    root, model, pairs = inputs
    labels = root / "markup_labels.csv"
    with labels.open("w", newline="") as f:
        csv.writer(f).writerows([("text", "label", "group"), *LABEL_ROWS])
    args = ["--model", model, "--dataset", pairs, "--label-sets", "side", "--labels", labels, *FAST,
            "--steer-every", "2", "--alpha", "0.5", "--test-alpha", "0.5"]
    outs = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-reuse"])):
        out = root / f"labels-{name}"
        result = run(root, *args, *extra, "--out", out)
        assert result.exit_code == 0, result.output
        outs[name] = pd.read_csv(out / "table.csv"), json.loads((out / "result.json").read_text()), result.output
    return outs


def test_prefix_reuse_on_and_off_give_the_same_table(labelled):
    (on, result_on, _), (off, result_off, _) = labelled["on"], labelled["off"]
    assert result_on["config"]["prefix_reuse"] is True and result_off["config"]["prefix_reuse"] is False
    assert list(on.columns) == list(off.columns) and len(on) == len(off)
    text = [c for c in on.columns if not pd.api.types.is_numeric_dtype(on[c])]
    pd.testing.assert_frame_equal(on[text].fillna(""), off[text].fillna(""))
    numbers = [c for c in on.columns if c not in text]
    np.testing.assert_allclose(on[numbers].to_numpy(float), off[numbers].to_numpy(float), rtol=1e-5, atol=1e-9)
    assert set(on[on["method"] == "remove"]["label_set"]) >= {"markup_labels", "side:cat0"}
    assert sorted(set(on[on["method"] == "remove"]["state"])) == [0, 2, N_LAYERS]
    blocks = [r["manifest"]["timings"]["causal_blocks_run"] for r in (result_on, result_off)]
    assert blocks[0] < blocks[1]  # the switch reaches the engine: whole passes run more blocks


def test_the_terminal_prints_text_not_markdown(labelled):
    _, _, output = labelled["on"]
    assert "markup_labels: decodable" in output and "markup\\_labels" not in output


@pytest.mark.parametrize("args, words", [
    (["--alpha", "-1"], "--alpha '-1' must be positive finite numbers"),
    (["--alpha", "0,0.5"], "--alpha '0,0.5' must be positive finite numbers"),
    (["--alpha", "0.5,inf"], "--alpha '0.5,inf' must be positive finite numbers"),
    (["--alpha", "0.1,0.5", "--test-alpha", "0.2"], "--test-alpha 0.2 is not one of --alpha 0.1,0.5"),
    (["--steer-holdout", "1.5"], "--steer-holdout 1.5 must lie in [0, 1)"),
    (["--label-sets", "nope"], "unknown label set 'nope'"),
    (["--n-random", "1"], "the null's mean effect needs two directions or more"),
    (["--pooling", "max"], "unknown pooling 'max'"),
])
def test_bad_settings_are_one_error_line(inputs, args, words):
    root, model, pairs = inputs
    result = run(root, "--model", model, "--dataset", pairs, *args, "--out", root / "bad")
    assert words in error_line(result)
    assert result.exit_code != 0 and not (root / "bad").exists()


def test_a_labels_file_with_one_class_is_refused_before_any_model_loads(inputs):
    root, model, pairs = inputs
    labels = root / "one.csv"
    labels.write_text("text,label\n" + "".join(f"text {i},x\n" for i in range(12)))
    result = run(root, "--model", model, "--dataset", pairs, "--labels", labels, "--out", root / "bad2")
    line = error_line(result)
    assert "one.csv" in line and "class" in line
    assert not (root / "bad2").exists()


def test_a_category_with_too_few_pairs_is_skipped_with_a_warning_naming_it(inputs):
    """cat0 has 12 pairs, cat1 one: side:cat1 cannot be probed with 3 folds; the run finishes and says so."""
    root, model, _ = inputs
    data = tiny.pairs(2, N_PAIRS)
    data["cat1"]["pairs"] = data["cat1"]["pairs"][:2]
    small = root / "small.json"
    small.write_text(json.dumps(data))
    out = root / "skipped"
    result = run(root, "--model", model, "--dataset", small, "--label-sets", "side", "--no-steer", *FAST,
                 "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "result.json").read_text())
    (summary,) = data["summary"]["models"].values()
    assert set(summary["label_sets"]) == {"side:cat0", "side"}
    (warning,) = data["summary"]["warnings"]
    assert "side:cat1" in warning and "'cat1' has 2 pairs" in warning and "2 x folds = 6" in warning
