"""The validation card: Wilson intervals against hand-derived values, card rows recomputed from the instance rows by a
hand loop, and the planted-change scoring on fits of known breaks. A whole tiny-model card, every row recomputed
from its written table, is made from the command line in tests/cli/test_validate_cli.py."""

import math

import numpy as np
import pytest

from layerscope.measures.boundaries import bootstrap_boundaries
from layerscope.stats import wilson
from layerscope.validation.boundaries import planted_rows
from layerscope.validation.card import card_rows, standing


def test_wilson_interval_equals_hand_derived_values():
    # 0 of 10: the lower end is 0 and the upper z^2 / (n + z^2) = 3.8415 / 13.8415
    z2 = 1.959963984540054 ** 2
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(z2 / (10 + z2), rel=1e-9)
    # 5 of 10: symmetric about 1/2, half-width z sqrt(1/40 + z^2/400) / (1 + z^2/10)
    lo, hi = wilson(5, 10)
    half = math.sqrt(z2) * math.sqrt(0.25 / 10 + z2 / 400) / (1 + z2 / 10)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-9)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)  # the textbook table's values
    with pytest.raises(ValueError, match="n >= 1"):
        wilson(0, 0)


def test_card_rows_count_successes_and_false_alarms_as_a_hand_loop_does():
    rows = ([{"verdict": "v", "check": "c", "metric": "power", "success": s} for s in [True] * 9 + [False]]
            + [{"verdict": "v", "check": "null", "metric": "false_alarm", "success": s} for s in [True] * 19 + [False]]
            + [{"verdict": "v", "check": "c", "metric": "boundary_error", "success": True, "value": x}
               for x in (0.0, 1.0, 0.0, 1.0)])
    card = {(c["check"], c["metric"]): c for c in card_rows(rows)}
    power = card[("c", "power")]
    assert (power["events"], power["n"], power["rate"]) == (9, 10, 0.9) and power["meets"] is True
    assert (power["ci_lo"], power["ci_hi"]) == pytest.approx(wilson(9, 10))
    alarm = card[("null", "false_alarm")]  # the events are the instances that failed: 1 alarm in 20
    assert (alarm["events"], alarm["rate"]) == (1, 0.05)
    assert alarm["meets"] is False  # 0.05 meets the rate, but the interval's upper end is above 0.10
    assert standing(alarm) == "too few instances" and standing(power) == "yes"
    worse = card_rows([{"verdict": "v", "check": "c", "metric": "false_alarm", "success": s}
                       for s in [True] * 180 + [False] * 20])[0]  # 0.10: the rate itself misses
    assert standing(worse) == "no"
    error = card[("c", "boundary_error")]
    assert error["rate"] == 0.5 and error["events"] is None and (error["ci_lo"], error["ci_hi"]) == (0.0, 1.0)
    assert standing(error) == "-"


def jump_fit(at: list[int], size: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = 5.0 * np.searchsorted(np.array(at), np.arange(size), side="right")
    rows = np.vstack([y, y + 0.05 * rng.normal(size=(60, size))])
    return bootstrap_boundaries({"m": (list(range(size)), rows)}, {"f": ("m",)}, tolerance=2, per_measure=False)


def test_a_planted_change_is_found_within_a_layer_and_covered_at_t_or_t_plus_1():
    fit = jump_fit([6, 14])  # breaks at layers 6 and 14, intervals that never move
    rows = planted_rows("plant", fit, {"a": 6, "b": 13, "c": 10}, tol=2)
    by = {(r["change"], r["metric"]): r for r in rows}
    assert by[("a", "power")]["success"] and by[("a", "coverage")]["success"]
    assert by[("a", "boundary_error")]["value"] == 0.0
    # planted at 13 (between states 13 and 14): found at 14, its zero-width interval [14-14] holds t + 1
    assert by[("b", "power")]["success"] and by[("b", "coverage")]["success"]
    assert by[("b", "boundary_error")]["value"] == 0.0
    # planted at 10: the nearest boundaries are 4 layers away: not found, not covered
    assert not by[("c", "power")]["success"] and not by[("c", "coverage")]["success"]
    assert ("c", "boundary_error") not in by
    late = planted_rows("plant", fit, {"d": 4}, tol=2)  # 6 is t + 2: found within one layer? no
    assert not [r for r in late if r["metric"] == "power"][0]["success"]


def test_the_boundary_scored_is_the_one_nearest_to_t_or_t_plus_1_not_the_lower_of_two_near_t():
    # a change cut into a two-layer segment: boundaries at 5 and 7 around a change at t = 6 (between states 6, 7)
    fit = jump_fit([5, 7, 14])
    by = {(r["change"], r["metric"]): r for r in planted_rows("plant", fit, {"a": 6}, tol=2)}
    assert by[("a", "power")]["success"] and by[("a", "power")]["value"] == 1  # |5 - 6| = |7 - 6| = 1
    assert by[("a", "coverage")]["success"] and by[("a", "coverage")]["value"] == "7-7"  # 7 = t + 1 places it
    assert by[("a", "boundary_error")]["value"] == 0.0
    alone = jump_fit([5, 14])  # only the boundary at t - 1: found within a layer, its interval [5-5] misses
    by = {(r["change"], r["metric"]): r for r in planted_rows("plant", alone, {"a": 6}, tol=2)}
    assert by[("a", "power")]["success"] and not by[("a", "coverage")]["success"]
    assert by[("a", "boundary_error")]["value"] == 1.0
