"""The validation card's notes beside a verdict: counts summed over the card's rows of that verdict, the Wilson
interval of the total, only for the model the card was measured on; and the names the studies look up are the
names `layerscope validate` gives its rows."""

import pytest

from layerscope.stats import wilson
from layerscope.study import validated
from layerscope.validation import nulls

CARD = {"model": "m", "day": "2026-12-02", "card": [
    {"verdict": "v", "check": "a", "metric": "false_alarm", "events": 2, "n": 50},
    {"verdict": "v", "check": "b", "metric": "false_alarm", "events": 1, "n": 30},
    {"verdict": "v", "check": "c", "metric": "power", "events": 19, "n": 20},
    {"verdict": "v", "check": "d", "metric": "boundary_error", "events": None, "n": 20},
    {"verdict": "w", "check": "a", "metric": "false_alarm", "events": 9, "n": 10}]}


@pytest.fixture
def card(monkeypatch):
    monkeypatch.setattr(validated, "card", lambda: CARD)


def test_a_note_sums_the_verdicts_rows_and_gives_the_wilson_interval_of_the_total(card):
    lo, hi = wilson(3, 80)  # 2 + 1 false alarms in 50 + 30 instances
    plo, phi = wilson(19, 20)
    assert validated.note("v", "m") == (f"validation card (m, 2026-12-02): found 19/20 [{plo:.2f}, {phi:.2f}]; "
                                        f"false alarms 3/80 [{lo:.2f}, {hi:.2f}]")
    assert validated.with_card("r = +0.1", "v", "m") == f"r = +0.1; validation card (m, 2026-12-02): false alarms " \
                                                        f"3/80 [{lo:.2f}, {hi:.2f}]"
    assert validated.with_card("r = +0.1", "v", "another model") == "r = +0.1"  # one model's rates only
    assert validated.with_card("r = +0.1", "unknown", "m") == "r = +0.1"
    assert [r["check"] for r in validated.rows("v", "m")] == ["a", "b", "c"]  # boundary_error reads as no word


def test_the_divergence_headline_carries_the_row_validate_writes_for_it(card, monkeypatch):
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))
    from test_divergence_verdicts import hand_run, strong_profile

    from layerscope.studies.divergence.analysis import analyse_model
    from layerscope.studies.divergence.claims import model_claim

    pref, ua = strong_profile()
    summary, _ = analyse_model(hand_run(np.stack([ua, ua, ua], axis=1), pref), [0, 1, 2], n_permutations=200)
    # the row's name as layerscope validate writes it: "<study>: <verdict>" of the null relabelings
    name = f"divergence: {nulls.DIVERGENCE_HEADLINE}"
    assert name == "divergence: r(UA, pref) at the last tested layer, mean pooling"
    monkeypatch.setattr(validated, "card", lambda: {"model": "hand", "day": "d", "card": [
        {"verdict": name, "check": "c", "metric": "false_alarm", "events": 4, "n": 100}]})
    lo, hi = wilson(4, 100)
    v = model_claim("divergence", "hand", summary)
    assert v.key.endswith(f"; validation card (hand, d): false alarms 4/100 [{lo:.2f}, {hi:.2f}]")
    assert "validation card" not in model_claim("divergence", "another", summary).key
