"""The atlas pass's per-text sums (``result.texts``, what a resample of the texts needs) against per-text loops on
unbatched forward passes, for every real token (set 0) and without position 0 and the massive tokens (set 1)."""

import numpy as np
import pytest

import tiny
from atlas_reference import TEXTS, cos, lens_token_ce, make_lm, massive_flags, reference
from layerscope.engine.atlas import sums as atlas_sums
from layerscope.engine.atlas.stream import atlas_pass


@pytest.fixture(scope="module", params=[("llama", False), ("gpt2", True), ("gemma3", True)],
                ids=lambda p: f"{p[0]}-{'bos' if p[1] else 'nobos'}")
def case(request):
    arch, adds_bos = request.param
    lm = make_lm(arch, adds_bos)
    return arch, lm, atlas_pass(lm, TEXTS, batch_size=3, progress=False), reference(lm, TEXTS)


def kept(r):
    """(T,) bool: the text's tokens that are neither position 0 nor massive at any block output."""
    keep = ~massive_flags(r["states"])
    keep[0] = False
    return keep


def test_transitions_norm_and_token_counts_per_text(case):
    _, lm, got, ref = case
    t = got.texts
    for i, r in enumerate(ref):
        s, keep = r["states"], kept(r)
        assert t.tokens[0, i] == len(r["ids"]) and t.tokens[1, i] == keep.sum()
        for layer in range(lm.info.n_layers):
            ones = np.array([1 - cos(s[layer, k], s[layer + 1, k]) for k in range(s.shape[1])])
            assert t.influence[0, i, layer] == pytest.approx(ones.sum(), rel=1e-5, abs=1e-6)
            assert t.influence[1, i, layer] == pytest.approx(ones[keep].sum(), rel=1e-5, abs=1e-6)
            angle = np.arccos(np.clip(cos(s[layer, -1], s[layer + 1, -1]), -1, 1)) / np.pi
            assert t.angular[0, i, layer] == pytest.approx(angle, rel=1e-5, abs=1e-6)
            assert np.isnan(t.angular[1, i, layer]) if not keep[-1] else t.angular[1, i, layer] == pytest.approx(
                angle, rel=1e-5, abs=1e-6)
        for layer in range(lm.info.n_layers + 1):
            norms = np.linalg.norm(s[layer], axis=1)
            assert t.norm[0, i, layer] == pytest.approx(norms.sum(), rel=1e-5)
            assert t.norm[1, i, layer] == pytest.approx(norms[keep].sum(), rel=1e-5, abs=1e-6)


def test_pooled_without_position_0_and_massive_tokens(case):
    _, lm, got, ref = case
    for i, r in enumerate(ref):
        keep = kept(r)
        for layer in range(lm.info.n_layers + 1):
            if keep.any():
                want = r["states"][layer][keep].mean(axis=0)
                np.testing.assert_allclose(got.texts.pooled[1, i, layer], want, rtol=1e-5, atol=1e-5)
            else:
                assert np.isnan(got.texts.pooled[1, i, layer]).all()


def test_lens_per_text(case):
    arch, _, got, ref = case
    for i, r in enumerate(ref):
        ce = lens_token_ce(case[1], arch, r, 1)
        keep = kept(r)[:-1]  # position k predicts k + 1: it counts when its own state is kept
        assert got.texts.scored[0, i] == len(r["ids"]) - 1
        assert got.texts.scored[1, i] == keep.sum()
        assert got.texts.lens[0, i, 1, 0] == pytest.approx(ce.sum(), rel=1e-5, abs=1e-6)
        assert got.texts.lens[1, i, 1, 0] == pytest.approx(ce[keep].sum(), rel=1e-5, abs=1e-6)


def skean_entropy(z):
    """Normalised matrix entropy in Skean et al.'s convention, by hand: centre the tokens, unit rows, the Gram
    (N x N, or D x D Z'Z when N > D, as their code) clamped at 0, eigenvalues > a tiny tolerance normalised,
    -sum p log p over min(log N, log D)."""
    z = z - z.mean(axis=0)
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    gram = np.maximum(z @ z.T if z.shape[0] <= z.shape[1] else z.T @ z, 0.0)
    values = np.linalg.eigvalsh(gram)
    values = values[values > values.max() * 1e-12]
    p = values / values.sum()
    return float(-(p * np.log(p)).sum() / np.log(min(z.shape)))


