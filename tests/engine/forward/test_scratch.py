"""Reused host buffers (:mod:`layerscope.engine.forward.scratch`) and the head written into one: the same
numbers as fresh tensors, the same memory from batch to batch."""

import pytest
import torch
import torch.nn.functional as F

from layerscope.engine.forward.head import _head_into
from layerscope.engine.forward.scratch import Scratch, for_device


def test_a_name_gives_views_of_one_buffer_grown_only_when_asked_for_more():
    scratch = Scratch()
    a = scratch.tensor("kept", (3, 4, 5), torch.float32)
    assert a.shape == (3, 4, 5) and a.dtype == torch.float32 and a.is_contiguous()
    a.copy_(torch.arange(60.0).view(3, 4, 5))
    b = scratch.tensor("kept", (2, 5), torch.float32)  # smaller: the same memory, the old contents
    assert b.data_ptr() == a.data_ptr() and torch.equal(b, torch.arange(10.0).view(2, 5))
    c = scratch.tensor("kept", (7, 11), torch.float64)  # larger: a new buffer of exactly that size
    assert c.shape == (7, 11) and c.dtype == torch.float64 and scratch.nbytes == 7 * 11 * 8
    d = scratch.tensor("logits", (2, 3), torch.bfloat16)  # another name: its own buffer
    assert d.data_ptr() != c.data_ptr() and scratch.nbytes == 7 * 11 * 8 + 2 * 3 * 2


def test_the_same_request_gets_the_same_view_and_another_dtype_or_size_a_view_of_its_own():
    scratch = Scratch()
    a = scratch.tensor("prod", (2, 3), torch.float32)
    assert scratch.tensor("prod", (2, 3), torch.float32) is a  # asked again (per layer): nothing made
    b = scratch.tensor("prod", (2, 3), torch.int32)  # the same shape, another dtype: its own view of the bytes
    assert b.dtype == torch.int32 and b.data_ptr() == a.data_ptr()
    c = scratch.tensor("prod", (4, 5), torch.float32)  # more than the buffer holds: a new buffer, a new view
    assert c.shape == (4, 5) and scratch.nbytes == 4 * 5 * 4
    d = scratch.tensor("prod", (2, 3), torch.float32)  # back to the first request: a view of the new buffer
    assert d.data_ptr() == c.data_ptr() and d.shape == (2, 3)


def test_only_the_cpu_gets_a_scratch():
    assert isinstance(for_device(torch.device("cpu")), Scratch)
    assert for_device(torch.device("meta")) is None


@pytest.mark.parametrize("bias", [False, True])
def test_a_linear_head_writes_its_logits_into_the_buffer_with_the_same_numbers(bias):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=bias)
    scratch = Scratch()
    for rows in (5, 3, 9):  # smaller, then larger than the buffer
        x = torch.randn(rows, 8)
        with torch.inference_mode():  # as the passes run it
            got = _head_into(head, x, scratch)
            assert torch.equal(got, F.linear(x, head.weight, head.bias))
            assert got.data_ptr() == scratch.tensor("logits", (rows, 50), torch.float32).data_ptr()


def test_a_hooked_head_or_one_under_autograd_is_called_and_keeps_its_own_memory():
    head = torch.nn.Linear(8, 50)
    x, scratch, seen = torch.randn(4, 8), Scratch(), []
    assert torch.equal(_head_into(head, x, scratch), head(x)) and scratch.nbytes == 0  # autograd on
    handle = head.register_forward_hook(lambda _m, _a, out: seen.append(out.shape))
    with torch.inference_mode():
        assert torch.equal(_head_into(head, x, scratch), head(x))
    handle.remove()
    assert seen == [(4, 50), (4, 50)] and scratch.nbytes == 0


def test_another_head_is_called_as_it_is():
    head = torch.nn.Sequential(torch.nn.Linear(8, 50), torch.nn.Tanh())
    x = torch.randn(4, 8)
    scratch = Scratch()
    assert torch.equal(_head_into(head, x, scratch), head(x)) and scratch.nbytes == 0
