import numpy as np
import torch

from layerscope.engine.forward.batching import collate, plan_batches


def test_plan_batches_sorts_longest_first_and_covers_every_text_once():
    lengths = [3, 9, 1, 9, 4, 7, 2]
    batches = plan_batches(lengths, 3)
    assert [b.tolist() for b in batches] == [[1, 3, 5], [4, 0, 6], [2]]
    assert sorted(np.concatenate(batches).tolist()) == list(range(7))


def test_collate_right_padding():
    b = collate([[5, 6, 7], [8]], np.array([4, 2]), pad_id=0, side="right")
    assert b.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert b.position_ids[0].tolist() == [0, 1, 2] and b.position_ids[1, 0] == 0
    assert b.first.tolist() == [0, 0] and b.last.tolist() == [2, 0]
    assert b.index.tolist() == [4, 2]


def test_collate_left_padding_counts_positions_from_the_first_real_token():
    b = collate([[5, 6, 7], [8, 9]], np.array([0, 1]), pad_id=3, side="left")
    assert b.input_ids.tolist() == [[5, 6, 7], [3, 8, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert b.position_ids[1, 1:].tolist() == [0, 1]
    assert b.first.tolist() == [0, 1] and b.last.tolist() == [2, 2]
    assert b.input_ids.dtype == torch.long


def test_token_budget_caps_padded_tokens_but_keeps_one_text():
    lengths = [10, 3, 8, 2, 2, 50]
    batches = plan_batches(lengths, batch_size=4, max_tokens=20)
    assert [b.tolist() for b in batches] == [[5], [0, 2], [1, 3, 4]]
    for b in batches[1:]:
        assert len(b) * max(lengths[i] for i in b) <= 20
    assert sorted(np.concatenate(batches).tolist()) == list(range(6))
