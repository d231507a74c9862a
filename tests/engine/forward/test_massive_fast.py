"""The batched massive-token test (one histogram bracket per text, the exact median only where it decides; the exact
median for every text; one histogram of 16-bit patterns per text) against a slow reference: a loop over texts and
layers with ``np.median``."""

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.forward.batching import collate
from layerscope.engine.forward.massive import MASSIVE_RATIO, block_massive, massive_mask
from layerscope.engine.forward.massive_device import _bracket
from layerscope.engine.forward.scratch import Scratch

SCRATCH = Scratch()

PATHS = ["bound", "bracket", "exact", "bits16-bfloat16", "bits16-float16", "count", "count-bfloat16", "count-float16"]
"""``method=``: the mean bound with its count and search (the CPU default), the histogram bracket, the exact median
of every text, the 16-bit pattern histogram, and the count search (the GPU default) on float32, bfloat16 and
float16 states (a ``-dtype`` path casts the states to that dtype first, and the reference reads the cast values)."""


def flags_of(hidden: torch.Tensor, real: torch.Tensor, method: str, ratio: float = MASSIVE_RATIO):
    """(got, expect): ``massive_mask`` by ``method`` and :func:`naive_flags`, on ``hidden`` cast for a 16-bit path."""
    if "-" in method:
        method, dtype = method.split("-")
        hidden = hidden.to(getattr(torch, dtype))
    with np.errstate(invalid="ignore", over="ignore"):
        expect = naive_flags(hidden.float().numpy(), real.numpy(), ratio)
    return massive_mask(hidden, real, ratio, method=method).numpy(), expect


def naive_flags(hidden: np.ndarray, real: np.ndarray, ratio: float = MASSIVE_RATIO) -> np.ndarray:
    """(B, T) bool for one layer's ``hidden`` (B, T, d): per text, its real tokens' |values| and their np.median."""
    flags = np.zeros(real.shape, dtype=bool)
    for b in range(len(real)):
        mag = np.abs(hidden[b][real[b]]).astype(np.float32)  # (n_real, d)
        if len(mag):
            flags[b, real[b]] = mag.max(axis=1) > np.float32(ratio) * np.median(mag)
    return flags


def naive_any_layer(layers: list[np.ndarray], real: np.ndarray, ratio: float = MASSIVE_RATIO) -> np.ndarray:
    flags = np.zeros(real.shape, dtype=bool)
    for hidden in layers:
        flags |= naive_flags(hidden, real, ratio)
    return flags


def padded(texts: list[np.ndarray], side: str, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """texts (n_i, d) -> hidden (B, T, d) float32 and real (B, T), padding on ``side`` holding ``fill``."""
    batch = collate([[1] * len(t) for t in texts], np.arange(len(texts)), pad_id=0, side=side)
    real = batch.attention_mask.bool()
    hidden = torch.full((*real.shape, texts[0].shape[1]), fill, dtype=torch.float32)
    hidden[real] = torch.from_numpy(np.concatenate(texts).astype(np.float32))
    return hidden, real


def planted_texts(rng, d: int, lengths: list[int]) -> list[np.ndarray]:
    """Texts of |values| around 1 with peaks planted at exactly, just above and just below 100x the median:
    placeholders of 1000 first, then the median, then the plants (above the median as the placeholders were,
    so the median stays)."""
    texts = []
    for i, n in enumerate(lengths):
        t = (rng.uniform(0.5, 1.5, size=(n, d)) * rng.choice([-1.0, 1.0], size=(n, d))).astype(np.float32)
        if n >= 3:
            spots = [(0, i % d), (1, (i + 1) % d), (2, (i + 2) % d)]
            for spot in spots:
                t[spot] = 1000.0
            median = np.median(np.abs(t))
            cut = np.float32(MASSIVE_RATIO) * median
            t[spots[0]] = cut  # exactly 100x: not massive
            t[spots[1]] = -np.nextafter(cut, np.float32(np.inf))  # one float above: massive
            t[spots[2]] = np.nextafter(cut, np.float32(0))  # one float below: not
            assert np.median(np.abs(t)) == median
        texts.append(t)
    return texts


@pytest.mark.parametrize("bracket", PATHS)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("fill", [np.nan, 1e30, np.inf, -3e38])
@pytest.mark.parametrize("d", [4, 7])  # d = 7 with an odd token count: an odd number of values, one middle value
def test_planted_peaks_at_and_around_the_cut_match_the_naive_loop(bracket, side, fill, d):
    rng = np.random.default_rng(d)
    texts = planted_texts(rng, d, [5, 3, 8, 1, 6, 4])
    hidden, real = padded(texts, side, fill)
    got, expect = flags_of(hidden, real, bracket)
    np.testing.assert_array_equal(got, expect)
    if "-" in bracket:
        return  # the cast moved the plants off the cut; the loop above still checks every flag
    flagged = [got[b][real[b].numpy()][:3].tolist() for b in range(len(texts)) if len(texts[b]) >= 3]
    assert flagged and all(f == [False, True, False] for f in flagged)  # the plants, independently of numpy


@pytest.mark.parametrize("bracket", PATHS)
def test_the_upper_middle_value_decides_and_even_odd_counts(bracket):
    """|values| 1, 1, 1.002, peak ... with the two middle values 1 and 1.002: median 1.001, cut 100.1."""
    middle = np.float32(1.0) + np.float32(1.002)
    for peak, massive in [(100.05, False), (100.15, True), (100 * (middle / 2), False), (None, True)]:
        h = np.array([[[1.0, -1.0, 1.0, 1.002], [0.0, 1.0, -1.002, 1.002]]], dtype=np.float32)
        cut = np.float32(100.0) * (middle / np.float32(2))
        h[0, 1, 0] = np.nextafter(cut, np.float32(np.inf)) if peak is None else peak  # None: one float above the cut
        got, expect = flags_of(torch.from_numpy(h), torch.ones(1, 2, dtype=torch.bool), bracket)
        if "-" not in bracket:  # 16 bits cannot hold 1.002 and the cut: the loop's flags only
            assert got.tolist() == [[False, massive]]
        assert got.tolist() == expect.tolist()
    h = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 402.0], [6.0, 7.0, 0.5]]], dtype=np.float32)  # median 4; 402 fits bf16
    got, _ = flags_of(torch.from_numpy(h), torch.ones(1, 3, dtype=torch.bool), bracket)
    assert got.tolist() == [[False, True, False]]


