"""Anisotropy verdicts on token states built by hand, where the answer is known: the position-0 sink and a
mid-sentence massive-activation token each create the top-1 share at L*, and the final layer's pre-norm state
differs from the post-norm one. Every expected number is recomputed here from numpy (covariance eigenvalues,
medians of norms), never read back from the code under test."""

import zipfile

import numpy as np
import pandas as pd
import pytest

from layerscope.engine.forward.tokens import TokenStates
from layerscope.run import get_study
from layerscope.studies.anisotropy.analysis import TOKEN_SETS, analyse_model
from layerscope.study import StudyResult
from layerscope.study.result import make_table

N_TEXTS, LENGTH, D = 12, 16, 24


def states(n_layers: int, seed: int = 0, profile=None, d: int = D) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noise token states (n_layers + 1, N_TEXTS * LENGTH, D) plus, at each layer, a shared direction (dim 0) with a
    random coefficient per token scaled by ``profile[layer]``; the pre-norm final state (a copy of the last layer);
    and the (text, position) of every token."""
    rng = np.random.default_rng(seed)
    n = N_TEXTS * LENGTH
    layers = rng.normal(size=(n_layers + 1, n, d))
    if profile is not None:
        layers[:, :, 0] += np.asarray(profile)[:, None] * rng.normal(size=(1, n))
    text = np.repeat(np.arange(N_TEXTS), LENGTH)
    position = np.tile(np.arange(LENGTH), N_TEXTS)
    return layers, text, position


def token_states(layers, text, position, pre_norm=None) -> TokenStates:
    return TokenStates(layers=layers.astype(np.float32), text_index=text, position=position,
                       token_id=np.arange(len(text)) % 50, pre_norm=(layers[-1] if pre_norm is None
                                                                      else pre_norm).astype(np.float32))


def top1(x) -> float:
    """λ1 / Σλ of the covariance of the rows of ``x``, by numpy's symmetric eigensolver."""
    values = np.linalg.eigvalsh(np.cov(np.asarray(x, dtype=np.float64), rowvar=False))
    return values[-1] / values.sum()


def analyse(s: TokenStates, n_layers: int, primary: str = "all"):
    return analyse_model("m", n_layers, s, list(TOKEN_SETS), primary, reference=None, compat=None, level=0.95)


def as_result(summary, rows) -> StudyResult:
    return StudyResult(study="anisotropy", config={"compat": None, "ci_level": 0.95}, manifest={},
                       summary={"models": {"m": summary}, "warnings": []}, table=make_table(rows))


@pytest.fixture(scope="module")
def sink():
    """10 layers; without position 0 the states peak at layer 3 (a shared direction); position 0 of every text
    gets +30, +40, +30 in dim 5 at layers 6, 7, 8: a sink that makes L* = 7."""
    n_layers = 10
    layers, text, position = states(n_layers, seed=1, profile=[0, 0.5, 1.5, 3, 1.5, 0.5, 0, 0, 0, 0, 0])
    for layer, size in ((6, 30.0), (7, 40.0), (8, 30.0)):
        layers[layer, position == 0, 5] += size
    s = token_states(layers, text, position)
    summary, rows = analyse(s, n_layers)
    return s, summary, rows


def test_a_position_0_sink_that_creates_the_top1_share_is_named_the_driver(sink):
    s, summary, _ = sink
    x = s.layers[7].astype(np.float64)
    base, without = top1(x), top1(x[s.position > 0])
    assert summary["l_star"] == 7 and base > 0.7 and without < 0.5 * base
    driver = summary["driver"]
    assert driver["driver"] == "sink" and driver["label"] == "sink (position 0)" and driver["layer"] == 7
    assert driver["top1_ratio"] == pytest.approx(base, rel=1e-5)
    assert driver["without"][0]["top1_ratio"] == pytest.approx(without, rel=1e-5)
    # no massive token (40 < 100 x the median |x| of about 0.7): the massive set is all tokens, no driver
    assert summary["massive"]["n_tokens"] == 0
    assert [w["exclusion"] for w in driver["without"]] == ["sink"]


