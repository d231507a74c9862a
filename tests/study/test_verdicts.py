"""The summary table's verdicts: each built-in study's claims from hand-made summaries shaped like the real ones
(every status, the checks that flip each claim and its key number, typed here by hand from the values put in), the
seed-compat and older results ("not assessable"), status validation and a plugin study's default rows."""

from __future__ import annotations

import pandas as pd
import pytest

from layerscope.errors import LayerscopeError, ResultFileError
from layerscope.run import get_study
from layerscope.run.pages import _verdicts
from layerscope.study import Study
from layerscope.study.result import StudyResult
from layerscope.study.verdicts import STATUSES, Verdict, VerdictError, key_text, status_of

ROBUST, FRAGILE, NOT_SIG, NA = "holds and robust", "holds but fragile", "not significant", "not assessable"
SEED = "(the notebook's rule, no test)"
OLD = "(written before its test)"


def result(study: str, summary: dict, compat: str | None = None) -> StudyResult:
    return StudyResult(study=study, config={"compat": compat}, manifest={}, summary=summary, table=pd.DataFrame())


def rows(study: str, models: dict, compat: str | None = None, **summary) -> list[tuple]:
    return [v.row() for v in get_study(study).verdicts(result(study, {"models": models, **summary}, compat))]


def checks(*named: tuple[str, bool], **flags) -> list[dict]:
    """Check entries: (name, flips) pairs; ``flags`` maps an extra key (e.g. late_flips) to the names it is true for."""
    return [{"check": name, "flips": flips, **{k: name in v for k, v in flags.items()}} for name, flips in named]


# --- the dataclass and its helpers -----------------------------------------------------------------------------

def test_the_four_statuses_and_how_a_claim_earns_each():
    assert STATUSES == (ROBUST, FRAGILE, NOT_SIG, NA)
    assert [status_of(True), status_of(True, ["without c3"]), status_of(False), status_of(False, ["x"]),
            status_of(None), status_of(None, ["x"])] == [ROBUST, FRAGILE, NOT_SIG, NOT_SIG, NA, NA]


@pytest.mark.parametrize("bad", [dict(status="significant"), dict(status="Holds and robust"),
                                 dict(status=NA, flips="without c3"), dict(status=NA, flips=(1,))])
def test_a_verdict_with_an_unknown_status_or_bad_flips_is_one_clear_error(bad):
    with pytest.raises(VerdictError) as info:
        Verdict(**{"study": "s", "model": "m", "claim": "c", **bad})
    assert isinstance(info.value, LayerscopeError)
    assert ("holds and robust" in str(info.value)) if "flips" not in bad else ("tuple of str" in str(info.value))


def test_a_verdict_is_frozen_plain_values():
    v = Verdict("s", "m", "c", FRAGILE, "k", ["without c3"])
    assert v.row() == ("s", "m", "c", FRAGILE, "k", ("without c3",))
    with pytest.raises(AttributeError):
        v.status = ROBUST


def test_key_text():
    assert key_text("r", 0.669, (0.31, 0.88), q=0.012) == "r = +0.669 [+0.310, +0.880], q = 0.012"
    assert key_text("r", 0.5, (0.1, None), q=None, p=0.25) == "r = +0.500, p = 0.250"
    assert key_text("r", None) == "r = n/a"
    assert key_text("r", -0.2, (-0.5, 0.1), interval="LOO range", digits=2) == "r = -0.20, LOO range [-0.50, +0.10]"


def test_a_plugin_study_gets_one_not_assessable_row_per_headline_line():
    class Plugin(Study):
        name, title, question = "plugin-x", "Plugin", "?"
        run = figures = report = numbers = None  # never called here

        def headline(self, result):
            return ["<b>first</b> line", "second line"]

    got = Plugin().verdicts(result("plugin-x", {}))
    assert [v.row() for v in got] == [("plugin-x", "", "<b>first</b> line", NA, "", ()),
                                      ("plugin-x", "", "second line", NA, "", ())]


def test_pages_turn_a_damaged_result_and_a_bad_row_into_clear_errors(tmp_path):
    class Raises:
        name = "divergence"

        def verdicts(self, result):
            return get_study("divergence").verdicts(result)

    class Returns:
        def verdicts(self, result):
            return [("s", "m", "c", NA, "", ())]

    with pytest.raises(ResultFileError, match="lacks what a divergence run writes"):
        _verdicts(Raises(), result("divergence", {"models": {"m": {"pooling_comparison": []}}}), tmp_path)
    with pytest.raises(VerdictError, match="return a list of layerscope.study.verdicts.Verdict"):
        _verdicts(Returns(), result("divergence", {}), tmp_path)


