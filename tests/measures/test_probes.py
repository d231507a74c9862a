"""measures.probes (and the batched logistic regression behind its permutation nulls) against values computed
here from the definitions: mass-mean probes by a plain loop over folds rebuilt with scikit-learn's splitter, AUROC by
scikit-learn and by the rank-sum formula, control tasks by counting, plateau_from on hand-made profiles."""

import dataclasses

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

from layerscope.measures import probe_fits
from layerscope.measures.batched_logistic import fit_batched
from layerscope.measures.probe_folds import auroc
from layerscope.measures.probes import (
    control_labels,
    fold_ids,
    plateau_from,
    probe_states,
)

FAST = dict(n_bootstrap=200, n_permutations=99, seed=0)


def hand_mass_mean(x, labels, folds):
    """Out-of-fold mass-mean predictions and scores by a loop: x (n, d), labels (n,) of str, folds [(train, test)]."""
    classes = sorted(set(labels))
    labels = np.asarray(labels)
    pred = np.empty(len(labels), dtype=object)
    scores = np.empty(len(labels)) if len(classes) == 2 else np.empty((len(labels), len(classes)))
    for train, test in folds:
        means = [x[train][labels[train] == c].mean(axis=0) for c in classes]
        for i in test:
            if len(classes) == 2:
                w = means[1] - means[0]
                threshold = w @ (means[0] + means[1]) / 2
                scores[i] = w @ x[i] - threshold
                pred[i] = classes[1] if w @ x[i] > threshold else classes[0]
            else:
                distances = [np.sqrt(((x[i] - mu) ** 2).sum()) for mu in means]
                scores[i] = [-dist for dist in distances]
                pred[i] = classes[int(np.argmin(distances))]
    return pred, scores


