"""measures.probe_controls and the rules probe_states builds on them: bag-of-tokens features counted by hand, the
surface baseline as the logistic probe's procedure, "decodable" only beyond the shallow readers (states equal to
the bag of tokens never are; a signal the tokens lack is, from its state on), and Hewitt & Liang's control task
(labels keyed to units by hand; a memorising probe scores on it where units recur; impossible where none do)."""

import numpy as np
import pytest

from layerscope.measures.probe_controls import (
    control_labels,
    control_recurrence,
    surface_baseline,
    surface_features,
)
from layerscope.measures.probe_fits import logreg_oof, nested_plan
from layerscope.measures.probe_folds import codes, fold_ids, group_codes
from layerscope.measures.probes import probe_states

FAST = dict(n_bootstrap=300, n_permutations=99, seed=0)


def test_surface_features_count_each_token_type_then_the_length():
    F = surface_features([[5, 3, 5], [3], [9, 9, 9, 5]])
    np.testing.assert_array_equal(F, [[1, 2, 0, 3], [1, 0, 0, 1], [0, 1, 3, 4]])  # types 3, 5, 9; then length


def texts(seed=0, n_groups=40, telling=True):
    """Two texts per group, one label per group; random tokens 0..19, and when ``telling`` each text of class 1
    (0) holds token 20 (21) with probability 0.7: a label the bag of tokens carries."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), 2)
    labels = (rng.permutation(n_groups) % 2)[groups]
    ids = []
    for label in labels:
        tokens = list(rng.integers(0, 20, size=rng.integers(5, 9)))
        if telling and rng.random() < 0.7:
            tokens.insert(int(rng.integers(0, len(tokens))), 20 if label else 21)
        ids.append(tokens)
    return ids, labels, groups


def test_the_surface_baseline_is_the_logistic_probe_on_the_features_in_probe_states_folds():
    ids, labels, groups = texts()
    F = surface_features(ids)
    surface = surface_baseline(F, labels, groups, folds=5, seed=3)
    y, g = codes(labels)[0], group_codes(groups)
    fold = fold_ids(labels, groups, folds=5, seed=3)
    pred, _, cs = logreg_oof(F, y, nested_plan(y, g, fold), 2)
    np.testing.assert_array_equal(surface.correct, pred == y)
    np.testing.assert_array_equal(surface.c, cs)
    np.testing.assert_array_equal(surface.fold, fold)
    profile = probe_states(F[:, None, :], labels, groups, method="logreg", folds=5, n_bootstrap=20,
                           n_permutations=9, seed=3)
    assert surface.accuracy == profile.accuracy[0] > 0.75
    with pytest.raises(ValueError, match="other rows or folds.*probe_states' labels, groups, folds and seed"):
        probe_states(F[:, None, :], labels, groups, surface=surface, n_bootstrap=20, n_permutations=9, seed=4)


@pytest.mark.parametrize("method", ["logreg", "mass_mean"])
def test_states_that_equal_the_bag_of_tokens_are_never_decodable(method):
    """State 0 noise, states 1 and 2 the token counts themselves: significant, far above state 0, but not above the
    bag of tokens (gain exactly 0 for the logistic probe, which is the baseline's procedure)."""
    ids, labels, groups = texts(seed=1)
    F = surface_features(ids)
    rng = np.random.default_rng(1)
    X = np.stack([rng.normal(size=F.shape), F, F], axis=1)
    surface = surface_baseline(F, labels, groups, folds=5, seed=0)
    profile = probe_states(X, labels, groups, method=method, folds=5, surface=surface, **FAST)
    assert profile.best_surface == "bag of tokens" and profile.surface_accuracy > 0.75
    assert np.all(profile.q[1:] < 0.05) and np.all(profile.accuracy[1:] - profile.accuracy[0] > 0.2)
    assert np.all(profile.gain_ci[:, 0] <= 0) and not profile.decodable.any() and profile.decodable_from is None
    if method == "logreg":
        assert np.all(profile.gain[1:] == 0) and np.all(profile.gain_ci[1:] == 0)


def planted_states(planted, seed=2):
    """Texts whose tokens carry no label; five states, the label on feature 0 (margin about 4) at ``planted``."""
    ids, labels, groups = texts(seed=seed, telling=False)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(len(labels), 5, 6))
    X[:, planted, 0] += 2 * (2 * labels[:, None] - 1)
    return X, labels, groups, surface_features(ids)