# --- divergence --------------------------------------------------------------------------------------------------

def divergence_model(significant=True, r=0.669, q=0.012, interval="Fisher-z", label="ALIGNED (strong positive)",
                     flips=()):
    mean = {"pooling": "mean", "layer": 30, "stage": "pre_norm", "r": r, "p": 0.001, "p_perm": 0.002, "q": q,
            "significant": significant, "interval": interval, "ci_lo": 0.31, "ci_hi": 0.88, "label": label}
    return {"pooling_comparison": [mean, {**mean, "pooling": "last"}],
            "checks": checks(("without position 0", "without position 0" in flips),
                             ("without c3", "without c3" in flips))}


def test_divergence_verdicts():
    claim = "r(UA, pref) at the last tested layer 30 (before the final norm), mean pooling"
    key = "r = +0.669 [+0.310, +0.880], q = 0.012"
    got = rows("divergence", {"a": divergence_model(), "b": divergence_model(flips=("without c3",)),
                              "c": divergence_model(False, q=0.21, label="not significant (n = 6)",
                                                    flips=("without position 0",)),
                              "d": divergence_model(interval="leave-one-out range"),
                              "e": divergence_model(False, r=None, label="undefined")})
    assert got == [
        ("divergence", "a", f"{claim}: ALIGNED (strong positive)", ROBUST, key, ()),
        ("divergence", "b", f"{claim}: ALIGNED (strong positive)", FRAGILE, key, ("without c3",)),
        ("divergence", "c", claim, NOT_SIG, "r = +0.669 [+0.310, +0.880], q = 0.210", ("without position 0",)),
        ("divergence", "d", f"{claim}: ALIGNED (strong positive)", ROBUST,
         "r = +0.669, LOO range [+0.310, +0.880], q = 0.012", ()),
        ("divergence", "e", f"{claim}: undefined", NA, "r = n/a", ())]


def test_divergence_seed_compat_and_an_older_result_are_not_assessable():
    seed = {"pooling_comparison": [{"pooling": "mean", "layer": 30, "r": 0.669, "p": 0.15,
                                    "label": "ALIGNED (strong positive)"}]}
    claim = "r(UA, pref) at the final layer 30, mean pooling: ALIGNED (strong positive)"
    assert rows("divergence", {"m": seed}, "notebooks") == [("divergence", "m", f"{claim} {SEED}", NA,
                                                        "r = +0.669, p = 0.150", ())]
    assert rows("divergence", {"m": seed})[0][2:4] == (f"{claim} {OLD}", NA)


# --- phases --------------------------------------------------------------------------------------------------------

def phase(mean, lo=None, hi=None):
    return {"layers": [0, 1], "mean": mean, "n": 2, **({"ci_lo": lo, "ci_hi": hi} if lo is not None else {})}


def phases_model(pattern="LATE_INVERSION", late="CONFIRMED", pattern_flips=(), late_flips=()):
    names = ("without position 0", "after the final norm")
    return {"phases": {"early": phase(0.11, -0.01, 0.22), "mid": phase(-0.18, -0.29, -0.06),
                       "late": phase(-0.32, -0.43, -0.2)},
            "pattern": pattern, "pattern_text": "negative in late layers, and less negative early",
            "late_label": late, "late_inversion": "LATE-LAYER INVERSION CONFIRMED", "final_layer": 30,
            "final_stage": "pre_norm", "final_r": -0.45, "final_q": 0.004, "final_ci": [-0.6, -0.3],
            "checks": checks(*((n, n in pattern_flips + late_flips) for n in names), pattern_flips=pattern_flips,
                             late_flips=late_flips)}


