"""The massive-activation profile against plain-Python loops over hand-built activations."""

import math
import statistics

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.atlas.massive_profile import CLASSES, MassiveProfile, delimiter_ids, position_class
from layerscope.engine.forward.batching import collate
from layerscope.errors import ExtractionError

DOT, COMMA = 17, 15
IDS = [[1, 50, DOT, 60, DOT], [50, 60, DOT, COMMA], [50, 60]]
"""Three texts: BOS then a '.', a '.' after two tokens, no delimiter."""
CLASS_ROWS = [[0, 2, 1, 2, 2], [0, 2, 1, 2], [0, 2]]
"""Their position classes, by hand."""
D = 4


def real_values(seed: int) -> list[list[list[float]]]:
    """Per text, per real token, D values: small noise, with planted spikes (text 0: position 0 dim 3, the
    start token; text 1: its first '.', position 2, dim 1; text 2: a milder one at position 1 dim 3)."""
    gen = torch.Generator().manual_seed(seed)
    texts = [torch.randn(len(ids), D, generator=gen, dtype=torch.float64).tolist() for ids in IDS]
    texts[0][0][3] = -500.0
    texts[1][2][1] = 300.0
    texts[2][1][3] = 40.0
    return texts


def padded(texts: list[list[list[float]]], pad: float, side: str = "right") -> torch.Tensor:
    """(3, 5, D) float32 with ``pad`` at every padded position."""
    width = max(len(t) for t in texts)
    hidden = torch.full((len(texts), width, D), pad, dtype=torch.float64)
    for row, text in enumerate(texts):
        start = width - len(text) if side == "left" else 0
        hidden[row, start : start + len(text)] = torch.tensor(text, dtype=torch.float64)
    return hidden.float()


def expected(texts: list[list[list[float]]]) -> dict:
    """Every output of one layer, by loops over the real values (the float32 values the model would hold)."""
    texts = [[[float(np.float32(v)) for v in token] for token in text] for text in texts]
    ratios, top_classes, top_dims = [], [], []
    class_ratios = {code: [] for code in range(3)}
    for text, classes in zip(texts, CLASS_ROWS, strict=True):
        flat = [abs(v) for token in text for v in token]
        median = statistics.median(flat)
        best, where = -1.0, None
        for position, token in enumerate(text):
            for dim, v in enumerate(token):
                if abs(v) > best:
                    best, where = abs(v), (position, dim)
        ratios.append(best / median)
        top_classes.append(classes[where[0]])
        top_dims.append(where[1])
        for code in range(3):
            peaks = [max(abs(v) for v in token) for token, c in zip(text, classes, strict=True) if c == code]
            if peaks:
                class_ratios[code].append(max(peaks) / median)
    n = len(texts)
    fixed = max(set(top_dims), key=top_dims.count)
    return {
        "massive_ratio": statistics.median(ratios),
        "massive_ratio_max": max(ratios),
        "top_share": [top_classes.count(code) / n for code in range(3)],
        "fixed_dim": fixed,
        "fixed_dim_share": top_dims.count(fixed) / n,
        "class_map": [statistics.fmean(r) if r else math.nan for r in class_ratios.values()],
    }


def batch_and_classes(side: str = "right"):
    batch = collate(IDS, np.arange(3), pad_id=0, side=side)
    return batch, position_class(batch, frozenset({DOT, COMMA}))


def check(summary, row: int, want: dict) -> None:
    assert summary.n_texts[row] == 3
    assert summary.massive_ratio[row] == pytest.approx(want["massive_ratio"], rel=1e-12)
    assert summary.massive_ratio_max[row] == pytest.approx(want["massive_ratio_max"], rel=1e-12)
    np.testing.assert_allclose(summary.top_share[row], want["top_share"], rtol=1e-12)
    assert summary.fixed_dim[row] == want["fixed_dim"]
    assert summary.fixed_dim_share[row] == pytest.approx(want["fixed_dim_share"])
    np.testing.assert_allclose(summary.class_map[row], want["class_map"], rtol=1e-12)


def test_profile_matches_loops_over_real_values():
    batch, classes = batch_and_classes()
    profile = MassiveProfile()
    for layer, seed in ((3, 1), (0, 2)):  # any order; the summary sorts layers
        profile.update(layer, padded(real_values(seed), math.nan), batch, classes)
    summary = profile.result()
    assert summary.layers.tolist() == [0, 3]
    assert summary.class_map.shape == (2, len(CLASSES))
    for row, seed in ((0, 2), (1, 1)):
        want = expected(real_values(seed))
        check(summary, row, want)
        # the planted spikes, spelled out: tops on the start, the first '.', an other token; dim 3 twice
        assert want["top_share"] == [1 / 3, 1 / 3, 1 / 3]
        assert (want["fixed_dim"], want["fixed_dim_share"]) == (3, 2 / 3)
    assert summary.per_layer()[3]["top_share"]["first_delimiter"] == pytest.approx(1 / 3)


def test_padding_never_counts():
    """NaN, huge values or left padding in the padded positions: the same summary."""
    summaries = []
    for pad, side in ((math.nan, "right"), (1e9, "right"), (-7.0, "left")):
        batch, classes = batch_and_classes(side)
        profile = MassiveProfile()
        profile.update(0, padded(real_values(5), pad, side), batch, classes)
        summaries.append(profile.result())
    want = expected(real_values(5))
    for summary in summaries:
        check(summary, 0, want)


def test_batches_accumulate_like_one_batch():
    """Two batches (texts 0-1, then text 2) give the summary of the three texts together."""
    texts = real_values(7)
    profile = MassiveProfile()
    for rows in ([0, 1], [2]):
        batch = collate([IDS[r] for r in rows], np.array(rows), pad_id=0)
        classes = position_class(batch, frozenset({DOT, COMMA}))
        profile.update(4, padded([texts[r] for r in rows], math.nan), batch, classes)
    check(profile.result(), 0, expected(texts))


