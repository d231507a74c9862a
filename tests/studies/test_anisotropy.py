import pytest

from layerscope.studies.anisotropy.analysis import bell_test, key_layers, l_star, reference_match


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
    from layerscope.studies.controls import bell_warnings

    # 30 layers, L* = 3: 3 layers (0-2) before it, 28 (3-30) from it on
    assert bell_warnings("m", 3, 30) == [
        "anisotropy, m: the bell test fits a line to 3 layers before L* (< 10): its slope, r and p are very "
        "unstable; read the profile figure rather than the p-value."]
    assert bell_warnings("m", 12, 30) == []  # 12 and 19 layers
    assert len(bell_warnings("m", 9, 12)) == 2  # 9 and 4 layers
    assert bell_warnings("m", 0, 30) == []  # no segment before L*: nothing is fitted there
