"""The probe study in a suite draws divergence's UA and surgery's skip cost beside its profiles: the numbers it
copies are recomputed here from those studies' own table.csv files, and its figure gets the extra panel from the
probe's result alone."""

import numpy as np
import pandas as pd
import pytest

from layerscope.report.plotting import figure_slug
from layerscope.run.pages import load_result
from layerscope.studies.probe.figures import figures


def test_a_suite_probe_carries_divergence_ua_and_surgery_skip_cost(tiny_suite):
    folder, _ = tiny_suite
    probe = load_result(folder / "probe")
    divergence = pd.read_csv(folder / "divergence" / "table.csv")
    surgery = pd.read_csv(folder / "surgery" / "table.csv")
    assert probe.summary["models"], "the suite ran the probe study"
    for model, s in probe.summary["models"].items():
        c = s["companions"]
        ua = divergence[(divergence["model"] == model) & (divergence["metric"] == "ua")
                        & (divergence["pooling"] == "mean") & (divergence["subset"] == "all")]
        n_states = s["n_layers"] + 1
        assert c["divergence_ua"]["states"] == list(range(n_states))
        for state, value in zip(c["divergence_ua"]["states"], c["divergence_ua"]["values"], strict=True):
            at = ua[ua["layer"] == state]
            per_category = {cat: float(at[at["category"] == cat]["value"].iloc[0]) for cat in at["category"].unique()}
            assert len(per_category) == 4  # the suite's four categories, one row each at this state
            assert np.isclose(value, sum(per_category.values()) / 4, rtol=1e-12, atol=0)
        skip = surgery[(surgery["model"] == model) & (surgery["intervention"] == "skip")
                       & (surgery["metric"] == "delta_nll") & (surgery["lang"] == "all")]
        assert c["surgery_skip"]["blocks"] == list(range(s["n_layers"]))
        for i, block in enumerate(c["surgery_skip"]["blocks"]):
            row = skip[skip["layer"] == block].iloc[0]
            assert [c["surgery_skip"][k][i] for k in ("values", "ci_lo", "ci_hi")] == \
                pytest.approx([row["value"], row["ci_lo"], row["ci_hi"]], rel=1e-12, abs=0)


def test_the_figure_has_the_companions_panel_only_when_the_run_had_them(tiny_suite):
    folder, _ = tiny_suite
    probe = load_result(folder / "probe")
    pooled = [f"probe_side_{figure_slug(model)}" for model in probe.summary["models"]]
    n_with = [len(figures(probe)[k].axes) for k in pooled]
    for s in probe.summary["models"].values():
        s.pop("companions")
    n_without = [len(figures(probe)[k].axes) for k in pooled]
    # the pooled side (a mixture, probed only): accuracy and gain; plus the companions panel and its second (skip
    # cost) axis
    assert n_without == [2] * len(pooled) and n_with == [4] * len(pooled)
    assert "companions" not in load_result(folder / "divergence").summary