def rank_sum_auroc(scores, positive):
    ranks = rankdata(scores)  # midranks for ties
    n1, n0 = positive.sum(), (~positive).sum()
    return (ranks[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)


def test_mass_mean_accuracy_and_auroc_equal_a_hand_computation_on_two_folds():
    rng = np.random.default_rng(3)
    labels = np.array(["no", "yes"] * 6)
    groups = [f"g{i}" for i in range(12)]
    X = rng.normal(size=(12, 2, 3)) + 0.8 * (labels == "yes")[:, None, None]
    folds = list(StratifiedGroupKFold(n_splits=2, shuffle=True, random_state=0).split(X, labels, groups))
    profile = probe_states(X, labels, groups, method="mass_mean", folds=2, **FAST)
    for s in range(2):
        pred, scores = hand_mass_mean(X[:, s], labels, folds)
        assert profile.accuracy[s] == pytest.approx(np.mean(pred == labels))
        positive = labels == "yes"  # the second of the sorted classes
        assert profile.auroc[s] == pytest.approx(roc_auc_score(positive, scores))
        assert profile.auroc[s] == pytest.approx(rank_sum_auroc(scores, positive))
    assert profile.classes == ("no", "yes") and profile.chance == 0.5 and profile.n_groups == 12


def test_mass_mean_with_three_classes_is_the_nearest_class_mean_and_macro_auroc():
    rng = np.random.default_rng(4)
    labels = np.array(["a", "b", "c"] * 10)
    X = rng.normal(size=(30, 1, 4)) + np.eye(4)[np.searchsorted(["a", "b", "c"], labels)][:, None, :]
    folds = list(StratifiedGroupKFold(n_splits=3, shuffle=True, random_state=0).split(X, labels, np.arange(30)))
    profile = probe_states(X, labels, np.arange(30), method="mass_mean", folds=3, **FAST)
    pred, scores = hand_mass_mean(X[:, 0], labels, folds)
    assert profile.accuracy[0] == pytest.approx(np.mean(pred == labels))
    macro = np.mean([roc_auc_score(labels == c, scores[:, k]) for k, c in enumerate("abc")])
    assert profile.auroc[0] == pytest.approx(macro)


def planted(seed=0, n_groups=30):
    """Two rows per group, one label per group; state 0 noise, states 1 and 2 separable along feature 0."""
    rng = np.random.default_rng(seed)
    group_labels = np.array([0, 1] * (n_groups // 2))
    groups = np.repeat(np.arange(n_groups), 2)
    labels = group_labels[groups]
    X = rng.normal(size=(len(labels), 3, 8))
    X[:, 1:, 0] = (2 * labels[:, None] - 1) * (3 + rng.random((len(labels), 2)))  # margin 6 on feature 0
    return X, labels, groups


@pytest.mark.parametrize("method", ["mass_mean", "logreg"])
def test_a_planted_signal_is_found_and_noise_is_not(method):
    X, labels, groups = planted()
    profile = probe_states(X, labels, groups, method=method, folds=5, **FAST)
    assert profile.chance == 0.5 and profile.n == 60 and profile.n_groups == 30
    assert profile.accuracy[1] == 1.0 and profile.accuracy[2] == 1.0
    assert profile.q[1] < 0.05 and profile.p[1] == pytest.approx(1 / 100)  # no permutation reaches 1
    assert abs(profile.accuracy[0] - 0.5) < 0.2
    assert profile.accuracy_ci[0, 0] <= 0.5 <= profile.accuracy_ci[0, 1]
    assert profile.p[0] > 0.05
    assert profile.auroc[1] == 1.0 and profile.auroc_ci[1, 0] == 1.0
    assert profile.decodable_from == 1 and profile.plateau_from == 1 and profile.plateau_ci == (1, 1)
    assert profile.p_floor == 1 / 100 and list(profile.at_floor) == [False, True, True]
    assert np.isnan(profile.chosen_c).all() if method == "mass_mean" else set(profile.chosen_c) <= set(probe_fits.CS)
    low, high = profile.accuracy_ci.T
    assert np.all(low <= profile.accuracy) and np.all(profile.accuracy <= high)


def test_folds_never_split_a_group_and_are_scikit_learns():
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 25, size=100)
    labels = (groups % 2).astype(str)  # one label per group: StratifiedGroupKFold
    fold = fold_ids(labels, groups, folds=5, seed=7)
    for g in np.unique(groups):
        assert len(set(fold[groups == g])) == 1
    expected = np.empty(100, dtype=int)
    for f, (_, test) in enumerate(StratifiedGroupKFold(5, shuffle=True, random_state=7).split(groups, labels, groups)):
        expected[test] = f
    np.testing.assert_array_equal(fold, expected)
    assert sorted(set(fold)) == [0, 1, 2, 3, 4]


def test_pairs_with_two_labels_in_a_group_use_group_kfold():
    groups = np.repeat(np.arange(20), 2)
    labels = np.array(["A", "B"] * 20)
    fold = fold_ids(labels, groups, folds=4, seed=1)
    expected = np.empty(40, dtype=int)
    for f, (_, test) in enumerate(GroupKFold(4, shuffle=True, random_state=1).split(groups, labels, groups)):
        expected[test] = f
    np.testing.assert_array_equal(fold, expected)
    assert all(fold[2 * i] == fold[2 * i + 1] for i in range(20))


def test_selectivity_is_accuracy_less_the_control_accuracy():
    X, labels, groups = planted(seed=1)
    units = groups % 6  # each unit spans five groups: it recurs across folds
    profile = probe_states(X, labels, groups, method="mass_mean", folds=5, units=units, **FAST)
    controls = control_labels(units, labels, seed=0, n_seeds=10).astype(str)  # (10, n), in the real task's folds
    fold = fold_ids(labels, groups, folds=5, seed=0)
    folds = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(5)]
    for s in range(3):
        hits = [np.mean(hand_mass_mean(X[:, s], control, folds)[0] == control) for control in controls]
        assert profile.control_accuracy[s] == pytest.approx(np.mean(hits))
    np.testing.assert_allclose(profile.selectivity, profile.accuracy - profile.control_accuracy)
    assert profile.selectivity[1] > 0.3 and profile.selectivity_ci[1, 0] > 0


def test_pairs_run_end_to_end_with_within_pair_permutations():
    rng = np.random.default_rng(6)
    pairs = np.repeat(np.arange(20), 2)
    sides = np.array(["A", "B"] * 20)
    X = rng.normal(size=(40, 2, 5))
    X[:, 1, 0] = np.where(sides == "B", 3.0, -3.0) + rng.random(40)  # separable on feature 0
    profile = probe_states(X, sides, pairs, method="mass_mean", folds=4, units=pairs % 5, **FAST)
    assert profile.accuracy[1] == 1.0 and profile.q[1] < 0.05 and profile.p[0] > 0.05
    assert profile.control_accuracy[1] < 0.9


def test_logreg_chooses_c_from_the_training_fold_only(monkeypatch):
    X, labels, groups = planted(seed=2)
    seen = []
    row_space = probe_fits._row_space

    def spy(x, train, test):
        seen.append((frozenset(train), frozenset(test)))
        return row_space(x, train, test)

    monkeypatch.setattr(probe_fits, "_row_space", spy)
    probe_states(X, labels, groups, method="logreg", folds=5, n_bootstrap=10, n_permutations=9, n_jobs=1)
    fold = fold_ids(labels, groups, folds=5, seed=0)
    training = [frozenset(np.flatnonzero(fold != f)) for f in range(5)]
    testing = [frozenset(np.flatnonzero(fold == f)) for f in range(5)]
    assert len(seen) == 3 * 20  # per state 5 folds x 3 inner splits, then 5 refits
    for state in range(3):  # every inner split (train and test) inside one fold's training rows, then the refits
        inner, outer = seen[20 * state:20 * state + 15], seen[20 * state + 15:20 * (state + 1)]
        assert all(tr | te <= training[f] and not tr & te for f in range(5) for tr, te in inner[3 * f:3 * f + 3])
        assert outer == list(zip(training, testing, strict=True))  # each training fold, predicting its test fold


def test_weighted_auroc_equals_scikit_learn_with_sample_weights_and_ties():
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 6, size=40).astype(float)  # many ties
    y = rng.integers(0, 2, size=40)
    weights = rng.integers(0, 3, size=(5, 40)).astype(float)
    got = auroc(scores, y, weights)
    for b in range(5):
        assert got[b] == pytest.approx(roc_auc_score(y, scores, sample_weight=weights[b]))
    assert np.isnan(auroc(scores, y, (y == 1)[None, :].astype(float))[0])  # one class: undefined