def test_a_signal_the_tokens_do_not_carry_is_decodable_from_the_planted_state():
    X, labels, groups, F = planted_states([2, 3, 4])
    surface = surface_baseline(F, labels, groups, folds=5, seed=0)
    profile = probe_states(X, labels, groups, method="logreg", folds=5, surface=surface, **FAST)
    assert abs(surface.accuracy - 0.5) < 0.2
    np.testing.assert_array_equal(profile.decodable, [False, False, True, True, True])
    assert profile.decodable_from == 2 and np.all(profile.gain_ci[2:, 0] > 0)


def test_decodable_from_is_the_first_state_from_which_every_state_is_decodable():
    X, labels, groups, F = planted_states([1, 3, 4])  # a gap at state 2
    surface = surface_baseline(F, labels, groups, folds=5, seed=0)
    profile = probe_states(X, labels, groups, method="mass_mean", folds=5, surface=surface, **FAST)
    np.testing.assert_array_equal(profile.decodable, [False, True, False, True, True])
    assert profile.decodable_from == 3
    without = probe_states(X, labels, groups, method="mass_mean", folds=5, **FAST)  # no surface: over state 0
    assert without.best_surface == "state 0" and np.isnan(without.surface_accuracy)
    np.testing.assert_array_equal(without.gain_ci[0], [0, 0])
    assert not without.decodable[0] and without.decodable_from == 3


def memorisable(n_units=16, rows_per_unit=8, seed=0):
    """Each unit its own random vector (plus noise) at both states; one row per group; real labels random, so
    independent of the units; every unit in several folds."""
    rng = np.random.default_rng(seed)
    units = np.repeat(np.arange(n_units), rows_per_unit)
    X = rng.normal(size=(n_units, 2, 24))[units] + 0.3 * rng.normal(size=(len(units), 2, 24))
    labels = rng.permutation(np.arange(len(units)) % 2)
    return X, labels, np.arange(len(units)), units


def test_a_memorising_probe_scores_on_the_control_task_where_units_recur():
    X, labels, groups, units = memorisable()
    profile = probe_states(X, labels, groups, method="logreg", folds=5, units=units, control_seeds=10, fixed_c=100.0,
                           **FAST)
    assert profile.control_possible and profile.control_recurrence == 1.0
    controls = control_labels(units, labels, seed=0, n_seeds=10)
    blind = np.mean([max(np.mean(c == 0), np.mean(c == 1)) for c in controls])  # the majority class, per seed
    assert np.all(profile.control_accuracy > 0.6) and np.all(profile.control_accuracy > blind + 0.15)
    assert np.all(profile.selectivity < 0) and np.all(profile.chosen_c == 100.0)  # real labels: not memorisable


def test_with_every_unit_unique_there_is_no_control_and_no_selectivity():
    X, labels, groups, _ = memorisable()
    profile = probe_states(X, labels, groups, method="logreg", folds=5, units=np.arange(len(labels)), **FAST)
    assert not profile.control_possible and profile.control_recurrence == 0.0
    for field in ("control_accuracy", "control_ci", "selectivity", "selectivity_ci"):
        assert np.isnan(getattr(profile, field)).all(), field
    none = probe_states(X, labels, groups, method="mass_mean", folds=5, **FAST)  # no units at all
    assert not none.control_possible and np.isnan(none.selectivity).all()


def test_control_labels_are_keyed_to_units_as_documented():
    rng = np.random.default_rng(5)
    units = rng.choice(["the", "a", "dog", "cat", "ran", "sat", "on"], size=60)
    labels = rng.choice(["x", "y", "z"], size=60, p=[0.5, 0.3, 0.2])
    got = control_labels(units, labels, seed=7, n_seeds=4)
    names = sorted(set(units))
    shares = np.array([[np.mean(labels[units == u] == c) for c in ("x", "y", "z")] for u in names])
    proportions = shares.mean(axis=0)  # the task's class proportions, each unit counted once
    streams = np.random.SeedSequence(7).spawn(3)[0].spawn(4)
    for k in range(4):
        drawn = np.random.default_rng(streams[k]).choice(3, size=len(names), p=proportions)
        expected = np.array([("x", "y", "z")[drawn[names.index(u)]] for u in units])
        np.testing.assert_array_equal(got[k], expected)
    assert len({tuple(row) for row in got}) == 4


def test_control_recurrence_counts_rows_whose_unit_is_in_another_fold():
    assert control_recurrence(["a", "a", "b", "b", "c"], [0, 1, 0, 0, 1]) == pytest.approx(2 / 5)
    assert control_recurrence([1, 2, 3], [0, 1, 2]) == 0.0