def test_without_position_0_l_star_moves_and_the_headline_says_so(sink):
    s, summary, rows = sink
    without = [top1(s.layers[layer][s.position > 0]) for layer in range(10)] + [top1(s.pre_norm[s.position > 0])]
    assert int(np.argmax(without)) == 3
    assert summary["token_sets"]["excl_pos0"]["l_star"] == 3 and summary["token_sets"]["excl_massive"]["l_star"] == 7
    assert summary["token_sets"]["excl_pos0_massive"]["l_star"] == 3  # no massive token: the same tokens as excl_pos0
    assert summary["robustness"] == ("not robust: L* moves from 7 to 3 without position 0 / position 0 and "
                                     "massive-activation tokens")
    line = get_study("anisotropy").headline(as_result(summary, rows))[0]
    assert "L* = 7 of 10 (driver: sink (position 0))" in line
    assert "not robust: L* moves from 7 to 3 without position 0" in line
    assert "the bell test fits 7 layers before L* (< 10)" in line and "4 layers from L* on (< 10)" in line


def test_sink_onset_is_the_first_layer_where_position_0_is_five_times_the_median_norm(sink):
    s, summary, _ = sink

    def ratio(x):  # a naive loop over texts
        norms = np.linalg.norm(x.astype(np.float64), axis=1)
        return np.median([norms[(s.text_index == t) & (s.position == 0)][0] / np.median(norms[s.text_index == t])
                          for t in range(N_TEXTS)])

    expected = [ratio(s.layers[layer]) for layer in range(10)] + [ratio(s.pre_norm)]
    assert summary["sink"]["pos0_norm_ratio"] == pytest.approx(expected, rel=1e-5)
    assert summary["sink"]["onset_layer"] == next(i for i, r in enumerate(expected) if r > 5) == 6
    assert summary["sink"]["at_l_star"] == pytest.approx(expected[7], rel=1e-5)


@pytest.fixture(scope="module")
def massive():
    """8 layers; the states peak at layer 5 (a shared direction); one mid-sentence token (text 4, position 9) holds
    1000 in dim 11 at layers 2 to 4: 1000 / 192 tokens lifts dim 11's mean |x| to about 6, far below 100 x the
    median dimension's (about 0.8), so the outlier-dimension detector misses it, but it is > 100 x its text's
    median |x|."""
    n_layers = 8
    layers, text, position = states(n_layers, seed=2, profile=[0, 0, 0.5, 1, 2, 3, 2, 1, 0])
    token = np.flatnonzero((text == 4) & (position == 9))[0]
    for layer, size in ((2, 600.0), (3, 1000.0), (4, 600.0)):
        layers[layer, token, 11] = size
    s = token_states(layers, text, position)
    summary, rows = analyse(s, n_layers)
    return s, summary, rows, token


def test_a_mid_sentence_massive_token_drives_l_star_where_the_outlier_dimension_detector_sees_nothing(massive):
    s, summary, _, token = massive
    x = s.layers[3].astype(np.float64)
    magnitude = np.abs(x).mean(axis=0)
    assert not (magnitude > 100 * np.median(magnitude)).any()  # the dimension-level rule misses it
    flagged = [i for i in range(len(s.position))
               if any(np.abs(layer[i]).max() > 100 * np.median(np.abs(layer[s.text_index == s.text_index[i]]))
                      for layer in (*s.layers[1:-1], s.pre_norm))]
    assert flagged == [token]
    keep = np.arange(len(s.position)) != token
    assert summary["l_star"] == 3 and top1(x) > 0.9
    driver = summary["driver"]
    assert driver["driver"] == "massive"
    assert driver["label"] == "massive-activation tokens (1 mid-sentence token at position 9)"
    left = {w["exclusion"]: w["top1_ratio"] for w in driver["without"]}
    assert left == {"sink": pytest.approx(top1(x[s.position > 0]), rel=1e-5),
                    "massive": pytest.approx(top1(x[keep]), rel=1e-5),
                    "sink_and_massive": pytest.approx(top1(x[keep & (s.position > 0)]), rel=1e-5)}
    assert left["sink"] > 0.5 * top1(x) > left["massive"]  # position 0 is not it
    m = summary["massive"]
    assert m["n_tokens"] == 1 and m["n_position_0"] == 0
    assert m["mid_sentence"] == [{"text": 4, "position": 9, "token_id": int(s.token_id[token]), "token": None,
                                  "layers": [2, 3, 4]}]
    without = [top1(layer[keep]) for layer in s.layers[:-1]] + [top1(s.pre_norm[keep])]
    assert summary["token_sets"]["excl_massive"]["l_star"] == int(np.argmax(without)) == 5
    both = keep & (s.position > 0)
    neither = [top1(layer[both]) for layer in s.layers[:-1]] + [top1(s.pre_norm[both])]
    assert summary["token_sets"]["excl_pos0_massive"]["l_star"] == int(np.argmax(neither)) == 5
    assert summary["token_sets"]["excl_pos0_massive"]["n_tokens"] == int(both.sum()) == N_TEXTS * (LENGTH - 1) - 1
    assert summary["robustness"] == ("not robust: L* moves from 3 to 5 without massive-activation tokens / "
                                     "position 0 and massive-activation tokens")