def test_phases_verdicts():
    means = "early = +0.11 [-0.01, +0.22]; mid = -0.18 [-0.29, -0.06]; late = -0.32 [-0.43, -0.20]"
    pattern = "phase pattern: LATE_INVERSION (negative in late layers, and less negative early)"
    none = "phase pattern (PYTHIA_PATTERN, LATE_INVERSION or DECOUPLED)"
    late = "late-layer inversion (r < -0.1) at the last tested layer 30, before the final norm"
    final = "r = -0.450 [-0.600, -0.300], q = 0.004"
    got = rows("phases", {"a": phases_model(late_flips=("without position 0", "after the final norm")),
                          "b": phases_model("NO_PATTERN", "NOT_SIGNIFICANT", late_flips=("after the final norm",)),
                          "c": phases_model("NOT_ASSESSABLE", "NO_INVERSION", pattern_flips=("without position 0",)),
                          "d": phases_model("DECOUPLED", "NOT_ASSESSABLE", pattern_flips=("without position 0",),
                                            late_flips=("after the final norm",))})
    assert got == [
        ("phases", "a", pattern, ROBUST, means, ()),
        ("phases", "a", late, FRAGILE, final, ("without position 0", "after the final norm")),
        ("phases", "b", none, NOT_SIG, means, ()),
        ("phases", "b", late, NOT_SIG, final, ("after the final norm",)),
        ("phases", "c", none, NA, means, ()),
        ("phases", "c", late, NOT_SIG, final, ()),
        ("phases", "d", "phase pattern: DECOUPLED (negative in late layers, and less negative early)", FRAGILE,
         means, ("without position 0",)),
        ("phases", "d", late, NA, final, ())]


def test_phases_seed_compat_keeps_the_notebook_s_labels_unassessed():
    s = {"phases": {"early": phase(0.11), "mid": phase(-0.18), "late": phase(-0.32)}, "pattern": "PYTHIA_PATTERN",
         "late_inversion": "Negative trend in late layer", "final_layer": 30, "final_r": -0.05}
    assert rows("phases", {"m": s}, "notebooks") == [
        ("phases", "m", f"phase pattern: PYTHIA_PATTERN {SEED}", NA, "early = +0.11; mid = -0.18; late = -0.32", ()),
        ("phases", "m", f"late layer 30: Negative trend in late layer {SEED}", NA, "r = -0.050", ())]
    assert rows("phases", {"m": s})[1][2:4] == (f"late layer 30: Negative trend in late layer {OLD}", NA)


# --- scaling -------------------------------------------------------------------------------------------------------

def peak(significant, q, flips=()):
    return {"family": "Llama", "max_pos_r": 0.6, "max_pos_layer": 12, "max_pos_pct": 40.0, "max_pos_q": q,
            "max_pos_ci": [0.2, 0.85], "max_pos_significant": significant,
            "checks": checks(("without position 0", "without position 0" in flips), ("without c1", False))}


def test_scaling_verdicts():
    models = {"a": peak(True, 0.01, ("without position 0",)), "b": peak(False, 0.29), "c": peak(True, 0.002)}
    stable = {"verdict": "STABLE", "range_peak_pct": 6.0, "checks": checks(("without c1", True))}
    where = "peak of r(UA, pref) at layer 12 (40% depth)"
    assert rows("scaling", models, peak_stability=stable) == [
        ("scaling", "a, b, c", "peak depth across model sizes: STABLE", FRAGILE,
         "2 of 3 peaks significant; range = 6.0 points of depth", ("without c1",)),
        ("scaling", "a", where, FRAGILE, "r = +0.600 [+0.200, +0.850], q = 0.010", ("without position 0",)),
        ("scaling", "b", where, NOT_SIG, "r = +0.600 [+0.200, +0.850], q = 0.290", ()),
        ("scaling", "c", where, ROBUST, "r = +0.600 [+0.200, +0.850], q = 0.002", ())]
    unassessed = {"verdict": "not assessable", "range_peak_pct": None, "checks": [], "reason": "1 family"}
    assert rows("scaling", models, peak_stability=unassessed)[0] == (
        "scaling", "a, b, c", "peak depth across model sizes: STABLE or SHIFTS", NA, "2 of 3 peaks significant", ())
    shifts = {**stable, "verdict": "SHIFTS", "range_peak_pct": None, "checks": checks(("without c1", False))}
    assert rows("scaling", models, peak_stability=shifts)[0][2:] == (
        "peak depth across model sizes: SHIFTS", ROBUST, "2 of 3 peaks significant", ())


