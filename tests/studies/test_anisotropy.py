import numpy as np
import pytest
from scipy.stats import t as student

from layerscope.report.markdown import number
from layerscope.studies.anisotropy.analysis import bell_test, bell_verdict, key_layers, l_star, reference_match


def test_l_star_and_bell_on_a_rising_then_falling_curve():
    values = [0.1, 0.3, 0.5, 0.7, 0.6, 0.4]
    star = l_star(values)
    assert star == 3
    bell = bell_test(values, star)
    assert bell["phase1_slope"] == pytest.approx(0.2) and bell["phase1_r"] == pytest.approx(1.0)
    assert bell["phase2_slope"] == pytest.approx(-0.15) and bell["phase2_r"] < 0
    assert bell["is_bell_curve"] and bell["max_value"] == 0.7


def test_monotone_curves_are_not_bells():
    rising = [0.1, 0.2, 0.3, 0.4]
    assert l_star(rising) == 3
    bell = bell_test(rising, 3)
    assert bell["phase2_slope"] == 0.0 and bell["phase2_p"] == 1.0 and not bell["is_bell_curve"]
    falling = [0.9, 0.5, 0.4, 0.2]
    assert l_star(falling) == 0 and not bell_test(falling, 0)["is_bell_curve"]
    assert l_star([0.2, 0.5, 0.5, 0.1]) == 1  # the first of tied maxima


def test_reference_bands_and_key_layers():
    assert reference_match(10, 13)["verdict"] == "EXCELLENT MATCH"
    assert reference_match(10, 5)["verdict"] == "GOOD MATCH"
    assert reference_match(10, 16) == {"reference_l_star": 16, "distance": 6, "verdict": "DISCREPANCY"}
    assert reference_match(10, None) is None
    assert key_layers(7, 32) == [0, 3, 7, 19, 32]
    assert key_layers(0, 4) == [0, 2, 4]


def test_bell_test_segments_shorter_than_ten_layers_get_a_warning():
    from layerscope.studies.shared.caveats import bell_warnings

    # 30 layers, L* = 3: 3 layers (0-2) before it, 28 (3-30) from it on
    assert bell_warnings("m", 3, 30) == [
        "anisotropy, m: the bell test fits a line to 3 layers before L* (< 10): its slope, r and p are very "
        "unstable; read the profile figure rather than the p-value."]
    assert bell_warnings("m", 12, 30) == []  # 12 and 19 layers
    assert len(bell_warnings("m", 9, 12)) == 2  # 9 and 4 layers
    assert bell_warnings("m", 0, 30) == []  # no segment before L*: nothing is fitted there


def slope_by_hand(x, y):
    """Least-squares slope and its two-sided p (t with n - 2 degrees of freedom), from the textbook formulas."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sxx, sxy = ((x - x.mean()) ** 2).sum(), ((x - x.mean()) * (y - y.mean())).sum()
    r = sxy / np.sqrt(sxx * ((y - y.mean()) ** 2).sum())
    t = r * np.sqrt((len(x) - 2) / (1 - r**2))
    return sxy / sxx, 2 * student.sf(abs(t), len(x) - 2)


def test_a_flat_profile_with_a_tiny_positive_slope_is_not_a_bell():
    layers = np.arange(31)
    values = 0.3 + 0.0005 * layers + 0.01 * (-1.0) ** layers  # zigzag noise around a near-flat line
    values[15] += 0.04  # the maximum
    star = l_star(list(values))
    assert star == 15
    slope1, p1 = slope_by_hand(layers[:15], values[:15])
    slope2, p2 = slope_by_hand(layers[15:], values[15:])
    assert slope1 > 0 and p1 > 0.05 and slope2 < 0 and p2 > 0.05
    assert bell_test(list(values), star)["is_bell_curve"]  # the notebook's rule: any rise, then any fall
    bell = bell_verdict(list(values), star, level=0.95)
    assert bell["phase1_slope"] == pytest.approx(slope1) and bell["phase1_p"] == pytest.approx(p1)
    assert bell["phase1_q"] == pytest.approx(max(p1, p2) if p1 > p2 else min(2 * p1, p2))
    assert not bell["is_bell_curve"] and bell["assessable"]
    assert bell["verdict"].startswith("not a bell curve: no significant rise before L* (layers 0-14: slope +")
    assert f"p = {number(p1)}" in bell["verdict"]


def test_a_clear_rise_and_fall_over_many_layers_is_a_bell_with_textbook_slopes_and_bh_q():
    layers = np.arange(31)
    values = 0.9 - np.abs(layers - 12) / 25 + 0.01 * np.random.default_rng(0).normal(size=31)
    star = l_star(list(values))
    assert star == 12
    (s1, p1), (s2, p2) = slope_by_hand(layers[:12], values[:12]), slope_by_hand(layers[12:], values[12:])
    bell = bell_verdict(list(values), star, level=0.95)
    assert bell["phase1_slope"] == pytest.approx(s1) and bell["phase2_slope"] == pytest.approx(s2)
    assert bell["phase1_p"] == pytest.approx(p1, rel=1e-6) and bell["phase2_p"] == pytest.approx(p2, rel=1e-6)
    small, large = sorted([p1, p2])  # Benjamini-Hochberg over two: the larger p stays, the smaller doubles (capped)
    assert sorted([bell["phase1_q"], bell["phase2_q"]]) == pytest.approx([min(2 * small, large), large], rel=1e-6)
    assert bell["is_bell_curve"] and bell["phase1_layers"] == [0, 11] and bell["phase2_layers"] == [12, 30]
    assert bell["verdict"].startswith(f"bell curve: rises before L* (layers 0-11: slope +{number(s1)} per layer, "
                                      f"p = {number(p1)}")


def test_a_rise_without_a_significant_fall_is_not_a_bell_and_short_segments_are_not_assessable():
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.69, 0.7, 0.69, 0.7, 0.69]
    bell = bell_verdict(values, 6, level=0.95)
    _, p2 = slope_by_hand(np.arange(6, 12), values[6:])
    assert bell["phase2_slope"] < 0 and p2 > 0.05
    assert not bell["is_bell_curve"] and bell["verdict"].startswith(
        "not a bell curve: no significant fall from L* on (layers 6-11:")
    assert "no significant rise" not in bell["verdict"]
    short = bell_verdict([0.1, 0.5, 0.4, 0.3, 0.2], 1, level=0.95)
    assert not short["assessable"] and not short["is_bell_curve"] and short["phase1_p"] is None
    assert short["verdict"] == ("bell test not assessable: 1 layer(s) before L* (layer 0); it needs >= 3 layers on "
                                "each side of L*")


def numpy_top1(x) -> float:
    """λ1 / Σλ of the rows of ``x`` (n, d): centre, covariance, eigenvalues (numpy), largest over sum."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=0)
    values = np.linalg.eigvalsh(centred.T @ centred / (len(x) - 1))
    return values[-1] / values.sum()


