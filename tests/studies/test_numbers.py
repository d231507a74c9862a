"""Each study's headline numbers (what a sweep plots against training step), from hand-made results."""

import math

from layerscope.run import get_study
from layerscope.study import StudyResult
from layerscope.study.result import make_table


def result(study, summary, rows=()):
    return StudyResult(study=study, config={}, manifest={}, summary=summary, table=make_table(list(rows) or [{}]))


def test_pair_studies_pick_their_verdict_numbers():
    div = result("divergence", {"models": {"m": {"pooling_comparison": [
        {"pooling": "mean", "r": 0.5}, {"pooling": "last", "r": -0.2}, {"pooling": "first", "r": 0.1}]}}})
    assert get_study("divergence").numbers(div, "m") == {"final_r_mean": 0.5, "final_r_last": -0.2,
                                                         "final_r_first": 0.1}
    scaling = result("scaling", {"models": {"m": {"max_pos_r": 0.8, "max_pos_pct": 25.0, "final_r": -0.1}}})
    assert get_study("scaling").numbers(scaling, "m") == {"peak_r": 0.8, "peak_depth_pct": 25.0, "final_r": -0.1}
    phases = result("phases", {"models": {"m": {"final_r": -0.3, "phases": {
        "early": {"mean": 0.4}, "mid": {"mean": 0.1}, "late": {"mean": -0.2}}}}})
    assert get_study("phases").numbers(phases, "m") == {"early": 0.4, "mid": 0.1, "late": -0.2, "final_r": -0.3}


def test_anisotropy_numbers_read_the_top1_share_at_l_star_of_the_headline_tokens():
    rows = [{"model": "m", "layer": layer, "n_layers": 4, "metric": "top1_ratio", "value": value, "tokens": tokens}
            for tokens, values in (("all", [0.1, 0.9, 0.5, 0.3, 0.2]), ("excl_pos0", [0.1, 0.2, 0.6, 0.3, 0.2]))
            for layer, value in enumerate(values)]
    summary = {"models": {"m": {"n_layers": 4, "primary": "excl_pos0",
                                "token_sets": {"all": {"l_star": 1}, "excl_pos0": {"l_star": 2}}}}}
    assert get_study("anisotropy").numbers(result("anisotropy", summary, rows), "m") == {
        "l_star": 2, "l_star_depth_pct": 50.0, "top1_ratio_at_l_star": 0.6}


def test_ablation_numbers_come_from_the_primary_variant_all_quantized_row():
    per_config = [{"config": "baseline", "d_hr": 0.0, "d_lr": 0.0, "disparity_ratio": None},
                  {"config": "all_quantized", "d_hr": 0.4, "d_lr": 0.2, "disparity_ratio": 0.5}]
    summary = {"primary": "per-channel/linear", "models": {"m": {"variants": {
        "per-channel/linear": {"per_config": per_config, "all_quantized_ppl_ratio": 2.2},
        "per-tensor/all-weights (notebook)": {"per_config": [], "all_quantized_ppl_ratio": 3e5}}}}}
    numbers = get_study("ablation").numbers(result("ablation", summary), "m")
    assert numbers == {"all_quantized_ppl_ratio": 2.2, "d_hr": 0.4, "d_lr": 0.2, "disparity_ratio": 0.5}
    per_config[1]["disparity_ratio"] = None  # undefined ratio: NaN, so a plot leaves a gap
    assert math.isnan(get_study("ablation").numbers(result("ablation", summary), "m")["disparity_ratio"])