@pytest.mark.parametrize("d, driver", [(96, "sink"), (24, "sink_and_massive")])
def test_a_massive_sink_with_a_smaller_massive_token_beside_it(d, driver):
    """Layer 4: position 0 of every text holds 300 in dim 5 (massive too) and one mid-sentence token (text 2,
    position 5) 80 in dim 9 (> 100 x its text's median |x| of about 0.7, so massive). Without position 0 that token
    holds the top direction: in 96 dimensions of noise it leaves less than half the top-1 share (the sink drives
    L*); in 24 more than half, and only both exclusions together remove it."""
    layers, text, position = states(6, seed=5, d=d)
    layers[4, position == 0, 5] += 300
    token = np.flatnonzero((text == 2) & (position == 5))[0]
    layers[4, token, 9] = 80
    s = token_states(layers, text, position)
    summary, _ = analyse(s, 6)
    x = s.layers[4].astype(np.float64)
    other = np.arange(len(text)) != token
    base, no_sink, no_token, neither = (top1(x[keep]) for keep in (
        np.ones(len(text), bool), position > 0, other, other & (position > 0)))
    assert summary["l_star"] == 4 and summary["massive"]["n_position_0"] == 12
    assert summary["massive"]["n_mid_sentence"] == 1
    assert no_token > 0.5 * base > neither and (no_sink < 0.5 * base) == (driver == "sink")
    got = summary["driver"]
    assert got["driver"] == driver
    assert [(w["exclusion"], w["top1_ratio"]) for w in got["without"]] == [
        ("sink", pytest.approx(no_sink, rel=1e-5)), ("massive", pytest.approx(no_token, rel=1e-5)),
        ("sink_and_massive", pytest.approx(neither, rel=1e-5))]
    if driver == "sink_and_massive":
        assert got["label"] == ("sink (position 0) and massive-activation tokens (1 mid-sentence token at "
                                "position 5)")


@pytest.fixture(scope="module")
def final_norm():
    """6 layers; a moderate shared direction at layer 2; the pre-norm final state holds a strong one (top-1 share
    near 0.9), the post-norm state (layers[6]) plain noise."""
    n_layers = 6
    layers, text, position = states(n_layers, seed=3, profile=[0, 1, 2, 1, 0, 0, 0])
    pre_norm = layers[-1].copy()
    pre_norm[:, 3] += 12 * np.random.default_rng(4).normal(size=len(text))
    s = token_states(layers, text, position, pre_norm=pre_norm)
    summary, rows = analyse(s, n_layers)
    return s, summary, rows


def test_the_final_layer_is_taken_before_the_final_norm_and_after_it_as_a_sensitivity_row(final_norm):
    s, summary, rows = final_norm
    table = make_table(rows)
    at = table[(table["metric"] == "top1_ratio") & (table["tokens"] == "all")]
    final = at[at["layer"] == 6].set_index("stage")["value"]
    assert final.to_dict() == {"pre_norm": pytest.approx(top1(s.pre_norm), rel=1e-5),
                               "post_norm": pytest.approx(top1(s.layers[6]), rel=1e-5)}
    assert at[at["layer"] < 6]["stage"].isna().all() and len(at) == 8
    assert summary["l_star"] == 6 and summary["l_star_stage"] == "pre_norm" and summary["final_layer"] == "pre_norm"
    post = [top1(layer) for layer in s.layers]
    after = summary["token_sets"]["all"]["post_norm"]
    assert after["l_star"] == int(np.argmax(post)) == 2
    assert after["top1_ratio_final"] == pytest.approx(post[6], rel=1e-5)
    assert summary["robustness"] == "not robust: L* moves from 6 to 2 after the final norm"
    check = next(c for c in summary["checks"] if c["check"] == "after the final norm")
    assert check["value"] == 2 and check["l_star_moves"] and check["flips"]