def massive_by_hand(s, n_layers: int) -> np.ndarray:
    """engine.forward.massive's rule, a naive loop: a token whose largest |activation| exceeds 100 x its text's median
    |activation| (over the text's tokens and every dimension) at a block output 1..n_layers-1 or pre_norm."""
    flagged = np.zeros(len(s.position), dtype=bool)
    for x in (*(s.layers[layer] for layer in range(1, n_layers)), s.pre_norm):
        mag = np.abs(np.asarray(x, dtype=np.float64))
        for i in range(len(s.position)):
            text = mag[s.text_index == s.text_index[i]]
            flagged[i] |= mag[i].max() > 100 * np.median(text)
    return flagged


def test_the_profile_without_position_0_and_massive_tokens_equals_numpy_on_the_tokens_picked_by_hand():
    """A tiny llama (4 blocks, BOS) whose embedding of one mid-sentence token holds 1000 in dim 7: the residual
    stream carries it through every block, so that token is massive wherever it occurs; BOS is not. The
    excl_pos0_massive set is then neither excl_pos0 nor excl_massive, and its profile is recomputed here."""
    import torch

    import tiny
    from layerscope.engine.forward.tokens import token_states
    from layerscope.studies.anisotropy.analysis import TOKEN_SETS, analyse_states, profiled_tokens
    from layerscope.study import StudyConfig
    from layerscope.study.result import make_table

    n_layers = 4
    lm = tiny.tiny_lm("llama", adds_bos=True, n_layers=n_layers)
    planted = lm.tokenizer(tiny.TEXTS[1])["input_ids"][3]  # text 1, position 3 (position 0 is BOS)
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[planted, 7] = 1000.0
    s = token_states(lm, tiny.TEXTS, progress=False)
    flagged = massive_by_hand(s, n_layers)
    keep = (s.position > 0) & ~flagged
    assert flagged[s.token_id == planted].all() and not flagged[s.position == 0].any()  # the planting took
    assert (keep != (s.position > 0)).any() and (keep != ~flagged).any()  # a token set of its own

    config = StudyConfig(study="anisotropy")
    assert profiled_tokens(config) == list(TOKEN_SETS) and "excl_pos0_massive" in TOKEN_SETS
    summary, rows = analyse_states("m", n_layers, s, config)
    table = make_table(rows)
    top1 = table[(table["metric"] == "top1_ratio") & (table["tokens"] == "excl_pos0_massive")]
    profile = top1[top1["stage"].ne("post_norm").to_numpy(dtype=bool)].sort_values("layer")
    expected = [numpy_top1(s.layers[layer][keep]) for layer in range(n_layers)] + [numpy_top1(s.pre_norm[keep])]
    assert profile["layer"].tolist() == list(range(n_layers + 1))
    assert profile["value"].tolist() == pytest.approx(expected, rel=1e-5)
    assert (top1["n"] == keep.sum()).all()
    post = top1[top1["stage"].eq("post_norm").to_numpy(dtype=bool)]["value"]
    assert post.tolist() == pytest.approx([numpy_top1(s.layers[n_layers][keep])], rel=1e-5)
    got = summary["token_sets"]["excl_pos0_massive"]
    assert got["n_tokens"] == int(keep.sum()) and got["l_star"] == int(np.argmax(expected))
    assert summary["massive"]["n_tokens"] == int(flagged.sum())
    check = next(c for c in summary["checks"] if c["check"] == "without position 0 and massive-activation tokens")
    assert check["value"] == int(np.argmax(expected))


def test_seed_compat_profiles_the_notebooks_token_sets_only():
    from layerscope.studies.anisotropy.analysis import profiled_tokens
    from layerscope.study import StudyConfig

    assert profiled_tokens(StudyConfig(study="anisotropy", compat="notebooks")) == ["all"]
    both = ["all", "excl_pos0"]
    assert profiled_tokens(StudyConfig(study="anisotropy", compat="notebooks", exclude_bos=True)) == both
