"""measures.probe_folds and the resampling probe_states does with it: the group bootstrap (an interval recomputed
by hand from the documented seed spawn; rows duplicated within their groups leave every interval unchanged) and
the decodable run on hand-made masks."""

import numpy as np
import pytest

from layerscope.measures.probe_folds import decodable_start, fold_ids
from layerscope.measures.probes import control_labels, probe_states


def hand_mass_mean_hits(x, labels, fold):
    """Out-of-fold hits of the two-class mass-mean probe by a loop: x (n, d), labels (n,) 0/1, fold (n,)."""
    hits = np.empty(len(labels), dtype=bool)
    for f in np.unique(fold):
        train, test = fold != f, fold == f
        mu0, mu1 = x[train & (labels == 0)].mean(axis=0), x[train & (labels == 1)].mean(axis=0)
        w = mu1 - mu0
        hits[test] = (x[test] @ w > w @ (mu0 + mu1) / 2) == (labels[test] == 1)
    return hits


def grouped(seed=0, n_groups=30, size=3):
    """Groups of ``size`` rows with one label each; the label on feature 0 at state 1 (with noise), state 0 noise;
    units: group // 3, so each unit spans three groups."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), size)
    labels = (rng.permutation(n_groups) % 2)[groups]
    X = rng.normal(size=(len(groups), 2, 5))
    X[:, 1, 0] += 1.2 * (2 * labels - 1)
    return X, labels, groups, groups // 3


def test_the_intervals_are_the_documented_paired_group_bootstrap():
    """accuracy_ci, gain_ci (over state 0) and selectivity_ci recomputed from hand-made hits, every statistic of a
    difference on the same resample of groups (paired), the resamples drawn as the module docstring says."""
    X, labels, groups, units = grouped()
    seed, B = 4, 300
    profile = probe_states(X, labels, groups, method="mass_mean", folds=5, n_bootstrap=B, n_permutations=9, seed=seed,
                           units=units, control_seeds=3)
    fold = fold_ids(labels, groups, folds=5, seed=seed)
    hits = [hand_mass_mean_hits(X[:, s], labels, fold) for s in (0, 1)]
    controls = control_labels(units, labels, seed=seed, n_seeds=3)
    control_hits = np.mean([hand_mass_mean_hits(X[:, 1], c, fold) for c in controls], axis=0)
    assert profile.accuracy[1] == hits[1].mean()
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])  # the third stream: the group resamples
    draws = rng.integers(0, 30, size=(B, 30))                               # 30 groups drawn per resample
    rows = [np.concatenate([np.flatnonzero(groups == d) for d in row]) for row in draws]
    accuracy = np.array([[h[r].mean() for h in hits] for r in rows])        # (B, 2)
    control = np.array([control_hits[r].mean() for r in rows])

    def ci(samples):
        return np.percentile(samples, [2.5, 97.5])

    np.testing.assert_allclose(profile.accuracy_ci[1], ci(accuracy[:, 1]), rtol=1e-12)
    np.testing.assert_allclose(profile.gain_ci[1], ci(accuracy[:, 1] - accuracy[:, 0]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(profile.selectivity_ci[1], ci(accuracy[:, 1] - control), rtol=1e-12, atol=1e-15)


def test_rows_duplicated_within_their_groups_leave_every_interval_unchanged():
    """The resampled unit is the group: doubling each row inside its group (same group ids, same seed) changes no
    resample, so accuracy_ci, gain_ci and selectivity_ci stay exactly the same (resampling rows would narrow them)."""
    X, labels, groups, units = grouped(seed=1)
    twice = [np.repeat(a, 2, axis=0) for a in (X, labels, groups, units)]
    np.testing.assert_array_equal(np.repeat(fold_ids(labels, groups), 2), fold_ids(twice[1], twice[2]))
    kw = dict(method="mass_mean", folds=5, n_bootstrap=400, n_permutations=49, seed=2)
    one, two = probe_states(X, labels, groups, units=units, **kw), probe_states(*twice[:3], units=twice[3], **kw)
    assert one.control_possible and two.control_possible
    for field in ("accuracy_ci", "gain_ci", "selectivity_ci", "control_ci"):
        np.testing.assert_array_equal(getattr(one, field), getattr(two, field), err_msg=field)
    assert one.gain_ci[1, 0] > 0 and one.decodable[1] and not one.decodable[0]


@pytest.mark.parametrize("mask, first", [
    ([False, True, False, True, True], 3),   # a gap: the run from 3 on counts
    ([True, True, True], 0),
    ([False, False, True], 2),
    ([True, True, False], None),             # the last state is not decodable
    ([False, False, False], None),
])
def test_decodable_start_is_the_first_state_of_the_final_run(mask, first):
    assert decodable_start(np.array(mask)) == first