@pytest.mark.parametrize("bracket", PATHS)
def test_odd_shapes_nan_and_zero_texts(bracket):
    rng = np.random.default_rng(5)
    texts = [rng.normal(size=(4, 6)).astype(np.float32) for _ in range(6)]
    texts[0][:] = 0.0  # every value 0: median 0, any peak > 0 would be massive
    texts[0][2, 1] = 1e-30
    texts[1][:, :] *= 1e-6  # a heavy tail: the mean is 1000x the median, the median outside the bracket window
    texts[1][0, :] = 1e4
    texts[2][1, 3] = np.nan  # np.median is NaN: nothing flagged in this text
    texts[2][0, 0] = 1e9
    texts[3][3, 5] = np.inf  # inf counts as a value: massive
    texts[4] = (texts[4] * 1e-40).astype(np.float32)  # subnormal values
    texts[4][1, 1] = 1e-36
    texts[5][1:] = -np.inf  # most values infinite: the median is inf, and no peak (inf) is above 100x it
    hidden, real = padded(texts, "right", np.nan)
    got, expect = flags_of(hidden, real, bracket)
    np.testing.assert_array_equal(got, expect)
    if bracket in ("bits16-float16", "count-float16"):
        return  # float16 flushes the subnormal text to 0 and overflows 1e9: the loop above checks every flag
    assert got[0, 2] and got[1, 0] and not got[2].any() and got[3, 3] and got[4, 1] and not got[5].any()


@pytest.mark.parametrize("bracket", PATHS)
def test_random_batches_with_spikes_at_many_ratios(bracket):
    rng = np.random.default_rng(2)
    for trial in range(40):
        n_texts, d = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        lengths = rng.integers(1, 10, size=n_texts).tolist()
        sigma = rng.uniform(0.1, 3.0)
        texts = [(rng.lognormal(0, sigma, size=(n, d)) * rng.choice([-1, 1], size=(n, d))).astype(np.float32)
                 for n in lengths]
        if trial % 2:
            texts = [np.round(t, 1).astype(np.float32) for t in texts]  # ties
        for t in texts:
            t[rng.integers(len(t)), rng.integers(d)] *= rng.choice([50.0, 99.9, 100.0, 100.1, 300.0])
        hidden, real = padded(texts, ["right", "left"][trial % 2], [np.nan, 1e20][trial % 2])
        for ratio in (3.0, 20.0, MASSIVE_RATIO):
            np.testing.assert_array_equal(*flags_of(hidden, real, bracket, ratio))
            if bracket == "bound":  # buffers reused across texts of every shape give the same flags
                np.testing.assert_array_equal(massive_mask(hidden, real, ratio, scratch=SCRATCH).numpy(),
                                              flags_of(hidden, real, bracket, ratio)[1])


