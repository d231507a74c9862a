"""The atlas's phase boundaries on synthetic profiles with known breaks (worked out by hand): one vote per family,
L* compared without the top-1 share's family, fragile boundaries and massive-driven families."""

import numpy as np

from layerscope.measures.boundaries import bootstrap_boundaries
from layerscope.studies.atlas.boundaries import FAMILIES, summarise, tolerance

LAYERS = list(range(31))


def three_lines(n: int, first: int, second: int, slopes=(0.1, 0.3, -0.2), jumps=(5.0, -4.0)) -> np.ndarray:
    """(n,) a profile made of three straight lines that start at index 0, ``first`` and ``second``, with a jump at
    each start so that no other cut fits as well (a continuous kink would tie with the cut one layer later)."""
    x = np.arange(n, dtype=float)
    return np.where(x < first, slopes[0] * x,
                    np.where(x < second, jumps[0] + slopes[1] * (x - first), jumps[1] + slopes[2] * (x - second)))


def family_profiles(lens, similarity, spectrum, n=31):
    """One measure per family (plus the top-1 share in the spectrum family), breaks as given; 3 identical rows
    (the full data and two resamples)."""
    def rows(breaks):
        return np.tile(three_lines(n, *breaks), (3, 1))
    return {"lens_kl": (LAYERS[:n], rows(lens)), "block_influence": (LAYERS[:n], rows(similarity)),
            "top1_ratio": (LAYERS[:n], rows(spectrum)), "norm": (LAYERS[:n], rows(spectrum))}


def fits_of(default, **variants):
    return {"default": bootstrap_boundaries(default, FAMILIES, 3),
            **{v: bootstrap_boundaries(variants.get(v, default), FAMILIES, 3)
               for v in ("excl_massive", "no_layer0", "min_segment_3")}}


def test_tolerance_is_a_tenth_of_the_depth_rounded_and_at_least_one():
    # by hand: 31 -> 3.1 -> 3; 30 -> 3; 18 -> 1.8 -> 2; 12 -> 1.2 -> 1; 6 -> 0.6 -> 1; 4 -> 0.4 -> 0 -> at least 1
    assert [tolerance(n) for n in (31, 30, 18, 12, 6, 4)] == [3, 3, 2, 1, 1, 1]


def test_l_star_is_compared_without_the_family_of_the_top1_share():
    profiles = family_profiles(lens=(5, 22), similarity=(6, 23), spectrum=(12, 25))
    b = summarise(fits_of(profiles), LAYERS, 3, 2, l_star=12)
    assert b["per_metric"]["top1_ratio"] == [12, 25]  # its own break is the jump that defines L*
    assert b["per_family"] == {"lens": [5, 22], "similarity": [6, 23], "spectrum": [12, 25]}
    assert b["consensus"] == [6, 23]  # lower median of (5, 6, 12) and of (22, 23, 25)
    assert b["l_star_families"] == ["lens", "similarity"]
    assert b["l_star_consensus"] == [5, 22]  # lower median of two: the smaller
    assert b["l_star_distance"] == 7  # |12 - 5|, not 0 as against the top-1 share's own break
    assert b["thirds"] == [10, 20] and b["thirds_distance"] == [4, 3]  # |6 - 10|, |23 - 20|


def test_a_boundary_that_moves_under_a_check_is_fragile_and_its_family_massive_driven():
    default = family_profiles(lens=(10, 20), similarity=(10, 20), spectrum=(10, 20))
    without_sink = family_profiles(lens=(10, 20), similarity=(10, 27), spectrum=(11, 27))
    b = summarise(fits_of(default, excl_massive=without_sink), LAYERS, 3, 2, l_star=10)
    assert b["consensus"] == [10, 20] and b["variants"]["excl_massive"]["consensus"] == [10, 27]
    assert b["moved"][0] == {"excl_massive": 0, "no_layer0": 0, "min_segment_3": 0}
    assert b["moved"][1]["excl_massive"] == 7
    assert b["fragile"] == [False, True]
    assert b["massive_driven"] == ["similarity", "spectrum"]  # lens did not move; spectrum's 2nd moved by 7
    steady = summarise(fits_of(default), LAYERS, 3, 2, l_star=10)
    assert steady["fragile"] == [False, False] and steady["massive_driven"] == []


def test_every_interval_of_identical_resamples_is_a_point_with_full_support():
    b = summarise(fits_of(family_profiles(lens=(5, 22), similarity=(6, 23), spectrum=(12, 25))), LAYERS, 3, 2, 12)
    consensus = [x for x in b["intervals"] if x["family"] == "consensus"]
    assert [(x["value"], x["ci_lo"], x["ci_hi"], x["support"], x["n"]) for x in consensus] == [
        (6, 6, 6, 1.0, 2), (23, 23, 23, 1.0, 2)]
    assert {x["family"] for x in b["intervals"]} == {"lens", "similarity", "spectrum", "consensus"}
