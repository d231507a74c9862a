"""measures.probe_fits against scikit-learn run by hand: the nested C search and refit (a loop written here with
GroupKFold, StandardScaler and LogisticRegression), the row-space solve against the full-space fit, the
standardiser against StandardScaler, and the three-class fallback."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from layerscope.measures import probe_fits
from layerscope.measures.batched_logistic import fit_batched
from layerscope.measures.probe_fits import CS, logreg_oof, nested_plan, standardiser
from layerscope.measures.probe_folds import codes, fold_ids, group_codes
from layerscope.measures.probes import probe_states


def weak_pairs(seed=0, n_pairs=60, d=20, strength=(0.0, 0.35, 0.7)):
    """Pairs (A, B) of rows that share a pair vector; side B is pushed along a planted unit direction per state,
    with noise: accuracy about 0.5, 0.6 and 0.7 at the three states, where C matters."""
    rng = np.random.default_rng(seed)
    pair = rng.normal(size=(n_pairs, len(strength), d))
    w = rng.normal(size=(len(strength), d))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    side = np.tile([-1.0, 1.0], n_pairs)
    X = np.repeat(pair, 2, axis=0) + 0.6 * rng.normal(size=(2 * n_pairs, len(strength), d))
    X += side[:, None, None] * np.asarray(strength)[None, :, None] * w[None]
    return X, np.where(side > 0, "B", "A"), np.repeat(np.arange(n_pairs), 2)


def hand_nested_cv(x, labels, groups, seed, folds=5):
    """scikit-learn's nested CV by hand: GroupKFold(shuffle) outer splits (pairs hold both labels), inner
    GroupKFold(3), StandardScaler per split, the C of CS with the most inner hits (ties: the smaller), refit."""
    pred, chosen = np.empty(len(labels), dtype=object), []
    for train, test in GroupKFold(folds, shuffle=True, random_state=seed).split(x, labels, groups):
        hits = np.zeros(len(CS))
        for tr, te in GroupKFold(3).split(x[train], labels[train], groups[train]):
            scaler = StandardScaler().fit(x[train][tr])
            for i, c in enumerate(CS):
                model = LogisticRegression(C=c, max_iter=1000).fit(scaler.transform(x[train][tr]), labels[train][tr])
                hits[i] += np.sum(model.predict(scaler.transform(x[train][te])) == labels[train][te])
        chosen.append(CS[int(np.argmax(hits))])
        scaler = StandardScaler().fit(x[train])
        model = LogisticRegression(C=chosen[-1], max_iter=1000).fit(scaler.transform(x[train]), labels[train])
        pred[test] = model.predict(scaler.transform(x[test]))
    return pred, np.array(chosen)


@pytest.fixture(autouse=True)
def one_blas_thread():
    """scikit-learn's small fits run faster on one thread, the more so on a busy machine."""
    with threadpool_limits(limits=1):
        yield


@pytest.mark.parametrize("seed", [0, 1])
def test_the_logistic_probe_equals_a_hand_nested_cv_on_a_weak_signal(seed):
    X, labels, groups = weak_pairs(seed)
    profile = probe_states(X, labels, groups, method="logreg", folds=5, n_bootstrap=20, n_permutations=9, seed=seed)
    y, g = codes(labels)[0], group_codes(groups)
    plan = nested_plan(y, g, fold_ids(labels, groups, folds=5, seed=seed))
    varied = set()
    for s in range(3):
        pred, chosen = hand_nested_cv(X[:, s], labels, groups, seed)
        ours, _, cs = logreg_oof(X[:, s].astype(np.float64), y, plan, 2)
        np.testing.assert_array_equal(np.array(["A", "B"])[ours], pred)  # every out-of-fold prediction
        np.testing.assert_array_equal(cs, chosen)                         # the C of every fold
        assert profile.accuracy[s] == np.mean(pred == labels)
        values, counts = np.unique(chosen, return_counts=True)
        assert profile.chosen_c[s] == values[np.argmax(counts)]
        varied |= set(chosen)
    assert profile.accuracy.max() >= 0.65 and len(varied) >= 3  # a weak signal where C is really chosen