def test_the_bracket_holds_the_two_middle_values_within_2_to_the_minus_7():
    rng = np.random.default_rng(3)
    texts = [(rng.standard_t(3, size=(n, 64)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32) for n in (9, 2, 17)]
    hidden, real = padded(texts, "left", np.nan)
    low, high = _bracket(hidden.abs(), real, real.sum(dim=1) * 64)
    for b, t in enumerate(texts):
        values = np.sort(np.abs(t).ravel())
        lower, upper = values[(len(values) - 1) // 2], values[len(values) // 2]
        assert low[b] <= lower <= upper <= high[b]
        assert lower <= low[b] * (1 + 2.0**-7) and high[b] <= upper * (1 + 2.0**-7)  # bins at most 2^-7 wide


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_real_hidden_states_of_a_tiny_model_match_the_naive_loop(arch, side):
    lm = tiny.tiny_lm(arch, adds_bos=arch == "gpt2")
    ids = [lm.tokenizer(text)["input_ids"] for text in tiny.TEXTS]
    batch = collate(ids, np.arange(len(ids)), pad_id=0, side=side)
    with torch.no_grad():
        out = lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
    real = batch.attention_mask.bool()
    layers = [h.numpy() for h in out.hidden_states]
    mixed = 0
    for ratio in (2.0, 5.0, 20.0, MASSIVE_RATIO):
        for hidden in out.hidden_states:
            expect = naive_flags(hidden.numpy(), real.numpy(), ratio)
            mixed += int(0 < expect.sum() < real.sum().item())
            for method in PATHS:
                np.testing.assert_array_equal(*flags_of(hidden, real, method, ratio))
            np.testing.assert_array_equal(massive_mask(hidden, real, ratio).numpy(), expect)
    assert mixed >= 3  # some layers and ratios flag some tokens and not others
    flags = block_massive(out.hidden_states, out.hidden_states[-1], real, 5.0).numpy()
    np.testing.assert_array_equal(flags, naive_any_layer([*layers[1:-1], layers[-1]], real.numpy(), 5.0))


@pytest.mark.parametrize("ratio", [100.0, 3.3, 1e-3, 7e30])
def test_the_count_searchs_cut_is_the_first_value_whose_product_reaches_the_peak(ratio):
    from layerscope.engine.forward.massive_device import _cut

    rng = np.random.default_rng(5)
    peak = torch.from_numpy(np.concatenate([
        np.exp(rng.uniform(-90, 88, 5000)), rng.uniform(0, 4, 1000), [0.0, np.inf, 3.4e38, 1e-45, 1.0, 100.0],
    ]).astype(np.float32))
    cut = _cut(peak, ratio).numpy()
    below = np.nextafter(cut, np.float32(-np.inf))
    with np.errstate(over="ignore", under="ignore"):  # numpy's float32 product, rounded as IEEE says
        reach, short = np.float32(ratio) * cut >= peak.numpy(), np.float32(ratio) * below >= peak.numpy()
    assert reach.all() and not short[cut > 0].any()  # (below a cut of 0 lie only negative values)


@pytest.mark.parametrize("method", ["count", "bound"])
def test_the_count_search_settles_a_cut_between_the_two_middle_values(method):
    """Peaks planted so that a search step's cut falls between the two middle values (c == n / 2): the flags then
    come from their mean, as np.median's (the GPU's search and the CPU's, which the bound's count sends these texts
    to: their peaks sit near 100x the median, far below 2x100 their mean)."""
    rng = np.random.default_rng(11)
    cases = 0
    for _ in range(200):
        d, lengths = 4, rng.integers(2, 7, size=3).tolist()
        texts = [rng.uniform(0.5, 1.5, (n, d)).astype(np.float32) for n in lengths]
        for t in texts:
            flat = np.sort(np.abs(t).ravel())
            lo, hi = flat[len(flat) // 2 - 1], flat[len(flat) // 2]
            m = np.float32((lo + hi) / np.float32(2))
            # one token's peak just above, one at, one just below 100 x the median; the middle values stay
            t[0, 0] = np.nextafter(np.float32(100) * m, np.float32(np.inf)) * rng.choice([1, -1])
            if len(t) > 2:
                t[1, 0] = np.float32(100) * m
        hidden, real = padded(texts, "right", np.nan)
        got, expect = flags_of(hidden, real, method)
        cases += int(expect.any())
        np.testing.assert_array_equal(got, expect)
    assert cases > 50


def test_the_bound_path_does_not_flag_a_peak_between_ratio_x_the_mean_and_ratio_x_the_median():
    """A text whose median (1) is well above its mean (0.84: 40 % zeros): a peak of 90 is above 100x the mean but
    below 100x the median, so it is not massive; one of 150 is."""
    text = np.zeros((250, 4), dtype=np.float32)
    text[:, :2] = 1.0
    text[::5, 2] = 1.0  # 60 % ones: the median is 1
    text[3, 3] = 90.0
    text[5, 3] = -150.0
    mean, median = np.abs(text).mean(), np.median(np.abs(text))
    assert 100 * mean < 90 < 100 * median < 150
    hidden, real = padded([text, np.ones((7, 4), dtype=np.float32)], "right", 0.0)
    got, expect = flags_of(hidden, real, "bound")
    assert expect.sum() == 1 and expect[0, 5]
    np.testing.assert_array_equal(got, expect)


def test_the_bound_settles_clear_texts_without_the_search(monkeypatch):
    """Peaks 1000x the median and ordinary tokens far below the cut (128 dimensions, so one peak moves the mean
    little), padding of zeros or 1e30 on either side: the bound and its one count decide every text, so the exact
    search (``_search_flags``) is never called."""
    from layerscope.engine.forward import massive

    calls = []
    search = massive._search_flags
    monkeypatch.setattr(massive, "_search_flags", lambda *a: calls.append(1) or search(*a))
    rng = np.random.default_rng(5)
    for side, fill in [("right", 0.0), ("left", 0.0), ("right", 1e30), ("left", -1e30)]:
        texts = [rng.normal(size=(n, 128)).astype(np.float32) for n in (3, 9, 14, 6)]
        for t in texts[:3]:
            t[0, 2] = 1000.0 * np.median(np.abs(t))
        hidden, real = padded(texts, side, fill)
        got, expect = flags_of(hidden, real, "bound")
        assert expect.sum() == 3
        np.testing.assert_array_equal(got, expect)
    assert calls == []


@pytest.mark.parametrize("method", PATHS)
def test_known_tokens_come_back_flagged_and_every_other_flag_is_the_loops(method, monkeypatch):
    """``known`` (tokens flagged at another layer, padding among them): each comes back True at a real position and
    False at padding, every other token is flagged as the np.median loop says, whether or not the bound's search
    ran (it does here: spikes near the cut)."""
    from layerscope.engine.forward import massive

    calls = []
    search = massive._search_flags
    monkeypatch.setattr(massive, "_search_flags", lambda *a: calls.append(1) or search(*a))
    rng = np.random.default_rng(8)
    for trial in range(30):
        n_texts, d = int(rng.integers(1, 6)), int(rng.integers(1, 9))
        texts = [(rng.lognormal(0, 1.0, size=(n, d)) * rng.choice([-1, 1], size=(n, d))).astype(np.float32)
                 for n in rng.integers(2, 10, size=n_texts)]
        for t in texts:
            t[rng.integers(len(t)), rng.integers(d)] *= rng.choice([99.9, 100.1, 150.0, 300.0])
        hidden, real = padded(texts, ["right", "left"][trial % 2], [np.nan, 1e20][trial % 2])
        known = torch.from_numpy(rng.random(real.shape) < 0.25)
        for ratio in (3.0, 20.0, MASSIVE_RATIO):
            name, cast = (method.split("-") + [None])[:2]
            h = hidden.to(getattr(torch, cast)) if cast else hidden
            with np.errstate(invalid="ignore", over="ignore"):
                expect = naive_flags(h.float().numpy(), real.numpy(), ratio) | (known & real).numpy()
            got = massive_mask(h, real, ratio, method=name, known=known)
            np.testing.assert_array_equal(got.numpy(), expect)
    assert method != "bound" or calls


def test_a_known_token_near_the_cut_costs_the_bound_no_search(monkeypatch):
    """A token at 150x its text's median (massive, but not above 2x100 its mean) sends the text to the search, unless
    it is known: then the bound's one count clears the rest."""
    from layerscope.engine.forward import massive

    calls = []
    search = massive._search_flags
    monkeypatch.setattr(massive, "_search_flags", lambda *a: calls.append(1) or search(*a))
    rng = np.random.default_rng(4)
    text = rng.uniform(0.5, 1.5, size=(6, 32)).astype(np.float32)
    text[2, 7] = 150.0 * np.median(np.abs(text))
    hidden, real = padded([text], "right", 0.0)
    known = torch.zeros_like(real)
    assert massive_mask(hidden, real, known=known).tolist() == [[False, False, True, False, False, False]]
    assert calls == [1]
    known[0, 2] = True
    assert massive_mask(hidden, real, known=known).tolist() == [[False, False, True, False, False, False]]
    assert calls == [1]
