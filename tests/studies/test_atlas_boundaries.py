"""The atlas's phase boundaries on synthetic profiles with known breaks (worked out by hand): every family's change
points merged, L* compared without the top-1 share's family, the thirds against the nearest boundary, fragile
boundaries and massive-driven families."""

import numpy as np

from layerscope.measures.boundaries import bootstrap_boundaries
from layerscope.studies.atlas.boundaries import FAMILIES, nearest, summarise, tolerance

LAYERS = list(range(31))


def jumps(at, n=31, seed=0) -> np.ndarray:
    """(101, n): a level that jumps by 5 at each layer of ``at``, then 100 resamples with small noise."""
    y = 5.0 * np.searchsorted(np.array(at), np.arange(n), side="right")
    noise = 0.05 * np.random.default_rng(seed).normal(size=(100, n))
    return np.vstack([y, y + noise])


def family_profiles(lens, similarity, spectrum):
    """One measure per family (and the top-1 share beside the norm in the spectrum family), jumps as given."""
    return {"lens_kl": (LAYERS, jumps(lens, seed=1)), "block_influence": (LAYERS, jumps(similarity, seed=2)),
            "top1_ratio": (LAYERS, jumps(spectrum, seed=3)), "norm": (LAYERS, jumps(spectrum, seed=4))}


def fits_of(default, **variants):
    return {"default": bootstrap_boundaries(default, FAMILIES, 3),
            **{v: bootstrap_boundaries(variants.get(v, default), FAMILIES, 3, per_measure=False)
               for v in ("excl_massive", "no_layer0", "min_segment_3")}}


def test_tolerance_is_a_tenth_of_the_depth_rounded_and_at_least_one():
    # by hand: 31 -> 3.1 -> 3; 30 -> 3; 18 -> 1.8 -> 2; 12 -> 1.2 -> 1; 6 -> 0.6 -> 1; 4 -> 0.4 -> 0 -> at least 1
    assert [tolerance(n) for n in (31, 30, 18, 12, 6, 4)] == [3, 3, 2, 1, 1, 1]


def test_nearest_is_the_signed_shift_to_the_closest():
    assert nearest(10, [3, 12, 8]) == -2  # 8 and 12 tie at 2: the smaller wins
    assert nearest(10, [13]) == 3 and nearest(10, []) is None and nearest(10, None) is None


def test_l_star_is_compared_without_the_family_of_the_top1_share():
    profiles = family_profiles(lens=[5, 22], similarity=[6, 23], spectrum=[12, 25])
    b = summarise(fits_of(profiles), LAYERS, 3, 100, l_star=12)
    assert b["per_metric"]["top1_ratio"] == [12, 25]  # its own break is the jump that defines L*
    assert b["per_family"] == {"lens": [5, 22], "similarity": [6, 23], "spectrum": [12, 25]}
    # by hand: 5 and 6 within one layer -> 5 (lens, similarity); 12 (spectrum); 22 and 23 -> 22; 25 (spectrum)
    assert b["consensus"] == [5, 12, 22, 25]
    assert b["seen_by"] == [["lens", "similarity"], ["spectrum"], ["lens", "similarity"], ["spectrum"]]
    assert b["shared"] == [5, 22]
    assert b["l_star_families"] == ["lens", "similarity"]
    assert b["l_star_consensus"] == [5, 6, 22, 23]
    assert b["l_star_distance"] == 6  # |12 - 6|, not 0 as against the top-1 share's own break
    assert b["thirds"] == [10, 20] and b["thirds_distance"] == [2, 2]  # 10 -> 12, 20 -> 22


def test_a_boundary_with_no_counterpart_under_a_check_is_fragile_and_its_family_massive_driven():
    default = family_profiles(lens=[10, 20], similarity=[10, 20], spectrum=[10, 20])
    without_sink = family_profiles(lens=[10, 20], similarity=[10, 27], spectrum=[11, 27])
    b = summarise(fits_of(default, excl_massive=without_sink), LAYERS, 3, 100, l_star=10)
    assert b["consensus"] == [10, 20] and b["variants"]["excl_massive"]["consensus"] == [10, 20, 27]
    assert b["moved"][0] == {"excl_massive": 0, "no_layer0": 0, "min_segment_3": 0}
    assert b["moved"][1]["excl_massive"] == 0  # the lens family still has 20 without the sink
    assert b["fragile"] == [False, False]
    assert b["massive_driven"] == ["similarity", "spectrum"]  # their 20 has no counterpart within 3 layers
    moved = family_profiles(lens=[10, 27], similarity=[10, 27], spectrum=[11, 27])
    b = summarise(fits_of(default, excl_massive=moved), LAYERS, 3, 100, l_star=10)
    assert b["moved"][1]["excl_massive"] == 7 and b["fragile"] == [False, True]
    steady = summarise(fits_of(default), LAYERS, 3, 100, l_star=10)
    assert steady["fragile"] == [False, False] and steady["massive_driven"] == []


def test_sharp_jumps_have_full_support_and_intervals_within_a_layer():
    # each resample's fit may add a break where there is none at the calibrated rate (a few of 100 resamples), and a
    # break added one layer from a jump moves the merged boundary there: intervals within one layer, never wider
    b = summarise(fits_of(family_profiles(lens=[5, 22], similarity=[6, 23], spectrum=[12, 25])), LAYERS, 3, 100, 12)
    consensus = [x for x in b["intervals"] if x["family"] == "consensus"]
    assert [x["value"] for x in consensus] == [5, 12, 22, 25]
    for x in consensus:
        assert x["support"] == 1.0 and x["n"] == 100 and x["value"] - 1 <= x["ci_lo"] <= x["ci_hi"] <= x["value"] + 1
        assert x["moved"] <= 10
    assert {x["family"] for x in b["intervals"]} == {"lens", "similarity", "spectrum", "consensus"}