@pytest.mark.parametrize("n_classes", [2, 3])
def test_batched_fit_equals_scikit_learns_logistic_regression(n_classes):
    rng = np.random.default_rng(8)
    z = rng.normal(size=(50, 6))
    Y = rng.integers(0, n_classes, size=(3, 50))
    z[:, 0] += Y[0]
    keep = rng.random((3, 50)) < 0.8  # training rows: weight 1; the rest left out with weight 0
    theta = fit_batched(z, Y, c=0.5, n_classes=n_classes, weights=keep.astype(float), tol=1e-8)
    for p in range(3):
        model = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000).fit(z[keep[p]], Y[p, keep[p]])
        np.testing.assert_allclose(theta[p, :-1].T, model.coef_, atol=1e-5)
        np.testing.assert_allclose(theta[p, -1], model.intercept_, atol=1e-5)


def test_plateau_from_on_hand_made_profiles():
    def ci(accuracy, low_at_best):
        out = np.stack([np.asarray(accuracy) - 0.2, np.asarray(accuracy) + 0.05], axis=1)
        out[int(np.argmax(accuracy)), 0] = low_at_best
        return out

    rising = [0.5, 0.6, 0.9, 0.95, 0.93]
    assert plateau_from(rising, rising, ci(rising, 0.9)) == 2
    dips = [0.5, 0.9, 0.95, 0.7, 0.92, 0.94]  # the dip after the maximum pushes s past it
    assert plateau_from(dips, dips, ci(dips, 0.9)) == 4
    falls = [0.5, 0.95, 0.6]  # the last state falls below: nothing qualifies
    assert plateau_from(falls, falls, ci(falls, 0.9)) is None
    flat = [0.7, 0.7, 0.7]
    assert plateau_from(flat, flat, ci(flat, 0.6)) == 0
    # a resample's profile: its own maximum (0.85) less the original margin (0.95 - 0.9)
    assert plateau_from([0.4, 0.8, 0.85], [0.5, 0.9, 0.95], ci([0.5, 0.9, 0.95], 0.9)) == 1
    assert plateau_from([0.4, 0.79, 0.85], [0.5, 0.9, 0.95], ci([0.5, 0.9, 0.95], 0.9)) == 2


