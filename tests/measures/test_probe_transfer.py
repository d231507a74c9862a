"""measures.probe_transfer against a hand loop over held-out domains (scikit-learn fitted on the other domains):
a direction shared by two domains and flipped in a third transfers to the first two and inverts on the third."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from layerscope.measures.probe_fits import CS
from layerscope.measures.probe_transfer import transfer_states


def three_domains(seed=0, n_groups=16):
    """Domains a, b, c of ``n_groups`` two-row groups (one label each); state 0 noise, state 1 the label along
    feature 0: +4 in a and b, -2 in c (flipped, weaker, so that a and b still win when c is in training)."""
    rng = np.random.default_rng(seed)
    domains = np.repeat(np.array(["a", "b", "c"]), 2 * n_groups)
    groups = np.repeat(np.arange(3 * n_groups), 2)
    labels = np.concatenate([rng.permutation(np.arange(n_groups) % 2) for _ in range(3)])[groups]
    X = rng.normal(size=(len(labels), 2, 6)) + 0.3 * rng.normal(size=(3, 1, 6)).repeat(2 * n_groups, axis=0)
    X[:, 1, 0] += (2 * labels - 1) * np.where(domains == "c", -2.0, 4.0)
    return X, labels, groups, domains


def hand_transfer(x, labels, groups, domains, c=None):
    """Per held-out domain: scikit-learn on the other domains (StandardScaler, LogisticRegression at c, or at the
    C of an inner GroupKFold(3) over their groups), accuracy on the held-out rows."""
    out = []
    for d in ("a", "b", "c"):
        train, test = domains != d, domains == d
        value = c
        if value is None:
            hits = np.zeros(len(CS))
            for tr, te in GroupKFold(3).split(x[train], labels[train], groups[train]):
                scaler = StandardScaler().fit(x[train][tr])
                for i, ci in enumerate(CS):
                    model = LogisticRegression(C=ci, max_iter=1000).fit(scaler.transform(x[train][tr]),
                                                                        labels[train][tr])
                    hits[i] += np.sum(model.predict(scaler.transform(x[train][te])) == labels[train][te])
            value = CS[int(np.argmax(hits))]
        scaler = StandardScaler().fit(x[train])
        model = LogisticRegression(C=value, max_iter=1000).fit(scaler.transform(x[train]), labels[train])
        out.append(np.mean(model.predict(scaler.transform(x[test])) == labels[test]))
    return np.array(out)


@pytest.mark.parametrize("c", [0.5, None])
def test_leave_one_domain_out_equals_a_hand_loop_and_a_flipped_domain_falls_below_chance(c):
    X, labels, groups, domains = three_domains()
    tp = transfer_states(X, labels, groups, domains, method="logreg", c=None if c is None else [c, c],
                         n_bootstrap=200)
    with threadpool_limits(limits=1):
        for s in range(2):
            np.testing.assert_array_equal(tp.accuracy[:, s], hand_transfer(X[:, s], labels, groups, domains, c))
    assert list(tp.domains) == ["a", "b", "c"] and list(tp.n) == [32, 32, 32]
    assert np.all(tp.accuracy[:2, 1] > 0.75) and tp.accuracy[2, 1] < 0.3 and tp.ci[2, 1, 1] < 0.5
    np.testing.assert_allclose(tp.mean, tp.accuracy.mean(axis=0))
    assert np.all((tp.ci[..., 0] <= tp.accuracy) & (tp.accuracy <= tp.ci[..., 1]))


def test_mass_mean_transfer_equals_class_means_of_the_other_domains_and_the_interval_its_groups():
    X, labels, groups, domains = three_domains(seed=1)
    tp = transfer_states(X, labels, groups, domains, method="mass_mean", n_bootstrap=300, seed=5)
    for k, d in enumerate("abc"):
        train, test = domains != d, domains == d
        mu0, mu1 = (X[train & (labels == v), 1].mean(axis=0) for v in (0, 1))
        w = mu1 - mu0
        hits = (X[test, 1] @ w > w @ (mu0 + mu1) / 2) == (labels[test] == 1)
        assert tp.accuracy[k, 1] == hits.mean()
        if d == "c":  # its 16 groups resampled from SeedSequence(seed).spawn(D)[k], D = 3 domains, k = 2
            local = groups[test] - groups[test].min()
            draws = np.random.default_rng(np.random.SeedSequence(5).spawn(3)[2]).integers(0, 16, size=(300, 16))
            resampled = [hits[np.concatenate([np.flatnonzero(local == g) for g in row])].mean() for row in draws]
            np.testing.assert_allclose(tp.ci[k, 1], np.percentile(resampled, [2.5, 97.5]), rtol=1e-12)
    assert np.isnan(tp.c).all() and tp.accuracy[2, 1] < 0.3


def test_a_group_in_two_domains_is_refused():
    X, labels, groups, domains = three_domains()
    groups = groups.copy()
    groups[31:33] = 999  # the last row of domain a and the first of b in one group
    with pytest.raises(ValueError, match="group must lie in one domain"):
        transfer_states(X, labels, groups, domains, method="mass_mean")