def test_report_figures_and_numbers_keep_the_pre_and_post_norm_rows_apart(final_norm):
    s, summary, rows = final_norm
    result = as_result(summary, rows)
    study = get_study("anisotropy")
    text = study.report(result)
    pre, post = top1(s.pre_norm), top1(s.layers[6])
    table_lines = [line for line in text.splitlines() if line.startswith("| 6 (")]
    assert len(table_lines) == 2 * 4  # pre- and post-norm rows in each of the 4 token sets' tables
    assert table_lines[0].split(" | ")[2] == f"{pre:.4f}" and table_lines[1].split(" | ")[2] == f"{post:.4f}"
    assert f"{(pre + post) / 2:.4f}" not in text  # never averaged
    assert study.numbers(result, "m")["top1_ratio_at_l_star"] == pytest.approx(pre, rel=1e-5)
    profile = study.figures(result)["anisotropy_profile"]
    title = profile.texts[0].get_text()
    drawn = {line.get_label() for line in profile.axes[0].get_lines()}
    assert {"all tokens", "without position 0", "without massive-activation tokens",
            "without position 0 and massive-activation tokens"} <= drawn  # one line per token set
    assert "predicted" not in title and "final layer pre-norm" in title
    assert title.startswith(f"m: anisotropy profile, {summary['bell_verdict'].split(':')[0]}")


def test_states_without_a_pre_norm_state_are_refused_in_default_mode():
    from layerscope.errors import LayerscopeError

    layers, text, position = states(3)
    bare = TokenStates(layers=layers.astype(np.float32), text_index=text, position=position,
                       token_id=np.zeros(len(text), dtype=int))
    with pytest.raises(LayerscopeError, match="no pre-norm final state"):
        analyse(bare, 3)


def test_the_zip_holds_the_data_files_only(tmp_path, final_norm):
    _, summary, rows = final_norm
    for name in ("result.json", "table.csv", "report.md", "index.html", "config.yaml", "anisotropy_profile.png"):
        (tmp_path / name).write_text(name)
    get_study("anisotropy").finish(tmp_path, as_result(summary, rows))
    with zipfile.ZipFile(tmp_path / "anisotropy_results.zip") as archive:
        assert sorted(archive.namelist()) == ["report.md", "result.json", "table.csv"]
        assert archive.read("table.csv") == b"table.csv"
    seed = StudyResult(study="anisotropy", config={"compat": "notebooks"}, manifest={}, summary={"models": {}},
                       table=pd.DataFrame())
    get_study("anisotropy").finish(tmp_path, seed)
    with zipfile.ZipFile(tmp_path / "anisotropy_results.zip") as archive:
        assert sorted(archive.namelist()) == ["anisotropy_profile.png", "report.md", "result.json", "table.csv"]


def test_a_token_set_left_with_one_token_is_skipped_and_named_in_the_report():
    """Texts of 2 tokens; at layer 1 position 1 of texts 0-10 holds 1000 in dim 3 (> 100 x its text's median |x|
    of about 0.7: massive), that of text 11 is noise. Without position 0 and those tokens 1 token is left: the set
    is skipped (a covariance needs 2), not checked, and the report says so; the other sets are computed."""
    n_layers = 4
    rng = np.random.default_rng(6)
    text, position = np.repeat(np.arange(N_TEXTS), 2), np.tile(np.arange(2), N_TEXTS)
    layers = rng.normal(size=(n_layers + 1, len(text), D))
    layers[1, (position == 1) & (text < N_TEXTS - 1), 3] = 1000.0
    s = token_states(layers, text, position)
    summary, rows = analyse(s, n_layers)
    assert summary["skipped_token_sets"] == {"excl_pos0_massive": "1 token state(s) left; a covariance needs 2"}
    assert {t: summary["token_sets"][t]["n_tokens"] for t in summary["token_sets"]} == {
        "all": 2 * N_TEXTS, "excl_pos0": N_TEXTS, "excl_massive": N_TEXTS + 1}
    assert "excl_pos0_massive" not in set(make_table(rows)["tokens"])
    assert "without position 0 and massive-activation tokens" not in [c["check"] for c in summary["checks"]]
    report = get_study("anisotropy").report(as_result(summary, rows))
    assert ("### without position 0 and massive-activation tokens: not computed (1 token state(s) left; a covariance "
            "needs 2)") in report