def test_scaling_seed_compat_is_not_assessable():
    models = {"a": {"max_pos_r": 0.6, "max_pos_layer": 0, "max_pos_pct": 0.0},
              "b": {"max_pos_r": 0.4, "max_pos_layer": 2, "max_pos_pct": 6.25}}
    seed = {"mean_peak_pct": 3.1, "std_peak_pct": 3.125, "peaks_stable": True, "answer": "STABLE (~3% depth)."}
    assert rows("scaling", models, "notebooks", peak_stability=seed) == [
        ("scaling", "a, b", f"peak depth across model sizes: STABLE {SEED}", NA, "sd = 3.1 points of depth", ()),
        ("scaling", "a", f"peak of r(UA, pref): layer 0 (0% depth) {SEED}", NA, "r = +0.600", ()),
        ("scaling", "b", f"peak of r(UA, pref): layer 2 (6% depth) {SEED}", NA, "r = +0.400", ())]
    one = {"mean_peak_pct": 0.0, "std_peak_pct": None, "peaks_stable": None, "answer": "Needs two models."}
    assert rows("scaling", {"a": models["a"]}, "notebooks", peak_stability=one)[0][2:5] == (
        f"peak depth across model sizes: no verdict {SEED}", NA, "")


# --- anisotropy ----------------------------------------------------------------------------------------------------

def anisotropy_model(bell=True, assessable=True, moves=(), bell_flips=()):
    names = ("without position 0", "after the final norm")
    curve = {"is_bell_curve": bell, "assessable": assessable, "phase1_slope": 0.012, "phase1_q": 0.004,
             "phase2_slope": -0.02, "phase2_q": 0.002, "max_value": 0.996, "phase1_n": 12, "phase2_n": 19,
             "min_layers": 3}
    return {"n_layers": 30, "primary": "all", "token_sets": {"all": {"l_star": 12, "bell": curve}},
            "bell_verdict": "...", "l_star_stage": None, "driver": {"label": "sink (position 0)"},
            "checks": checks(*((n, n in moves + bell_flips) for n in names), l_star_moves=moves,
                             bell_flips=bell_flips)}


def test_anisotropy_verdicts():
    bell = "bell curve of the top-1 share around L* = 12"
    star = "L* = 12 of 30 (driver: sink (position 0))"
    slopes = "rise +0.012 per layer (q = 0.004), fall -0.020 (q = 0.002)"
    depth = "40% depth, top-1 share 0.996"
    got = rows("anisotropy", {"a": anisotropy_model(),
                              "b": anisotropy_model(False, moves=("without position 0",),
                                                    bell_flips=("after the final norm",)),
                              "c": anisotropy_model(False, assessable=False, bell_flips=("after the final norm",))})
    assert got == [("anisotropy", "a", bell, ROBUST, slopes, ()), ("anisotropy", "a", star, ROBUST, depth, ()),
                   ("anisotropy", "b", bell, NOT_SIG, slopes, ("after the final norm",)),
                   ("anisotropy", "b", star, FRAGILE, depth, ("without position 0",)),
                   ("anisotropy", "c", bell, NA, "12 layer(s) before L*, 19 from L* on (needs 3 each)", ()),
                   ("anisotropy", "c", star, ROBUST, depth, ())]
    fragile = anisotropy_model(bell_flips=("after the final norm",))
    assert rows("anisotropy", {"m": fragile})[0][3:] == (FRAGILE, slopes, ("after the final norm",))


def test_anisotropy_seed_compat_is_not_assessable():
    s = {"n_layers": 30, "primary": "all", "token_sets": {"all": {"l_star": 12, "bell": {
        "is_bell_curve": False, "phase1_slope": -0.0005, "phase2_slope": -0.01, "max_value": 1.0}}}}
    assert rows("anisotropy", {"m": s}, "notebooks") == [
        ("anisotropy", "m", f"bell curve of the top-1 share around L*: not a bell curve {SEED}", NA,
         "slopes -0.0005, -0.010 per layer", ()),
        ("anisotropy", "m", f"L*: layer 12 of 30 {SEED}", NA, "40% depth, top-1 share 1.000", ())]


# --- ablation ------------------------------------------------------------------------------------------------------