def test_the_row_space_fit_equals_the_full_space_fit():
    """d > m: the fit on R' of the QR of [train; test]' gives scikit-learn's decision values on the standardised
    d-dimensional rows (both solved tightly)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 120)) * rng.uniform(0.5, 3, size=120) + rng.normal(size=120)
    y = (x[:, 0] + x[:, 1] + rng.normal(size=50) > 0).astype(int)
    train, test = np.arange(35), np.arange(35, 50)
    z, zt = probe_fits._row_space(x, train, test)
    assert z.shape == (35, 35) and zt.shape == (15, 35)
    theta = fit_batched(z, y[train][None], 0.3, 2, tol=1e-10, max_iter=5000)[0]
    scaler = StandardScaler().fit(x[train])
    model = LogisticRegression(C=0.3, tol=1e-12, max_iter=100_000).fit(scaler.transform(x[train]), y[train])
    np.testing.assert_allclose(zt @ theta[:-1, 0] + theta[-1, 0], model.decision_function(scaler.transform(x[test])),
                               atol=1e-6)


def test_the_standardiser_is_standard_scalers_with_constant_features():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 6)) * [1, 1e-3, 1e6, 1, 1, 1] + [0, 5, 0, 1e8, 0, 0]
    x[:, 3] = 1e8
    x[0, 3] += 1e-8              # below the two-pass error bound at 1e8: a constant
    x[:, 4] = 3.0                # constant
    x[:, 5] = 0.1 * np.ones(40)  # constant with rounding
    scaler = StandardScaler().fit(x)
    mean, scale = standardiser(x)
    np.testing.assert_allclose(mean, scaler.mean_, rtol=1e-13)
    np.testing.assert_allclose(scale, scaler.scale_, rtol=1e-12)
    assert list(scale[3:]) == [1.0, 1.0, 1.0]


def test_three_classes_with_a_class_missing_from_an_inner_split_equal_scikit_learn():
    """Class c sits in three one-row groups, so with three folds some inner training split lacks it: that fit
    (scikit-learn on the two classes present) and the batched multinomial ones equal the hand loop."""
    rng = np.random.default_rng(3)
    group_class = np.array([0] * 6 + [1] * 6 + [2] * 3)
    groups = np.repeat(np.arange(len(group_class)), np.array([3, 3, 1])[group_class])
    labels = np.array(["a", "b", "c"])[group_class[groups]]
    x = rng.normal(size=(len(groups), 6)) + 1.5 * np.eye(6)[group_class[groups]]
    y, g = codes(labels)[0], group_codes(groups)
    fold = fold_ids(labels, groups, folds=3, seed=0)
    plan = nested_plan(y, g, fold)
    assert any(len(np.unique(y[s.train])) == 2 for s in plan.inner)  # the fallback is exercised
    batch = probe_fits._Batch(x, y, plan.inner, 3)
    with pytest.MonkeyPatch.context() as tight:  # both solved tightly: the same probabilities, fit by fit
        tight.setattr(probe_fits, "TOL", 1e-10)
        tight.setattr(probe_fits, "MAX_ITER", 100_000)
        for c in CS:  # every inner fit's test probabilities, in the columns of the classes it saw
            _, probabilities, _ = batch.fit(np.full(len(plan.inner), c), None)
            for split, got in zip(plan.inner, probabilities, strict=True):
                scaler = StandardScaler().fit(x[split.train])
                model = LogisticRegression(C=c, tol=1e-12, max_iter=100_000).fit(scaler.transform(x[split.train]),
                                                                                   y[split.train])
                expected = model.predict_proba(scaler.transform(x[split.test]))
                np.testing.assert_allclose(got[:, model.classes_], expected, atol=1e-4)
    ours, scores, cs = logreg_oof(x, y, plan, 3)
    for f in range(3):
        train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        hits = np.zeros(len(CS))
        for tr, te in GroupKFold(3).split(x[train], y[train], g[train]):
            if len(np.unique(y[train][tr])) < 2:
                continue
            scaler = StandardScaler().fit(x[train][tr])
            for i, c in enumerate(CS):
                model = LogisticRegression(C=c, max_iter=1000).fit(scaler.transform(x[train][tr]), y[train][tr])
                hits[i] += np.sum(model.predict(scaler.transform(x[train][te])) == y[train][te])
        assert cs[f] == CS[int(np.argmax(hits))]
        scaler = StandardScaler().fit(x[train])
        model = LogisticRegression(C=cs[f], max_iter=1000).fit(scaler.transform(x[train]), y[train])
        np.testing.assert_array_equal(ours[test], model.predict(scaler.transform(x[test])))
        np.testing.assert_allclose(scores[test], model.predict_proba(scaler.transform(x[test])), atol=1e-3)
