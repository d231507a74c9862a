import math

import pytest

from layerscope.studies.scaling.analysis import peak_stability, profile_summary


def test_profile_summary_by_hand():
    s = profile_summary([0, 4, 8, 12, 16], [0.2, 0.6, -0.1, -0.5, 0.3], n_layers=16)
    assert (s["max_pos_r"], s["max_pos_layer"], s["max_pos_pct"]) == (0.6, 4, 25.0)
    assert (s["max_neg_r"], s["max_neg_layer"], s["max_neg_pct"]) == (-0.5, 12, 75.0)
    assert s["final_r"] == 0.3
    assert s["sign_changes"] == [{"layer_before": 4, "layer_after": 8, "midpoint_pct": 37.5},
                                 {"layer_before": 12, "layer_after": 16, "midpoint_pct": 87.5}]


def test_peak_stability_by_hand():
    stable = peak_stability([25.0, 30.0, 35.0])  # population std = sqrt(50 / 3) = 4.08
    assert stable["std_peak_pct"] == pytest.approx(math.sqrt(50 / 3))
    assert stable["mean_peak_pct"] == 30.0 and stable["peaks_stable"] is True
    assert "STABLE" in stable["answer"] and "~30%" in stable["answer"]
    shifts = peak_stability([10.0, 50.0])  # std = 20
    assert shifts["std_peak_pct"] == 20.0 and shifts["peaks_stable"] is False and "SHIFTS" in shifts["answer"]
    edge = peak_stability([0.0, 20.0])  # std = 10 is not below 10
    assert edge["peaks_stable"] is False
    single = peak_stability([40.0])
    assert single["peaks_stable"] is None and "at least two models" in single["answer"]