def test_ablation_verdicts_per_model_and_variant():
    claim = "H5 [{}]: protecting the first and last layers cuts the disparity by > 30% ({})"
    tested = {"reduction_pct": 45.0, "ci": [35.2, 60.1], "level": 0.95, "threshold": 30.0}
    variants = {"per-channel/linear": {"result": "SUPPORTED", **tested, "checks": checks(("without sw", True),
                                                                                            ("without en", False))},
                "int8": {"result": "SUPPORTED", **tested, "checks": checks(("without sw", False))},
                "group128": {"result": "INCONCLUSIVE", **tested, "reduction_pct": 31.0, "ci": [-5.0, 62.5],
                             "checks": checks(("without sw", True))},
                "notebook": {"result": "NOT_SUPPORTED", **tested, "reduction_pct": -10.5, "ci": [-20.0, -1.0],
                             "checks": []},
                "x": {"result": "NOT_APPLICABLE", "all_quantized_ratio": 0.5, "reason": "no disparity"},
                "y": {"result": "UNDETERMINED", "reason": "model broken, undetermined: all_quantized"}}
    models = {"m": {"variants": {label: {"verdicts": {"h5": h5}} for label, h5 in variants.items()}}}
    assert rows("ablation", models) == [
        ("ablation", "m", claim.format("per-channel/linear", "SUPPORTED"), FRAGILE,
         "reduction = +45.0% [+35.2%, +60.1%], threshold 30%", ("without sw",)),
        ("ablation", "m", claim.format("int8", "SUPPORTED"), ROBUST,
         "reduction = +45.0% [+35.2%, +60.1%], threshold 30%", ()),
        ("ablation", "m", claim.format("group128", "INCONCLUSIVE"), NOT_SIG,
         "reduction = +31.0% [-5.0%, +62.5%], threshold 30%", ("without sw",)),
        ("ablation", "m", claim.format("notebook", "NOT_SUPPORTED"), NOT_SIG,
         "reduction = -10.5% [-20.0%, -1.0%], threshold 30%", ()),
        ("ablation", "m", claim.format("x", "NOT_APPLICABLE"), NA,
         "D_LR / D_HR = 0.50 <= 1 with every layer quantized", ()),
        ("ablation", "m", claim.format("y", "UNDETERMINED"), NA, "model broken, undetermined: all_quantized", ())]


def test_ablation_seed_compat_keeps_the_notebook_s_result_unassessed():
    models = {"m": {"variants": {"per-tensor/all-weights": {"verdicts": {"h5": {
        "result": "NOT_SUPPORTED", "reduction_pct": -10.5, "all_quantized_ratio": 2.0, "gateway_ratio": 2.2}}}}}}
    claim = "H5 [per-tensor/all-weights]: protecting the first and last layers cuts the disparity by > 30%"
    assert rows("ablation", models, "notebooks") == [("ablation", "m", f"{claim}: NOT_SUPPORTED {SEED}", NA,
                                                 "reduction = -10.5%", ())]
    assert rows("ablation", models)[0][2:4] == (f"{claim}: NOT_SUPPORTED {OLD}", NA)


# --- atlas ---------------------------------------------------------------------------------------------------------

def span(index, value, lo, hi, support, family="consensus"):
    return {"family": family, "index": index, "value": value, "ci_lo": lo, "ci_hi": hi, "support": support, "n": 200}


def test_atlas_verdicts_one_per_consensus_boundary():
    b = {"consensus": [3, 12], "tolerance": 3,
         "intervals": [span(1, 2, 1, 4, 0.5, "lens"), span(1, 3, 2, 5, 0.82), span(2, 12, 10, 14, 0.5)],
         "moved": [{"excl_massive": 0, "no_layer0": 3, "min_segment_3": None},
                   {"excl_massive": 5, "no_layer0": -4, "min_segment_3": 1}],
         "fragile": [False, True]}
    assert rows("atlas", {"m": {"n_layers": 30, "boundaries": b}}) == [
        ("atlas", "m", "phase boundary 1 at layer 3 of 30", ROBUST, "layer 3 [2-5], support 0.82", ()),
        ("atlas", "m", "phase boundary 2 at layer 12 of 30", FRAGILE, "layer 12 [10-14], support 0.50",
         ("without position 0 and the massive tokens", "without layer 0 (the embeddings)"))]
    older = {"consensus": [3, 12], "intervals": [], "fragile": [True, False]}
    assert rows("atlas", {"m": {"n_layers": 30, "boundaries": older}}) == [
        ("atlas", "m", "phase boundary 1 at layer 3 of 30", FRAGILE, "layer 3", ("one of the checks",)),
        ("atlas", "m", "phase boundary 2 at layer 12 of 30", ROBUST, "layer 12", ())]
    assert rows("atlas", {"m": {"n_layers": 30, "boundaries": {"consensus": [3, 12]}}})[1][3] == NA
    assert rows("atlas", {"m": {"n_layers": 2, "boundaries": {"consensus": None}}}) == [
        ("atlas", "m", "phase boundaries (change points of the measure families)", NA,
         "no family of measures had enough finite layers", ())]
    assert rows("atlas", {"m": {"n_layers": 30, "boundaries": {"consensus": []}}}) == [
        ("atlas", "m", "phase boundaries (change points of the measure families)", "not significant",
         "no profile changes course beyond its resamples' noise", ())]


