"""Ablation verdicts of the default mode, on per-text frames built by hand (no model): H5 only where the
bootstrap interval earns it, NOT_APPLICABLE when the premise fails, a broken model undetermined, the
leave-one-language-out range, and "more critical" only when the interval of the difference excludes 0."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layerscope.run import get_study
from layerscope.studies.ablation import analyse_model
from layerscope.studies.ablation.analysis import add_degradation, disparity_table, verdicts
from layerscope.studies.ablation.figures import figures
from layerscope.studies.ablation.inference import bootstrap_weights, variant_verdicts
from layerscope.studies.ablation.report import readable
from layerscope.studies.ablation.runner import Scores, Variant
from layerscope.study import StudyConfig, StudyResult
from layerscope.study.result import jsonable, make_table

LANGS = {"en": "high", "de": "high", "sw": "low", "yo": "low"}
LEVEL, B, SEED = 0.95, 2000, 7


def per_text(degradation: dict, resource: dict = LANGS, variant: str = "v") -> pd.DataFrame:
    """The runner's per-text frame: ``degradation`` {config: {lang: [d per text]}}; baseline NLL 1 for every
    text and NLL 1 + log(1 + d) under a configuration, so ppl / baseline ppl - 1 = d exactly."""
    rows = []
    sizes = {lang: len(ds) for lang, ds in next(iter(degradation.values())).items()}
    for lang, res in resource.items():
        rows += [{"config": "baseline", "lang": lang, "resource": res, "sample": k, "n_quantized": 0, "nll": 1.0}
                 for k in range(sizes[lang])]
    for config, by_lang in degradation.items():
        for lang, ds in by_lang.items():
            rows += [{"config": config, "lang": lang, "resource": resource[lang], "sample": k, "n_quantized": 2,
                          "nll": 1.0 + math.log1p(d)} for k, d in enumerate(ds)]
    out = pd.DataFrame(rows).assign(variant=variant, n_scored=10)
    return out.assign(ppl=np.exp(out["nll"]))


def judge(degradation, resource=LANGS, compat=None):
    scored = add_degradation(per_text(degradation, resource))
    return variant_verdicts(scored, ["baseline", *degradation], compat, LEVEL, B, SEED)


def noisy(rng, means: dict, n: int, sd: float) -> dict:
    """{lang: n degradations around means[lang]}, kept >= 0 (degradation is clipped at 0)."""
    return {lang: np.abs(rng.normal(m, sd, n)).tolist() for lang, m in means.items()}


def naive_reduction_bootstrap(degradation: dict, resource: dict, n_resamples: int, seed: int) -> list[float]:
    """The bootstrap written out: per resample, draw each language's texts with replacement (the draw order of
    ``bootstrap_weights``: language by language in file order, rng.integers(0, n_l, (B, n_l))), then the mean
    degradation of the high- and low-resource texts drawn, the two disparity ratios and the reduction."""
    rng = np.random.default_rng(seed)
    langs = list(resource)
    draws = {lang: rng.integers(0, len(degradation["all_quantized"][lang]), size=(n_resamples, len(
        degradation["all_quantized"][lang]))) for lang in langs}
    out = []
    for b in range(n_resamples):
        ratio = {}
        for config in ("all_quantized", "gateway_protected"):
            picked = {res: [] for res in ("high", "low")}
            for lang in langs:
                picked[resource[lang]] += [degradation[config][lang][i] for i in draws[lang][b]]
            ratio[config] = (sum(picked["low"]) / len(picked["low"])) / (sum(picked["high"]) / len(picked["high"]))
        out.append((ratio["all_quantized"] - ratio["gateway_protected"]) / ratio["all_quantized"] * 100)
    return out


def reduction_by_hand(degradation: dict, resource: dict) -> float:
    mean = {c: {res: np.mean([d for lang, ds in degradation[c].items() if resource[lang] == res for d in ds])
                for res in ("high", "low")} for c in ("all_quantized", "gateway_protected")}
    r_all, r_gate = (mean[c]["low"] / mean[c]["high"] for c in ("all_quantized", "gateway_protected"))
    return (r_all - r_gate) / r_all * 100


def test_low_resource_languages_degrading_less_make_h5_not_applicable():
    # all quantized: HR 0.4, LR 0.2 -> D_LR / D_HR = 0.5; the gateway "reduction" would be (0.5 - 0.75)/0.5 = -50%
    per_lang = {"all_quantized": (0.4, 0.2), "gateway_protected": (0.2, 0.15)}
    deg = {c: {lang: [hr if res == "high" else lr] * 5 for lang, res in LANGS.items()}
           for c, (hr, lr) in per_lang.items()}
    per_config, v = judge(deg)
    assert v["h5"]["result"] == "NOT_APPLICABLE"
    assert "D_LR / D_HR = 0.50 <= 1" in v["h5"]["reason"] and "reduction_pct" not in v["h5"]
    assert {r["config"]: r["reduction_pct"] for r in per_config}["gateway_protected"] == pytest.approx(-50.0)
    assert judge(deg, compat="notebooks")[1]["h5"]["result"] == "NOT_SUPPORTED"  # the notebook's rule, unchanged
    result = analysed(deg)
    assert get_study("ablation").headline(result)[0].startswith(
        "m [pc]: H5 NOT_APPLICABLE (low-resource languages do not degrade more than high-resource ones")
    assert "**H5: NOT_APPLICABLE** (low-resource languages" in get_study("ablation").report(result)


def test_a_broken_configuration_is_undetermined_and_never_a_percentage():
    # all quantized multiplies every perplexity by 2000 (> 100x): no ratio, no reduction, no H5 percentage
    deg = {"all_quantized": {lang: [1999.0] * 4 for lang in LANGS},
           "gateway_protected": {lang: [0.1 if LANGS[lang] == "high" else 0.3] * 4 for lang in LANGS}}
    per_config, v = judge(deg)
    by = {r["config"]: r for r in per_config}
    assert by["all_quantized"]["broken"] and by["all_quantized"]["median_ppl_ratio"] == pytest.approx(2000.0)
    assert not by["gateway_protected"]["broken"] and by["gateway_protected"]["disparity_ratio"] == pytest.approx(3.0)
    assert by["all_quantized"]["disparity_ratio"] is None and all(r["reduction_pct"] is None for r in per_config)
    assert v["h5"]["result"] == "UNDETERMINED" and "model broken, undetermined" in v["h5"]["reason"]
    assert "%" not in json.dumps(v["h5"])
    seed_table, seed_v = judge(deg, compat="notebooks")  # the notebook divides the broken numbers: 1.0 vs 3.0 -> -200%
    assert seed_v["h5"]["reduction_pct"] == pytest.approx(-200.0) and "broken" not in seed_table[0]


@pytest.mark.parametrize("ratio, broken", [(99.0, False), (101.0, True)])
def test_broken_means_a_median_perplexity_ratio_above_100(ratio, broken):
    deg = {"all_quantized": {lang: [ratio - 1] * 3 for lang in LANGS}}
    row = judge(deg)[0][1]
    assert row["broken"] is broken and (row["disparity_ratio"] is None) is broken


def test_a_clear_effect_over_many_texts_is_supported_with_the_naive_bootstrap_interval():
    rng = np.random.default_rng(0)
    deg = {"all_quantized": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.6, "yo": 0.6}, 30, 0.05),
           "gateway_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.3, "yo": 0.3}, 30, 0.05)}
    _per_config, v = judge(deg)
    h5 = v["h5"]
    naive = naive_reduction_bootstrap(deg, LANGS, B, SEED)
    # the expanded percentile interval (Hesterberg 2015) for 30 texts per language: tails of
    # Phi(-sqrt(30 / 29) t_29(0.975)) = Phi(-2.080) = 1.88 % instead of 2.5 %
    tail = stats.norm.cdf(-math.sqrt(30 / 29) * stats.t.ppf(0.975, 29))
    assert 0.0187 < tail < 0.0188
    assert h5["ci"] == pytest.approx(list(np.percentile(naive, [100 * tail, 100 * (1 - tail)])), rel=1e-9)
    assert h5["reduction_pct"] == pytest.approx(reduction_by_hand(deg, LANGS))  # about (3 - 1.5) / 3 = 50%
    assert h5["result"] == "SUPPORTED" and h5["ci"][0] > 30 and h5["ci"][0] < h5["reduction_pct"] < h5["ci"][1]
    without = {lang: reduction_by_hand({c: {k: d for k, d in ds.items() if k != lang} for c, ds in deg.items()},
                                       {k: r for k, r in LANGS.items() if k != lang}) for lang in LANGS}
    assert h5["without_language"] == pytest.approx(without)
    assert h5["lolo_range"] == pytest.approx([min(without.values()), max(without.values())])
    assert h5["short_robustness"] == "robust to leaving out any one of 4 languages" and not any(
        c["flips"] for c in h5["checks"])


def test_bootstrap_weights_draw_within_each_language():
    langs = np.array(["en"] * 3 + ["sw"] * 5)
    w = bootstrap_weights(langs, 50, np.random.default_rng(1))
    assert w.shape == (50, 8) and (w[:, :3].sum(1) == 3).all() and (w[:, 3:].sum(1) == 5).all()
    rng = np.random.default_rng(1)
    first = rng.integers(0, 3, size=(50, 3))
    assert (w[:, :3] == np.stack([np.bincount(row, minlength=3) for row in first])).all()


def test_an_effect_at_the_threshold_is_inconclusive_and_a_small_one_not_supported():
    rng = np.random.default_rng(1)  # expected ratios: all 0.4 / 0.2 = 2, gateway 0.28 / 0.2 = 1.4: exactly 30%
    at = {"all_quantized": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.4, "yo": 0.4}, 12, 0.08),
          "gateway_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.28, "yo": 0.28}, 12, 0.08)}
    h5 = judge(at)[1]["h5"]
    assert h5["result"] == "INCONCLUSIVE" and h5["ci"][0] < 30 < h5["ci"][1]
    small = {"all_quantized": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.4, "yo": 0.4}, 30, 0.02),
             "gateway_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.38, "yo": 0.38}, 30, 0.02)}
    h5 = judge(small)[1]["h5"]  # 5% reduction
    assert h5["result"] == "NOT_SUPPORTED" and h5["ci"][1] < 30


def test_one_language_deciding_h5_is_not_robust():
    # all: HR 0.2, LR 0.6 -> 3; gateway: sw drops to 0.1, yo stays 0.6 -> 0.35 / 0.2 = 1.75: 41.7% reduction;
    # without sw: 3 -> 3, 0%; without yo: 3 -> 0.5, 83.3%; without en or de: 41.7%
    deg = {"all_quantized": {"en": [0.2] * 3, "de": [0.2] * 3, "sw": [0.6] * 3, "yo": [0.6] * 3},
           "gateway_protected": {"en": [0.2] * 3, "de": [0.2] * 3, "sw": [0.1] * 3, "yo": [0.6] * 3}}
    h5 = judge(deg)[1]["h5"]
    assert h5["reduction_pct"] == pytest.approx(125 / 3) and h5["result"] == "SUPPORTED"  # no spread within a language
    assert h5["without_language"] == pytest.approx({"en": 125 / 3, "de": 125 / 3, "sw": 0.0, "yo": 250 / 3})
    assert h5["lolo_range"] == pytest.approx([0.0, 250 / 3])
    assert [c["check"] for c in h5["checks"] if c["flips"]] == ["without sw"]
    assert h5["robustness"] == h5["short_robustness"] == "not robust: flips without sw"


def test_one_text_per_language_leaves_h5_undetermined():
    deg = {"all_quantized": {"en": [0.2], "de": [0.2], "sw": [0.6], "yo": [0.6]},
           "gateway_protected": {"en": [0.2], "de": [0.2], "sw": [0.3], "yo": [0.3]}}
    h5 = judge(deg)[1]["h5"]
    assert h5["result"] == "UNDETERMINED" and "at least 2 per language" in h5["reason"]


def halves(rng, first_lr: float, second_lr: float, n: int = 20, sd: float = 0.1) -> dict:
    return {"all_quantized": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.6, "yo": 0.6}, n, sd),
            "gateway_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": 0.5, "yo": 0.5}, n, sd),
            "first_half_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": first_lr, "yo": first_lr}, n, sd),
            "second_half_protected": noisy(rng, {"en": 0.2, "de": 0.2, "sw": second_lr, "yo": second_lr}, n, sd)}


def test_more_critical_half_needs_an_interval_that_excludes_zero():
    rng = np.random.default_rng(3)
    clear = judge(halves(rng, 0.25, 0.6))[1]["halves"]  # protecting the first half leaves ratio ~1.25 vs ~3
    assert clear["more_critical_for_disparity"] == "early" and clear["disparity_diff_ci"][1] < 0
    assert clear["disparity_diff_ci"][0] < clear["disparity_diff"] < clear["disparity_diff_ci"][1]
    assert clear["more_critical_for_degradation"] == "early" and clear["degradation_diff_ci"][1] < 0
    same = halves(rng, 0.4, 0.4)  # the same in expectation: whichever point estimate is smaller is noise
    h = judge(same)[1]["halves"]
    assert h["more_critical_for_disparity"] == "not significant"
    assert h["disparity_diff_ci"][0] < 0 < h["disparity_diff_ci"][1]
    assert judge(same, compat="notebooks")[1]["halves"]["more_critical_for_disparity"] in ("early", "late")


def analysed(deg, compat=None, resource=LANGS):
    """A whole StudyResult (two variants: a working one and a broken notebook-scheme one) from per-text frames."""
    broken = {c: {lang: [99_999.0] * len(ds) for lang, ds in by.items()} for c, by in deg.items()}  # ppl x1e5
    frames = [per_text(deg, resource, "pc"), per_text(broken, resource, "nb")]
    config = StudyConfig(study="ablation", compat=compat, n_bootstrap=500, seed=SEED)
    variants = [Variant("pc", "per-channel", "linear", False), Variant("nb", "per-tensor", "all-weights", False)]
    scores = Scores(pd.concat(frames, ignore_index=True), pd.DataFrame(), {})
    summary, rows = analyse_model("m", 4, scores, ["baseline", *deg], variants, config)
    return StudyResult(study="ablation", config=config.to_dict(), summary={
        "bits": 4, "primary": "pc", "models": {"m": summary}, "warnings": []},
        manifest={"dataset": {"languages": resource}}, table=make_table(rows))


def test_headline_report_and_figure_carry_interval_caveat_and_broken_wording():
    rng = np.random.default_rng(4)
    result = analysed(halves(rng, 0.25, 0.6))
    lines = get_study("ablation").headline(result)
    assert lines[0].startswith("m [pc]: H5 ") and "95% CI [" in lines[0] and "leave-one-language-out" in lines[0]
    assert lines[0].endswith("(n = 2 HR / 2 LR languages)")
    assert lines[1].startswith("m [nb]: H5 UNDETERMINED (model broken, undetermined") and "%" not in lines[1]
    text = get_study("ablation").report(result)
    nb = text[text.index("### nb"):]
    assert "broken (ppl x1e+05)" in nb and "99999" not in nb and "1.000e+05" in nb  # D_HR, D_LR, per language
    assert set(re.findall(r"\S*%", nb)) <= {"95%"}  # interval levels at most: no percentage for a broken model
    assert "Leave one language out:" in text and "bootstrap CI over texts" in text
    assert json.dumps(jsonable(result.summary), allow_nan=False)
    ratios = result.table[(result.table["metric"] == "disparity_ratio") & (result.table["scheme"] == "per-channel")
                          & (result.table["config"] != "baseline")]
    assert len(ratios) == 4 and ((ratios["ci_lo"] < ratios["value"]) & (ratios["value"] < ratios["ci_hi"])).all()
    scatter = figures(result)["ablation"].axes[3]
    names = {"baseline", "gateway_protected", "first_half_protected", "second_half_protected", "all_quantized"}
    assert {t.get_text() for t in scatter.texts} == names  # every point named
    markers = {h.get_marker() for h in scatter.lines} - {None, "None", "", "_", "|"}  # "_", "|": error-bar caps
    assert len(markers) == len(names)  # and its own marker


def test_seed_compat_keeps_the_notebooks_rule_and_marks_it():
    rng = np.random.default_rng(5)
    deg = halves(rng, 0.25, 0.6)
    result = analysed(deg, compat="notebooks")
    v = result.summary["models"]["m"]["variants"]["pc"]
    scored = add_degradation(per_text(deg, variant="pc"))
    expected = disparity_table(scored, ["baseline", *deg])
    assert v["per_config"] == expected and v["verdicts"] == verdicts(expected)
    assert result.table["ci_lo"].isna().all() and "the notebook's rule" in get_study("ablation").report(result)
    assert "the notebook's rule" in get_study("ablation").headline(result)[0]


def test_large_numbers_print_in_scientific_notation():
    assert readable(963273.7) == "9.633e+05" and readable(-1.25e7) == "-1.250e+07"
    assert readable(12.5, 2) == "12.50" and readable(None) == "n/a"


def test_the_report_shows_delta_nll_in_bits_per_token():
    """The summary keeps delta NLL in nats; the report's configuration table shows it in bits per token."""
    from layerscope.report.markdown import number

    rng = np.random.default_rng(4)
    result = analysed(halves(rng, 0.25, 0.6))
    text = get_study("ablation").report(result)
    assert "| delta NLL HR (bits/token) | delta NLL LR (bits/token) |" in text and "nats" not in text
    rows = result.summary["models"]["m"]["variants"]["pc"]["per_config"]
    row = next(c for c in rows if c["config"] == "all_quantized")
    hr, lr = (number(row[key] / math.log(2), 3) for key in ("delta_nll_hr", "delta_nll_lr"))
    assert f"| {hr} | {lr} |" in text