def test_prompt_entropy_per_text_in_the_authors_convention(case):
    _, lm, got, ref = case
    for i, r in enumerate(ref):
        keep = kept(r)
        for layer in range(lm.info.n_layers + 1):
            z = r["states"][layer]
            if len(z) >= 2:
                assert got.texts.entropy[0, i, layer] == pytest.approx(skean_entropy(z), rel=1e-6)
            else:
                assert np.isnan(got.texts.entropy[0, i, layer])
            if keep.sum() >= 2:
                assert got.texts.entropy[1, i, layer] == pytest.approx(skean_entropy(z[keep]), rel=1e-6)
            else:
                assert np.isnan(got.texts.entropy[1, i, layer])
    usable = [r for r in ref if len(r["ids"]) >= 2]
    want = [np.mean([skean_entropy(r["states"][layer]) for r in usable]) for layer in range(lm.info.n_layers + 1)]
    np.testing.assert_allclose(got.prompt_entropy["normalised_entropy"], want, rtol=1e-6)


def test_massive_ratio_per_text(case):
    _, lm, got, ref = case
    for layer in range(lm.info.n_layers + 1):
        want = [np.abs(r["states"][layer]).max() / np.median(np.abs(r["states"][layer])) for r in ref]
        np.testing.assert_allclose(got.texts.massive_ratio[:, layer], want, rtol=1e-4)
        assert np.median(got.texts.massive_ratio[:, layer]) == pytest.approx(got.massive.massive_ratio[layer])


def ritz_top1(t, s, j, weights):
    """The top-1 share of the covariance of set ``s`` at layer slot ``j`` from the per-text sums, by hand."""
    w = np.asarray(weights, dtype=np.float64)
    n = w @ t.tokens[s]
    mean = (w @ t.first[s, :, j].astype(np.float64)) / n  # (d,) shifted
    projected = t.basis[s, j].T @ mean
    second = np.tensordot(w, t.ritz[s, :, j].astype(np.float64), axes=1)
    covariance = (second - n * np.outer(projected, projected)) / (n - 1)
    trace = (w @ t.square[s, :, j] - n * mean @ mean) / (n - 1)
    return np.linalg.eigvalsh(covariance)[-1] / trace


def test_ritz_sums_rebuild_the_top1_share(case):
    _, lm, got, ref = case
    for layer in range(lm.info.n_layers + 1):
        x = np.concatenate([r["states"][layer] for r in ref])
        values = np.linalg.eigvalsh(np.cov(x, rowvar=False))
        exact = values[-1] / values.sum()
        ones = np.ones(len(ref))
        assert ritz_top1(got.texts, 0, layer, ones) == pytest.approx(exact, rel=1e-4)  # the span holds the top
        assert got.spectrum["top1_ratio"][layer] == pytest.approx(exact, rel=1e-6)
        y = np.concatenate([r["states"][layer][kept(r)] for r in ref])
        values = np.linalg.eigvalsh(np.cov(y, rowvar=False))
        assert got.spectrum_kept["top1_ratio"][layer] == pytest.approx(values[-1] / values.sum(), rel=1e-5)


def test_ritz_directions_from_the_first_texts_bound_a_resample_from_below(monkeypatch):
    monkeypatch.setattr(atlas_sums, "RITZ_MIN_TOKENS", 8)  # the directions come from the first batch alone
    lm = make_lm("llama")
    got = atlas_pass(lm, tiny.TEXTS, batch_size=2, progress=False)
    ref = reference(lm, tiny.TEXTS)
    rng = np.random.default_rng(0)
    for _ in range(5):
        weights = np.bincount(rng.integers(0, len(ref), len(ref)), minlength=len(ref))
        for layer in range(lm.info.n_layers + 1):
            x = np.concatenate([np.repeat(r["states"][layer], w, axis=0) for r, w in zip(ref, weights, strict=True)])
            values = np.linalg.eigvalsh(np.cov(x, rowvar=False))
            approx = ritz_top1(got.texts, 0, layer, weights)
            assert approx <= values[-1] / values.sum() * (1 + 1e-5)
            assert approx > 0.5 * values[-1] / values.sum()