@pytest.mark.parametrize("change, message", [
    (lambda X, y, g: (X, np.zeros_like(y), g), "at least two classes"),
    (lambda X, y, g: (X, y, g % 8), "at least 2 \\* folds groups, so lower folds"),
    (lambda X, y, g: (X, np.where(g < 3, 1, 0), g), "class '1' is in 3 groups, fewer than folds=5.*add groups"),
    (lambda X, y, g: (X[:, 0], y, g), "3-D float array"),
    (lambda X, y, g: (X, y[:-1], g), "one label and one group per row"),
    (lambda X, y, g: (np.where(np.arange(60)[:, None, None] == 7, np.nan, X), y, g), "row 7.*finite"),
])
def test_bad_input_is_refused_with_the_fix(change, message):
    X, labels, groups = planted()
    X, labels, groups = change(X, labels, groups)
    with pytest.raises(ValueError, match=message):
        probe_states(X, labels, groups, method="mass_mean", folds=5, **FAST)


def planted_from_state_3(seed=0, n_groups=40):
    """Six states, two rows per group, one label per group: states 0-2 pure noise, states 3-5 the label linearly
    encoded on feature 0 (margin 6)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), 2)
    labels = np.array([0, 1] * (n_groups // 2))[groups]
    X = rng.normal(size=(len(labels), 6, 8))
    X[:, 3:, 0] = (2 * labels[:, None] - 1) * (3 + rng.random((len(labels), 3)))
    return X, labels, groups


@pytest.mark.parametrize("method", ["mass_mean", "logreg"])
def test_a_label_encoded_from_state_3_on_is_decodable_from_3_and_the_control_cannot_be_memorised(method):
    X, labels, groups = planted_from_state_3()
    units = groups // 2  # two groups (one of each label) per unit, the states carry no trace of the units
    profile = probe_states(X, labels, groups, method=method, folds=5, units=units, **FAST)
    assert profile.decodable_from == 3 and profile.plateau_from == 3 and profile.plateau_ci is not None
    assert profile.plateau_ci[0] <= 3 <= profile.plateau_ci[1]
    assert np.all(profile.accuracy[3:] == 1.0) and np.all(profile.q[3:] < 0.05)
    # Hewitt & Liang's control: nothing to memorise, so it stays near chance (below it where the real label, which
    # its units mix, dominates the features: a unit's training and test rows differ in it) and selectivity is high
    assert profile.control_possible and np.all(profile.control_ci[:, 1] < 0.7), profile.control_ci
    assert np.all(profile.selectivity_ci[3:, 0] > 0.3) and np.all(profile.selectivity_ci[:3, 0] < 0)


def test_the_permutation_p_on_pure_noise_is_spread_like_a_uniform():
    """20 seeds of noise features with shuffled balanced labels: a valid permutation p falls below 0.05 about once
    in 20; it must stay above 0.05 for at least 16 of them, and not be one value (a degenerate null)."""
    ps = []
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        labels = rng.permutation(np.array(["a", "b"] * 15))
        X = rng.normal(size=(30, 1, 4))
        profile = probe_states(X, labels, np.arange(30), method="mass_mean", folds=3, n_bootstrap=20,
                               n_permutations=50, seed=seed)
        ps.append(float(profile.p[0]))
    assert sum(p > 0.05 for p in ps) >= 16, ps
    assert len(set(ps)) > 1 and all(1 / 51 <= p <= 1 for p in ps), ps


def test_the_profile_does_not_depend_on_the_worker_count():
    X, labels, groups = planted_from_state_3(seed=1)
    kw = dict(method="logreg", folds=5, units=groups // 2, **FAST)
    one, two = probe_states(X, labels, groups, n_jobs=1, **kw), probe_states(X, labels, groups, n_jobs=2, **kw)
    for field in dataclasses.fields(one):
        a, b = getattr(one, field.name), getattr(two, field.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            assert a == b or (a != a and b != b), field.name  # NaN equals NaN here
