"""Each study end to end on the real models, through the CLI: the studies of the README's `layerscope run`
(``real_suite``, one run shared with the suite test), read study by study."""

import pytest

pytestmark = pytest.mark.integration


def test_divergence_on_smollm2(real_suite):
    data, table, out = real_suite.study("divergence")
    s = data["summary"]["models"]["smollm2-135m"]
    assert s["layers"] == list(range(31)) and s["n_categories"] == 7
    main = table[(table["metric"] == "r_ua_pref") & (table["subset"] == "all")]  # not the checks' rows
    assert len(main) == 31 * 3 and set(main[main["layer"] == 30]["stage"]) == {"pre_norm"}
    checks = [c["check"] for c in s["checks"]]
    assert checks[:3] == ["without position 0", "without massive-activation tokens", "after the final norm"]
    assert len(checks) == 3 + 7 and s["robustness"]
    assert [c["pooling"] for c in s["pooling_comparison"]] == ["mean", "last", "first"]
    assert (out / "divergence.png").stat().st_size > 10_000


def test_phases_on_smollm2_all_layers_10000_resamples(real_suite):
    data, table, out = real_suite.study("phases")
    s = data["summary"]["models"]["smollm2-135m"]
    assert s["n_bootstrap"] == 10_000 and s["layers"] == list(range(31)) and s["n_pairs"] == 154
    rows = table[(table["metric"] == "r_centroid_pref") & (table["subset"] == "all")]
    assert len(rows) == 31 and (rows["ci_lo"] <= rows["value"]).all() and (rows["value"] <= rows["ci_hi"]).all()
    assert data["manifest"]["timings"]["after_extraction_s"] > 0
    assert [row["source"].startswith("published") for row in data["summary"]["comparison"]] == [True] * 3 + [False]
    assert (out / "phases.png").exists()


def test_scaling_on_smollm2_and_gemma3(real_suite):
    data, table, _ = real_suite.study("scaling")
    models = {m["name"]: m for m in data["manifest"]["models"]}
    assert models["smollm2-135m"]["n_layers"] == 30 and models["gemma3-270m"]["n_layers"] == 18
    assert models["smollm2-135m"]["adds_bos"] is False and models["gemma3-270m"]["adds_bos"] is True
    profile = table[(table["metric"] == "r_ua_pref") & (table["subset"] == "all")]
    assert profile.groupby("model").size().to_dict() == {"gemma3-270m": 19, "smollm2-135m": 31}
    assert profile["depth"].between(0, 1).all()
    stability = data["summary"]["peak_stability"]  # two models of two families: no stability label
    assert stability["verdict"] == "not assessable"
    assert stability["reason"].startswith("2 models of 2 families; needs >= 3 of one family")
