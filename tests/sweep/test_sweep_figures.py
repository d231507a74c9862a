"""A sweep's figures say what they show: readable titles and axis labels instead of metric keys, interval bands
where one row per task and layer carries ci_lo / ci_hi (none for averaged rows), no post-norm final row in a
profile; and the report names each headline-number column. Built from hand-made tables."""

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection

from layerscope.study import StudyConfig
from layerscope.sweep.figures import dynamics_figure, metric_figures, readable
from layerscope.sweep.gather import profile_rows
from layerscope.sweep.report import sweep_report

R = {"a": [0.1, 0.4, -0.3, 0.2], "b": [0.0, 0.5, 0.6, -0.1]}
"""r at layers 0..3 of two tasks (3 layers each: layer 3 is the final layer, before the final norm)."""


def bounds(r):
    return r - 0.25, r + 0.15


def table():
    rows = []
    for model, values in R.items():
        for layer, r in enumerate(values):
            lo, hi = bounds(r)
            common = {"model": model, "revision": None, "step": None, "layer": layer, "n_layers": 3,
                      "depth": layer / 3, "pooling": "mean", "subset": "all"}
            rows.append({**common, "metric": "r_ua_pref", "value": r, "ci_lo": lo, "ci_hi": hi,
                         "stage": "pre_norm" if layer == 3 else None})
            # the same metric on another pooling and subset: not the sweep's main view
            rows.append({**common, "metric": "r_ua_pref", "value": 9.0, "ci_lo": 8.0, "ci_hi": 10.0,
                         "pooling": "last"})
            # two languages averaged into one value: an interval of neither is an interval of the mean
            rows += [{**common, "metric": "degradation", "value": v, "ci_lo": v - 1, "ci_hi": v + 1, "lang": lang}
                     for v, lang in ((1.0 + layer, "en"), (3.0 + layer, "de"))]
        rows.append({**rows[-4], "layer": 3, "depth": 1.0, "stage": "post_norm", "value": 0.99, "ci_lo": 0.9,
                     "ci_hi": 1.0})
    out = pd.DataFrame(rows)
    out["step"] = out["step"].astype("Int64")
    return out


def band_vertices(ax):
    return {tuple(np.round(v, 9)) for c in ax.collections if isinstance(c, PolyCollection)
            for path in c.get_paths() for v in path.vertices}


def test_profile_rows_drop_the_post_norm_row_and_keep_intervals_of_single_rows_only():
    profiles = profile_rows(table(), StudyConfig(study="divergence"))
    r = profiles[profiles["metric"] == "r_ua_pref"].set_index(["model", "layer"])
    for model, values in R.items():
        assert list(r.loc[model, "value"]) == values  # layer 3 is the pre-norm value, never 0.99
        assert list(r.loc[model, "ci_lo"]) == [bounds(v)[0] for v in values]
        assert list(r.loc[model, "ci_hi"]) == [bounds(v)[1] for v in values]
    degradation = profiles[profiles["metric"] == "degradation"]
    assert list(degradation["value"]) == [2.0, 3.0, 4.0, 5.0] * 2  # mean of en and de
    assert degradation["ci_lo"].isna().all() and degradation["ci_hi"].isna().all()


def test_metric_figures_band_the_intervals_and_use_readable_names():
    figures = metric_figures(profile_rows(table(), StudyConfig(study="divergence")))
    ax = figures["r_ua_pref"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    for model, values in R.items():
        assert list(lines[model].get_ydata()) == values
        np.testing.assert_allclose(lines[model].get_xdata(), [0, 100 / 3, 200 / 3, 100])
    expected = {tuple(np.round((100 * layer / 3, bound), 9)) for values in R.values()
                for layer, r in enumerate(values) for bound in bounds(r)}
    assert band_vertices(ax) == expected
    assert ax.get_title() == "r(UA, output preference) over depth" and "r_ua_pref" not in ax.get_title()
    assert ax.get_ylabel() == "r(UA, output preference)"
    assert "each task's CI" in [t.get_text() for t in ax.get_legend().get_texts()]

    averaged = figures["degradation"].axes[0]
    assert band_vertices(averaged) == set()
    assert averaged.get_title() == "perplexity degradation (relative to baseline) over depth"


def test_heat_map_and_dynamics_panels_use_readable_names():
    rows = [{"model": "m", "revision": f"step{s}", "step": s, "metric": "r_ua_pref", "layer": layer,
             "value": 0.1 * layer - 0.01 * s, "depth": layer / 2} for s in (0, 10) for layer in range(3)]
    profiles = pd.DataFrame(rows)
    profiles["step"] = profiles["step"].astype("Int64")
    fig = metric_figures(profiles)["r_ua_pref"]
    assert fig.axes[1].get_title() == "r(UA, output preference) of m over training"
    assert fig.axes[2].get_ylabel() == "r(UA, output preference)"  # the colour bar
    tasks = [{"model": "m", "step": s, "numbers": {"peak_depth_pct": 30.0 + s, "l_star": 2, "final_r_mean": 0.1,
                                                   "new_metric": 1.0}} for s in (0, 10)]
    titles = [ax.get_title() for ax in dynamics_figure(tasks, "t").axes if ax.get_visible()]
    assert titles == ["peak depth (% of layers)", "L* (layer of peak anisotropy)",
                      "final-layer r(UA, pref), mean pooling", "new metric"]


def test_readable_falls_back_to_the_key_without_underscores():
    assert readable("top1_ratio_at_l_star") == "top-1 eigenvalue share at L*"
    assert readable("some_future_key") == "some future key"


def test_report_names_each_headline_number_and_prints_large_ones_in_scientific_notation():
    task = {"model": "m", "revision": None, "step": None, "n_layers": 3, "status": "done", "seconds": 1.0,
            "folder": "tasks/m", "spec": "m", "headline": ["m: fine"],
            "numbers": {"all_quantized_ppl_ratio": 963273.7, "peak_depth_pct": 25.0}}
    text = sweep_report({"study": "ablation", "executor": "serial", "tasks": [task]})
    assert ("Columns: `all_quantized_ppl_ratio`: perplexity ratio, all layers quantized (median); "
            "`peak_depth_pct`: peak depth (% of layers).") in text
    assert "| m |  |  | 9.63e+05 | 25.000 |" in text
