"""The probe study in a suite draws divergence's UA and surgery's skip cost beside its profiles: the numbers it
copies are recomputed here from those studies' own table.csv files, and its figure gets the extra panel from the
probe's result alone."""

import numpy as np
import pandas as pd
import pytest

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
    with_panel = {k: f for k, f in figures(probe).items() if k.startswith("probe_side_")}
    n_with = [len(f.axes) for f in with_panel.values()]
    for s in probe.summary["models"].values():
        s.pop("companions")
    n_without = [len(f.axes) for k, f in figures(probe).items() if k.startswith("probe_side_")]
    # probes, selectivity, steering; plus the companions panel and its second (skip cost) axis
    assert len(with_panel) == len(probe.summary["models"])
    assert n_without == [3] * len(with_panel) and n_with == [5] * len(with_panel)
    assert "companions" not in load_result(folder / "divergence").summary
