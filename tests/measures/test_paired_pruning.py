"""measures.paired and measures.pruning against loops written from the definitions: exact sign-flip and
placement p-values by enumeration, pruning rules on planted profiles, angular distances by a double loop."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from layerscope.measures.paired import group_difference, paired_effects, placement_test, rank_sum_p
from layerscope.measures.pruning import angular_distances, closest_block, lowest_influence, random_sets


def test_sign_flip_p_is_the_exact_share_of_sign_patterns_when_few():
    rng = np.random.default_rng(1)
    diffs = rng.normal(0.3, 1.0, size=(3, 6))
    mean, lo, hi, p = paired_effects(diffs, n_boot=500, n_perm=1000, seed=0)  # 2^6 = 64 <= 1000: exact
    for row, p_row in zip(diffs, p, strict=True):
        observed = abs(row.mean())
        count = sum(abs(np.mean(np.array(s) * row)) >= observed - 1e-12
                    for s in itertools.product((1, -1), repeat=len(row)))
        assert p_row == pytest.approx(count / 64)
    np.testing.assert_allclose(mean, diffs.mean(axis=1))
    assert np.all(lo <= mean) and np.all(mean <= hi)


def test_sign_flip_p_is_small_for_a_planted_shift_and_large_without_one():
    rng = np.random.default_rng(2)
    shifted = rng.normal(1.0, 0.2, size=40)
    centred = rng.normal(0.0, 1.0, size=40)
    centred -= centred.mean()  # mean exactly 0: every sign pattern is at least as extreme
    _, lo, hi, p = paired_effects(np.stack([shifted, centred]), n_boot=1000, n_perm=2000, seed=0)
    assert p[0] == pytest.approx(1 / 2001)
    assert p[1] == pytest.approx(1.0)
    assert lo[0] > 0.8 and hi[0] < 1.2  # the mean 1.0 +- 3 standard errors (0.2 / sqrt(40) = 0.03)


def test_bootstrap_interval_of_a_constant_is_the_constant():
    _, lo, hi, _ = paired_effects(np.full((1, 10), 0.25), n_boot=200, n_perm=200, seed=0)
    assert lo[0] == pytest.approx(0.25) and hi[0] == pytest.approx(0.25)


def test_placement_p_counts_every_placement_when_few():
    costs = np.array([9.0, 0.1, 0.2, 3.0, 0.1, 0.3, 2.5, 0.2, 0.1, 8.0])
    candidates = range(1, 9)  # the first and last are left out
    effect, p, n = placement_test(costs, [3, 6], candidates, n_perm=1000, seed=0)
    inner = costs[1:9]
    assert effect == pytest.approx(np.mean([3.0, 2.5]) - np.mean([0.1, 0.2, 0.1, 0.3, 0.2, 0.1]))
    assert n == math.comb(8, 2)
    assert p == pytest.approx(1 / 28)  # the planted pair is the single most extreme placement
    # No effect: every cost equal -> every placement ties with the observed one.
    _, p_flat, _ = placement_test(np.ones(10), [3, 6], candidates, n_perm=1000, seed=0)
    assert p_flat == pytest.approx(1.0)
    # A reference count by brute force for a middling choice.
    effect, p, _ = placement_test(costs, [2, 5], candidates, n_perm=1000, seed=0)
    count = 0
    for pair in itertools.combinations(range(8), 2):
        rest = [inner[i] for i in range(8) if i not in pair]
        count += np.mean(inner[list(pair)]) - np.mean(rest) >= effect - 1e-12
    assert p == pytest.approx(count / 28)


def test_placement_p_by_sampling_when_placements_are_many():
    rng = np.random.default_rng(3)
    costs = rng.normal(0, 0.1, size=40)
    costs[[10, 20, 30]] += 5.0
    _, p, n = placement_test(costs, [10, 20, 30], range(1, 39), n_perm=500, seed=0)
    assert n == 500 and p == pytest.approx(1 / 501)
    with pytest.raises(ValueError, match="proper subset"):
        placement_test(costs, [0], range(1, 39), n_perm=100, seed=0)


def test_group_difference_is_the_difference_of_group_means_with_a_permutation_p():
    rng = np.random.default_rng(4)
    low = np.array([True] * 12 + [False] * 12)
    values = np.stack([np.where(low, 2.0, 0.0) + rng.normal(0, 0.1, 24), rng.normal(0, 1, 24)])
    diff, lo, hi, p = group_difference(values, low, n_boot=500, n_perm=999, seed=0)
    np.testing.assert_allclose(diff, values[:, low].mean(axis=1) - values[:, ~low].mean(axis=1))
    assert p[0] == pytest.approx(1 / 1000) and p[1] > 0.01
    assert lo[0] < diff[0] < hi[0]


def test_lowest_influence_and_closest_block_on_planted_profiles():
    influence = np.array([0.9, 0.05, 0.4, 0.02, 0.3, 0.01, 0.5])
    assert lowest_influence(influence, 1) == (5,)
    assert lowest_influence(influence, 3) == (1, 3, 5)
    # Last-token states at depths 0..6: depths 2, 3, 4 are the same vector, so blocks 2 and 3 change nothing.
    rng = np.random.default_rng(5)
    states = rng.normal(size=(4, 7, 16))
    states[:, 3] = states[:, 2]
    states[:, 4] = states[:, 2]
    angular = angular_distances(states)
    assert closest_block(angular, 2) == (2, 3)
    assert closest_block(angular, 1) == (2,)  # the tie between blocks 2 and 3 goes to the lower
    with pytest.raises(ValueError, match="k must be in 1..6"):
        closest_block(angular, 7)


def test_angular_distances_equal_a_double_loop():
    rng = np.random.default_rng(6)
    states = rng.normal(size=(5, 4, 8))
    out = angular_distances(states)
    for i in range(4):
        for j in range(4):
            cosines = [float(a[i] @ a[j] / np.linalg.norm(a[i]) / np.linalg.norm(a[j])) for a in states]
            want = np.mean([math.acos(max(-1.0, min(1.0, c))) / math.pi for c in cosines]) if i != j else 0.0
            assert out[i, j] == pytest.approx(want, abs=1e-12)


def test_random_sets_are_seeded_uniform_and_nested_over_k():
    a = random_sets(10, [1, 3, 5], 25, np.random.default_rng(7))
    assert a == random_sets(10, [1, 3, 5], 25, np.random.default_rng(7))
    assert all(len(a[k]) == 25 for k in (1, 3, 5))
    for k in (1, 3, 5):
        assert all(len(set(s)) == k and list(s) == sorted(s) and 0 <= s[0] and s[-1] < 10 for s in a[k])
    assert all(set(a[1][d]) <= set(a[3][d]) <= set(a[5][d]) for d in range(25))  # nested within a draw
    many = random_sets(10, [3], 6000, np.random.default_rng(8))[3]
    counts = np.bincount([x for s in many for x in s], minlength=10)
    assert counts.min() > 0.9 * 1800 and counts.max() < 1.1 * 1800  # each block in 3/10 of the draws
    pairs = Counter(many)  # each of the C(10, 3) = 120 sets about 6000 / 120 = 50 times
    assert len(pairs) == 120 and min(pairs.values()) > 20 and max(pairs.values()) < 90


def test_rank_sum_p_equals_enumerating_every_rank_combination():
    sizes, ranks = [4, 3, 5], [1, 2, 1]
    combos = list(itertools.product(*[range(1, s + 1) for s in sizes]))
    want = sum(sum(c) <= sum(ranks) for c in combos) / len(combos)
    assert rank_sum_p(ranks, sizes) == pytest.approx(want)
    assert rank_sum_p([1] * 7, [21] * 7) == pytest.approx(21.0 ** -7)  # cheapest at every k of 20 draws
    assert rank_sum_p([21] * 3, [21] * 3) == pytest.approx(1.0)