def test_class_map_is_nan_where_a_class_is_absent():
    batch = collate([[50, 60, 70]], np.arange(1), pad_id=0)
    profile = MassiveProfile()
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 60.0]]])
    profile.update(0, hidden, batch, position_class(batch, frozenset({DOT})))
    summary = profile.result()
    # values 1..5 and 60: median (3 + 4) / 2; start peak 2, no delimiter, others' peak 60
    np.testing.assert_allclose(summary.class_map[0], [2 / 3.5, math.nan, 60 / 3.5])
    assert summary.massive_ratio[0] == pytest.approx(60 / 3.5)
    assert summary.top_share[0].tolist() == [0.0, 0.0, 1.0]
    assert (summary.fixed_dim[0], summary.fixed_dim_share[0]) == (1, 1.0)


def test_position_class_by_hand():
    delims = frozenset({7, 9})
    ids = [[7, 5, 9, 7], [5, 6], [4, 4, 4, 9], [9]]  # a delimiter at the start is the start, not the first delimiter
    want = {
        "right": [[0, 2, 1, 2], [0, 2, -1, -1], [0, 2, 2, 1], [0, -1, -1, -1]],
        "left": [[0, 2, 1, 2], [-1, -1, 0, 2], [0, 2, 2, 1], [-1, -1, -1, 0]],
    }
    for side, rows in want.items():
        batch = collate(ids, np.arange(4), pad_id=9, side=side)  # padding with a delimiter id: still -1
        classes = position_class(batch, delims)
        assert classes.dtype == torch.int8
        assert classes.tolist() == rows
    assert position_class(collate(ids, np.arange(4), pad_id=0), frozenset()).tolist()[0] == [0, 2, 2, 2]


@pytest.mark.parametrize("adds_bos", [False, True])
def test_delimiter_ids_match_decoding_every_id(adds_bos):
    tok = tiny.tokenizer(adds_bos)
    want = set()
    for i in range(len(tok)):
        text = tok.decode([i])
        if "\n" in text or text.strip(" ") in {".", ",", ";", ":", "!", "?"}:
            want.add(i)
    assert delimiter_ids(tok) == want
    assert tok.convert_tokens_to_ids(".") in want and tok.convert_tokens_to_ids("<bos>") not in want


def test_errors_name_the_problem():
    batch, classes = batch_and_classes()
    with pytest.raises(ValueError, match="disagree"):
        MassiveProfile().update(0, torch.zeros(3, 4, D), batch, classes)
    empty = collate([[5], []], np.arange(2), pad_id=0)
    with pytest.raises(ExtractionError, match="text 1 has no tokens"):
        MassiveProfile().update(0, torch.ones(2, 1, D), empty, position_class(empty, frozenset()))


@pytest.mark.parametrize("side", ["right", "left"])
def test_ties_repeated_middle_values_and_mixed_lengths_by_hand(side):
    """Five texts of d = 2 in one batch, by hand. Medians: A's two middle values are equal (2, 2), B's differ
    (2, 5) after a repeated lower one, C's middle values equal its top. Top ties: C's 9 first at (0, 0) (also at
    (1, 1), (2, 0), (2, 1)), D's 8 first at (1, 1) (also (2, 0)), E's 4 first at (0, 0) (also (0, 1))."""
    texts = [
        [[1, 2], [2, 2], [5, 9]],  # A: 1 2 2 2 5 9, median 2; top 9 at (2, 1)
        [[1, 2], [2, 5], [5, 9]],  # B: 1 2 2 5 5 9, median 3.5; top 9 at (2, 1)
        [[9, 1], [3, 9], [9, 9]],  # C: 1 3 9 9 9 9, median 9; top 9 at (0, 0)
        [[1, 2], [3, 8], [8, 4]],  # D: 1 2 3 4 8 8, median 3.5; top 8 at (1, 1)
        [[4, -4]],  # E: 4 4, median 4; top 4 at (0, 0); one token, two padded positions
    ]
    batch = collate([[50] * len(t) for t in texts], np.arange(5), pad_id=0, side=side)
    hidden = torch.full((5, 3, 2), math.nan)
    hidden[4, 1 if side == "right" else 0] = torch.tensor([math.inf, -math.inf])  # E's padding: NaN, +-inf
    for row, text in enumerate(texts):
        start = 3 - len(text) if side == "left" else 0
        hidden[row, start : start + len(text)] = torch.tensor(text, dtype=torch.float32)
    profile = MassiveProfile()
    profile.update(0, hidden, batch, position_class(batch, frozenset({DOT})))
    summary = profile.result()
    ratios = [9 / 2, 9 / 3.5, 9 / 9, 8 / 3.5, 4 / 4]
    assert summary.massive_ratio[0] == pytest.approx(8 / 3.5, rel=1e-12)  # the middle of the sorted ratios
    assert summary.massive_ratio_max[0] == pytest.approx(max(ratios), rel=1e-12)
    assert summary.top_share[0].tolist() == pytest.approx([2 / 5, 0.0, 3 / 5])  # C, E on the start; A, B, D other
    assert (summary.fixed_dim[0], summary.fixed_dim_share[0]) == (1, pytest.approx(3 / 5))  # A, B, D; C, E dim 0
    start = [2 / 2, 2 / 3.5, 9 / 9, 2 / 3.5, 4 / 4]  # each text's start-token peak / median
    other = [9 / 2, 9 / 3.5, 9 / 9, 8 / 3.5]  # E has no other token
    np.testing.assert_allclose(summary.class_map[0], [sum(start) / 5, math.nan, sum(other) / 4], rtol=1e-12)