def test_atlas_verdicts_name_the_families_the_resamples_that_moved_it_and_a_check_that_lost_it():
    b = {"consensus": [3, 12], "tolerance": 3, "seen_by": [["lens", "spectrum"], ["similarity"]],
         "intervals": [{**span(1, 3, 3, 3, 1.0), "moved": 0}, {**span(2, 12, 11, 13, 0.9), "moved": 40}],
         "moved": [{"excl_massive": 0, "no_layer0": None}, {"excl_massive": 1, "no_layer0": None}],
         "variants": {"excl_massive": {"consensus": [3, 13]}, "no_layer0": {"consensus": []}}}
    assert rows("atlas", {"m": {"n_layers": 30, "boundaries": b}}) == [
        ("atlas", "m", "phase boundary 1 at layer 3 of 30 (lens, spectrum)", FRAGILE, "layer 3 [3-3], support 1.00",
         ("without layer 0 (the embeddings)",)),
        ("atlas", "m", "phase boundary 2 at layer 12 of 30 (similarity)", FRAGILE,
         "layer 12 [11-13], support 0.90, moved in 40 of 200 resamples", ("without layer 0 (the embeddings)",))]


# --- surgery -------------------------------------------------------------------------------------------------------

def surgery_model(critical=(0, 5, 29), both=(0, 29), rho=0.55, predicts=True, inner=False, better=True,
                  effect=0.12):
    return {"n_layers": 30, "n_texts": 12,
            "critical": {"layers": list(critical), "in_both_halves": list(both), "interior": [5]},
            "geometry": {"block_influence": {"rho": rho, "p": 0.005, "q": 0.01, "predicts": predicts,
                                             "rho_interior": 0.1, "predicts_interior": inner,
                                             **({"note": "Spearman rho is undefined"} if rho is None else {})}},
            "pruning": {"k": [1, 2, 3], "rules": {"block_influence": {"overall_p": 0.004, "better_overall": better,
                                                                       "better_than_random": [True, False, True]}}},
            "boundaries": {"change_points": {"states": [3, 12], "blocks": [2, 3, 11, 12], "effect": effect,
                                             "p": 0.03, "placements": 100, **({"holds": effect > 0.1}
                                                                              if effect is not None else {})},
                           "thirds": {"states": [10, 20], "blocks": [9, 10, 19, 20], "effect": -0.5, "p": 0.9,
                                      "placements": 100, "holds": False}}}


def test_surgery_verdicts():
    pruning = "pruning by lowest block influence (ShortGPT) beats random sets, k = 1..3"
    boundary = ("skipping the blocks beside the 2 change points of this run's block influence profile (3, 12) "
                "costs more than other blocks")
    assert rows("surgery", {"m": surgery_model()}) == [
        ("surgery", "m", "blocks critical when skipped: 0, 5, 29", FRAGILE,
         "3 of 30 blocks at q < 0.05; 2 in both halves", ("split halves of the texts (blocks 5)",)),
        ("surgery", "m", "block influence predicts the skip cost", FRAGILE, "rho = +0.550, q = 0.010",
         ("without the first and last block",)),
        ("surgery", "m", pruning, ROBUST, "rank-sum p = 0.004; 2 of 3 k beat random after BH", ()),
        ("surgery", "m", boundary, ROBUST, "effect = +0.173 bits/token, permutation p = 0.030", ())]  # 0.120 nats
    got = rows("surgery", {"m": surgery_model((), (), rho=None, better=False, effect=0.05)})
    assert [row[2:4] for row in got] == [("blocks critical when skipped: none", NOT_SIG),
                                         ("block influence predicts the skip cost", NA),
                                         (pruning, NOT_SIG), (boundary, NOT_SIG)]
    got = rows("surgery", {"m": surgery_model(tuple(range(8)), tuple(range(8)), predicts=False, inner=False,
                                              effect=None)})
    assert got[0][2:] == ("blocks critical when skipped: 0, 1, 2, 3, 4, 5 and 2 more", ROBUST,
                          "8 of 30 blocks at q < 0.05; 8 in both halves", ())
    assert got[1][3:] == (NOT_SIG, "rho = +0.550, q = 0.010", ())
    assert got[3][3] == NA
    assert rows("surgery", {"m": {"n_layers": 30, "n_texts": 12}}) == []  # a run that measured none of these
