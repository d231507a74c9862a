"""The covariance top-1 share without a spectrum (largest eigenvalue by block power iteration with a residual check,
trace from the diagonal) against numpy's ``eigvalsh``: largest eigenvalue / sum of eigenvalues."""

import numpy as np
import pytest
import torch

from atlas_reference import TEXTS, make_lm, reference
from layerscope.engine.atlas.moments import Moments, top_eigenvalues


def numpy_top1(c: np.ndarray) -> float:
    """Largest eigenvalue / sum of eigenvalues of symmetric ``c``, by ``np.linalg.eigvalsh``."""
    values = np.linalg.eigvalsh(c)
    return values[-1] / values.sum()


def in_random_basis(values: np.ndarray, seed: int = 0) -> np.ndarray:
    """Q diag(values) Q^T (float64) for a random orthogonal Q."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((len(values), len(values))))
    return (q * values) @ q.T


def sample_covariance(d: int, n: int, seed: int) -> np.ndarray:
    """np.cov of ``n`` correlated random rows in ``d`` dimensions (rank min(n - 1, d))."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) / np.sqrt(d)
    return np.cov(rng.standard_normal((n, d)) @ mix + 3.0, rowvar=False)


def check(matrices: list[np.ndarray], rtol: float = 1e-6, **kwargs):
    """top_eigenvalues of the stacked ``matrices`` against numpy, matrix by matrix; returns its answer."""
    top = top_eigenvalues(torch.from_numpy(np.stack(matrices)), **kwargs)
    for i, c in enumerate(matrices):
        assert top.value[i] / top.trace[i] == pytest.approx(numpy_top1(c), rel=rtol), i
        assert top.value[i] == pytest.approx(np.linalg.eigvalsh(c)[-1], rel=rtol), i
    return top


@pytest.mark.parametrize("d", [3, 8, 32, 100, 576])
def test_random_sample_covariances(d):
    matrices = [sample_covariance(d, n, seed) for seed, n in enumerate([2 * d + 5, d // 2 + 3])]
    check(matrices)


def test_a_heavy_top_eigenvalue():
    values = np.concatenate([[5e4], np.linspace(1.0, 1e-3, 575)])  # a sink's one huge direction
    top = check([in_random_basis(values)], rtol=1e-12)
    assert not top.dense.any()


def test_a_flat_spectrum():
    values = np.random.default_rng(1).uniform(0.9, 1.0, 200)  # no gap the block can find in 32 steps
    top = check([in_random_basis(values, seed=2), in_random_basis(np.full(200, 2.0))], rtol=1e-10)
    assert top.dense.tolist() == [True, False]  # a multiple of the identity: every vector is an eigenvector


def test_a_near_degenerate_top_pair_needs_no_fallback():
    """The pair's eigenvector is ill-determined, but any unit vector in its span is within 1e-9 of both values:
    even one vector (plain power iteration) passes the residual check with the right value."""
    values = np.concatenate([[1.0, 1.0 - 1e-9], 0.01 * 0.5 ** np.arange(98)])
    c = in_random_basis(values, seed=3)
    for width, rtol in ((1, 1e-9), (8, 1e-12)):  # 1 vector: within the check's 1e-9; 8: the pair resolved
        top = check([c], rtol=rtol, width=width)
        assert not top.dense.any(), width


def test_the_fallback_runs_where_the_check_fails_and_only_there():
    """A near-degenerate top pair above a slowly decaying tail: 8 steps of a 4-vector block cannot converge, the
    residual check fails and the dense eigvalsh gives the value; the quick matrix beside it keeps its Ritz value.
    Two gapped spectra whose Ritz values after 8 steps are 1.5e-4 and 3.4e-7 off (residuals of a few 1e-3 and
    1e-4) go to eigvalsh too."""
    slow = in_random_basis(np.concatenate([[1.0, 1.0 - 1e-9], 0.999 ** np.arange(1, 199)]), seed=4)
    quick = in_random_basis(np.concatenate([[1.0, 1.0 - 1e-9], 0.01 * 0.5 ** np.arange(198)]), seed=5)
    gapped = [in_random_basis(np.concatenate([[1.0], 0.95 * decay ** np.arange(199)]), seed=4) for decay in (0.8, 0.7)]
    top = check([quick, slow, *gapped], rtol=1e-12, width=4, iterations=8)
    assert top.dense.tolist() == [False, True, True, True]


def test_the_moments_form_without_the_covariance():
    """C = second - count * mean mean^T, with (S, L) leading dimensions and one count per set."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 40, 20)) @ rng.standard_normal((20, 20)) + 5.0  # (S, L, N, d)
    counts = np.array([40.0, 25.0])  # set 1: its first 25 rows
    rows = [x[0], x[1, :, :25]]
    second = np.stack([np.einsum("lnd,lne->lde", r, r) for r in rows])
    mean = np.stack([r.mean(axis=1) for r in rows])
    top = top_eigenvalues(torch.from_numpy(second), torch.from_numpy(mean), torch.from_numpy(counts)[:, None])
    for s in range(2):
        for j in range(3):
            want = np.cov(rows[s][j], rowvar=False) * (counts[s] - 1)
            assert top.value[s, j] / top.trace[s, j] == pytest.approx(numpy_top1(want), rel=1e-10)
            assert top.trace[s, j] == pytest.approx(np.trace(want), rel=1e-10)


def test_moments_top1_per_token_set():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(30, 12, generator=gen) @ torch.randn(12, 12, generator=gen) + 2.0
    members = torch.stack([torch.ones(30, dtype=torch.bool), torch.arange(30) % 3 == 0])
    text_row = torch.arange(30) // 10
    moments = Moments(n_slots=2, d=12, k=4)
    for j in range(2):
        moments.add(j, rows * (j + 1) + j, members, text_row, 3)
    moments.count += members.sum(dim=1)
    ratio, dense = moments.top1([30, 10])
    assert ratio.shape == dense.shape == (2, 2) and not dense.any()
    for s in range(2):
        for j in range(2):
            chosen = (rows * (j + 1) + j).double()[members[s]].numpy()
            assert ratio[s, j] == pytest.approx(numpy_top1(np.cov(chosen, rowvar=False)), rel=1e-10), (s, j)
    few, _ = moments.top1([30, 1])  # fewer than 2 tokens: no covariance
    assert np.isfinite(few[0]).all() and np.isnan(few[1]).all()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_tiny_models_covariances(arch):
    lm = make_lm(arch, adds_bos=True)
    ref = reference(lm, TEXTS)
    covariances = [np.cov(np.concatenate([r["states"][layer] for r in ref]), rowvar=False)
                   for layer in range(lm.info.n_layers + 1)]
    check(covariances)


@pytest.mark.integration
def test_smollm2_covariances(smollm2):
    """SmolLM2-135M's token covariances (d = 576) at a few layers: the sink's heavy top direction and the
    embeddings' flatter spectrum."""
    from layerscope import load_pairs

    texts = load_pairs().texts()[:8]
    states = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor(smollm2.tokenizer(text)["input_ids"])[None]
            out = smollm2.model(input_ids=ids, output_hidden_states=True)
            states.append(torch.stack([out.hidden_states[layer][0] for layer in (0, 1, 5, 15, 29)]).double())
    x = torch.cat(states, dim=1).numpy()  # (5, N, 576)
    check([np.cov(layer, rowvar=False) for layer in x])
