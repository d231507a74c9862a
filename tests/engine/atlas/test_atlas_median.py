"""Each text's median |activation| once per layer: the atlas's massive flags and top / median ratios from one median
(``table_and_flags``) against a per-text ``np.median`` loop, and the flags against ``massive_mask``'s own."""

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.atlas import massive_profile, sums
from layerscope.engine.atlas.massive_profile import RATIO, table_and_flags
from layerscope.engine.atlas.stream import atlas_pass
from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask

DTYPES = ["float32", "bfloat16", "float16", "float64"]


def naive(hidden: np.ndarray, real: np.ndarray, wide: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, T) flags and (B,) top / median by a loop over texts: the flags compare float32 values with
    ``np.median`` of float32 (as ``massive_mask``), the ratio divides by the median of the values in float64
    (``wide``, the states' own values)."""
    flags = np.zeros(real.shape, dtype=bool)
    ratio = np.full(len(real), np.nan)
    for b in range(len(real)):
        mag = np.abs(hidden[b][real[b]]).astype(np.float32)  # (n_real, d)
        flags[b, real[b]] = mag.max(axis=1) > np.float32(MASSIVE_RATIO) * np.median(mag)
        values = np.abs(wide[b][real[b]]).astype(np.float64)
        ratio[b] = values.max() / np.median(values)
    return flags, ratio


def padded(texts: list[np.ndarray], fill: float, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """texts (n_i, d) float64 -> hidden (B, T, d) float64 and real (B, T), padding holding ``fill``."""
    width = max(len(t) for t in texts)
    hidden = torch.full((len(texts), width, texts[0].shape[1]), fill, dtype=torch.float64)
    real = torch.zeros(len(texts), width, dtype=torch.bool)
    for b, t in enumerate(texts):
        start = width - len(t) if side == "left" else 0
        hidden[b, start : start + len(t)] = torch.from_numpy(t)
        real[b, start : start + len(t)] = True
    return hidden, real


def check(texts: list[np.ndarray], dtype: str, fill: float = np.nan, side: str = "right") -> np.ndarray:
    """table_and_flags on ``texts`` cast to ``dtype`` against :func:`naive` and every massive_mask path; returns
    the flags."""
    hidden, real = padded(texts, fill, side)
    hidden = hidden.to(getattr(torch, dtype))
    classes = torch.where(real, 2, -1).to(torch.int8)
    table, flags = table_and_flags(hidden, real, classes)
    with np.errstate(invalid="ignore", over="ignore"):
        want_flags, want_ratio = naive(hidden.float().numpy(), real.numpy(), hidden.double().numpy())
    np.testing.assert_array_equal(flags.numpy(), want_flags)
    usable = np.isfinite(want_ratio)
    np.testing.assert_allclose(table[:, RATIO].numpy()[usable], want_ratio[usable], rtol=1e-14)
    methods = [None, "exact", "count"] + (["bits16"] if dtype in ("bfloat16", "float16") else [])
    for method in methods:
        np.testing.assert_array_equal(flags.numpy(), massive_mask(hidden, real, method=method).numpy(), str(method))
    return flags.numpy()


EVEN = np.ones((6, 4))
"""24 |values|: twelve 1s, ten 3s and two peaks, so the middle values are 1 and 3 (median 2, cut 200): the peak 250
is massive, 150 is not (it would be under the lower middle value alone; 250 would not be under the upper)."""
EVEN[0, 0], EVEN[1, 0] = 250.0, -150.0
EVEN.flat[8:18] = 3.0
ODD = np.array([[1.0, 2.0, -199.0], [2.0, 3.0, 201.0], [1.0, 2.0, 3.0]])
"""9 |values| whose 5th is 2 (cut 200): 201 is massive, 199 is not."""


@pytest.mark.parametrize("dtype", DTYPES)
def test_planted_peaks_around_the_cut(dtype):
    assert check([EVEN], dtype)[0].tolist() == [True, False, False, False, False, False]
    assert check([ODD], dtype)[0].tolist() == [False, True, False]


def test_peaks_at_and_one_float_around_the_cut():
    """|values| around 1 and, per text, peaks at exactly 100 x the float32 median (not massive), one float32 above
    (massive) and one below (not): placeholders of 1000 first, so that the plants leave the median as it was."""
    rng = np.random.default_rng(9)
    texts = []
    for i, n in enumerate([5, 3, 8, 6, 4]):
        t = (rng.uniform(0.5, 1.5, size=(n, 4)) * rng.choice([-1.0, 1.0], size=(n, 4))).astype(np.float32)
        spots = [(0, i % 4), (1, (i + 1) % 4), (2, (i + 2) % 4)]
        for spot in spots:
            t[spot] = 1000.0
        median = np.median(np.abs(t))
        cut = np.float32(MASSIVE_RATIO) * median
        t[spots[0]] = cut
        t[spots[1]] = -np.nextafter(cut, np.float32(np.inf))
        t[spots[2]] = np.nextafter(cut, np.float32(0))
        assert np.median(np.abs(t)) == median
        texts.append(t.astype(np.float64))
    flags = check(texts, "float32")
    assert flags[:, :3].tolist() == [[False, True, False]] * len(texts)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fill", [np.nan, 1e30, -np.inf])
@pytest.mark.parametrize("side", ["right", "left"])
def test_random_batches(dtype, fill, side):
    rng = np.random.default_rng(7)
    for trial in range(12):
        d = int(rng.integers(1, 9))
        lengths = rng.integers(1, 9, size=int(rng.integers(1, 6)))
        texts = [rng.lognormal(0, rng.uniform(0.1, 3.0), size=(n, d)) * rng.choice([-1, 1], size=(n, d))
                 for n in lengths]
        if trial % 2:
            texts = [np.round(t, 1) for t in texts]  # ties at the middle
        if trial % 3 == 0:
            texts[0][0, 0] = 1e3 * np.abs(texts[0]).max()  # a massive token
        check(texts, dtype, fill, side)


def test_a_text_holding_nan_flags_nothing():
    rng = np.random.default_rng(8)
    texts = [rng.normal(size=(5, 4)) for _ in range(3)]
    texts[1][2, 1] = np.nan
    texts[1][0, 0] = 1e6
    texts[2][0, 0] = 1e6
    flags = check(texts, "float32")
    assert not flags[1].any() and flags[2, 0]


def test_one_median_per_text_and_layer_in_the_pass(monkeypatch):
    """A measured block output takes its median once (flags and table together); a layer only flagged goes to
    massive_mask; the embeddings (layer 0) only to the table."""
    calls = {"median": 0, "mask": 0}
    middle, mask = massive_profile._middle_values, sums.massive_mask

    def counted_middle(*args):
        calls["median"] += 1
        return middle(*args)

    def counted_mask(*args, **kwargs):
        calls["mask"] += 1
        return mask(*args, **kwargs)

    monkeypatch.setattr(massive_profile, "_middle_values", counted_middle)
    monkeypatch.setattr(sums, "massive_mask", counted_mask)
    lm = tiny.tiny_lm("llama", n_layers=4)
    for layers, medians, masks in [(None, 5, 0), ([0, 2], 2, 3), ([3, 4], 2, 2)]:
        calls.update(median=0, mask=0)
        atlas_pass(lm, tiny.TEXTS[:4], layers=layers, batch_size=2, progress=False)  # 2 batches
        assert calls == {"median": 2 * medians, "mask": 2 * masks}, layers
