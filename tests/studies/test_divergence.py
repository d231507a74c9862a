import numpy as np
import pytest

from layerscope.studies.divergence.analysis import analyse_model, interpret, pooling_effect, sign_summary
import notebook_reference as notebook
from synthetic import pair_run


@pytest.mark.parametrize("r, label", [
    (-0.51, "INVERSE (strong negative)"), (-0.5, "Weak negative"), (-0.21, "Weak negative"),
    (-0.2, "DECOUPLED (near zero)"), (0.19, "DECOUPLED (near zero)"), (0.2, "Weak positive"),
    (0.49, "Weak positive"), (0.5, "ALIGNED (strong positive)"),
])
def test_interpretation_labels_at_their_thresholds(r, label):
    assert interpret(r) == label


def test_sign_summary_by_hand():
    points, sign = sign_summary([0, 4, 8, 12], [0.3, -0.1, -0.4, 0.2])
    assert sign is None
    assert [(p["layer_before"], p["layer_after"]) for p in points] == [(0, 4), (8, 12)]
    assert sign_summary([0, 4], [-0.3, -0.1]) == ([], "negative")
    assert sign_summary([0, 4], [0.3, 0.1]) == ([], "positive")
    assert sign_summary([0, 4], [0.3, 0.0]) == ([], "unclear")


def test_pooling_effect_thresholds():
    assert pooling_effect(0.1, 0.31).startswith("Last-token embeddings correlate MORE")
    assert pooling_effect(0.1, -0.11).startswith("Last-token embeddings correlate LESS")
    assert pooling_effect(0.1, 0.29) == "Pooling strategy has minimal effect on correlation."


def naive_r(run, pooling, layer):
    """The notebook's loop: per category, explicit cosine kernel, upper triangle, then Pearson."""
    uniformity = notebook.uniformity
    a, b, pref, cats = run.a(pooling)[:, layer], run.b(pooling)[:, layer], run.pref, run.pairs.pair_categories()
    uas = [uniformity(a[cats == c]) - uniformity(b[cats == c]) for c in range(len(run.pairs.categories))]
    prefs = [pref[cats == c].mean() for c in range(len(run.pairs.categories))]
    return np.corrcoef(uas, prefs)[0, 1]


def test_analysis_matches_the_notebook_loop_at_every_layer_and_pooling():
    run = pair_run()
    summary, rows = analyse_model(run, [0, 4, 8])
    r_rows = [r for r in rows if r["metric"] == "r_ua_pref"]
    assert len(r_rows) == 3 * 3
    for row in r_rows:
        assert row["value"] == pytest.approx(naive_r(run, row["pooling"], row["layer"]), abs=1e-6)  # float32 kernel
        assert row["n"] == 6 and row["depth"] == row["layer"] / 8
    for c in summary["pooling_comparison"]:
        assert c["layer"] == 8 and c["r"] == pytest.approx(naive_r(run, c["pooling"], 8), abs=1e-6)
        assert c["label"] == interpret(c["r"])
    prefs = [r for r in rows if r["metric"] == "pref"]
    cats = run.pairs.pair_categories()
    assert [p["value"] for p in prefs] == pytest.approx([run.pref[cats == c].mean() for c in range(6)])
