"""Fake quantization against values worked out by hand (4 bits: levels -8..7, scale = absmax / 7)."""

import pytest
import torch

from layerscope.errors import LayerscopeError
from layerscope.quant import fake_quantize

W = torch.tensor([[0.66, -0.26], [0.13, 1.4]])
S = 0.66 / 7  # row 0's per-channel scale


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b), rtol=1e-6, atol=1e-7)


def test_per_tensor_uses_one_scale():
    # scale 1.4 / 7 = 0.2: w / 0.2 = [3.3, -1.3, 0.65, 7] rounds to [3, -1, 1, 7]
    close(fake_quantize(W, 4, "per-tensor"), [[0.6, -0.2], [0.2, 1.4]])


def test_per_channel_uses_one_scale_per_output_row():
    # row 0: -0.26 / (0.66 / 7) = -2.76 -> -3; row 1: scale 0.2, 0.13 / 0.2 = 0.65 -> 1
    close(fake_quantize(W, 4, "per-channel"), [[0.66, -3 * S], [0.2, 1.4]])


def test_groups_split_each_row_and_pad_the_last_group():
    row = torch.tensor([[0.66, -0.26, 0.13, 1.4]])
    close(fake_quantize(row, 4, "group:2"), [[0.66, -3 * S, 0.2, 1.4]])
    # group:3 -> [0.66, -0.26, 0.13] share scale 0.66/7 (0.13 / S = 1.38 -> 1), [1.4] is alone
    close(fake_quantize(row, 4, "group:3"), [[0.66, -3 * S, S, 1.4]])


def test_conv1d_weights_have_their_channels_in_columns():
    close(fake_quantize(W.T.contiguous(), 4, "per-channel", channel_axis=1), [[0.66, 0.2], [-3 * S, 1.4]])


def test_vectors_are_quantized_per_tensor_and_zeros_stay_zero():
    close(fake_quantize(torch.tensor([0.66, -0.26, 0.13, 1.4]), 4, "per-channel"), [0.6, -0.2, 0.2, 1.4])
    close(fake_quantize(torch.tensor([[0.0, 0.0], [0.13, 1.4]]), 4, "per-channel"), [[0.0, 0.0], [0.2, 1.4]])
    assert torch.equal(fake_quantize(torch.zeros(3, 2), 4, "per-tensor"), torch.zeros(3, 2))


def test_eight_bits_and_dtype_are_kept():
    w = torch.tensor([[1.0, 0.3]], dtype=torch.float16)
    out = fake_quantize(w, 8, "per-tensor")  # scale 1 / 127: 0.3 * 127 = 38.1 -> 38
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, torch.tensor([[1.0, 38 / 127]], dtype=torch.float16))


@pytest.mark.parametrize("bits, scheme, message", [
    (1, "per-tensor", "2 to 16 bits"), (4, "group:0", "group:N"), (4, "per-row", "unknown quantization scheme"),
])
def test_bad_settings_are_named(bits, scheme, message):
    with pytest.raises(LayerscopeError, match=message):
        fake_quantize(W, bits, scheme)
