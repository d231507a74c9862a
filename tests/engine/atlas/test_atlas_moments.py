"""The atlas's covariance sums: the Ritz directions by block power iteration against ``eigh``."""

import numpy as np
import torch

from layerscope.engine.atlas.moments import Moments, top_directions


def covariance(d: int, decay: float, seed: int = 0) -> torch.Tensor:
    """(d, d) float64 with eigenvalues decay^i (i = 0 .. d-1) in a random basis."""
    gen = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=gen))
    return basis @ torch.diag(decay ** torch.arange(d, dtype=torch.float64)) @ basis.T


def test_top_directions_find_the_leading_eigenvectors():
    c = torch.stack([covariance(300, 0.8), covariance(300, 0.95, seed=1)])
    got = top_directions(c, 16)
    assert got.shape == (2, 300, 16)
    torch.testing.assert_close(got.transpose(1, 2) @ got, torch.eye(16, dtype=torch.float64).expand(2, 16, 16))
    _, exact = torch.linalg.eigh(c)
    exact = exact[..., -16:].flip(-1)
    overlap = (got * exact).sum(dim=1).abs()  # (2, 16) |cos| of each direction with the exact one
    assert (overlap[:, 0] > 1 - 1e-10).all()  # the top direction, to the precision a top-1 share needs
    assert (overlap[0] > 1 - 1e-6).all()  # a clear spectral gap: every direction
    assert (overlap[1, :8] > 0.99).all()  # a slowly decaying spectrum: the first half still close
    rayleigh = torch.einsum("gdk,gde,gek->gk", got, c, got)  # each direction's variance: at most the exact one
    assert (rayleigh <= torch.linalg.eigvalsh(c)[..., -16:].flip(-1) * (1 + 1e-12)).all()


def test_moments_spectrum_and_sums_by_hand():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(10, 5, generator=gen)
    members = torch.tensor([[True] * 10, [False, True] * 5])
    text_row = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
    moments = Moments(n_slots=1, d=5, k=3)
    first, square, ritz = moments.add(0, rows, members, text_row, 3)
    assert ritz is None
    moments.count += members.sum(dim=1)
    x = rows.double()
    for s in range(2):
        chosen = x[members[s]]
        np.testing.assert_allclose(moments.spectrum(s, len(chosen))[0].numpy(),
                                   np.linalg.eigvalsh(np.cov(chosen.numpy(), rowvar=False))[::-1], rtol=1e-10,
                                   atol=1e-12)
        shifted = torch.where(members[s][:, None], x - chosen.mean(dim=0), 0.0)
        for t in range(3):
            np.testing.assert_allclose(first[s, t].numpy(), shifted[text_row == t].sum(dim=0).numpy(), atol=1e-12)
            np.testing.assert_allclose(square[s, t].item(), (shifted[text_row == t] ** 2).sum().item(), rtol=1e-12)
    moments.fix_basis()
    assert moments.basis.shape == (2, 1, 5, 3)
