"""Which weights a configuration touches, and putting them back exactly."""

import torch

import tiny
from layerscope.quant import WeightSnapshot, quantize_layers, target_params


def test_linear_targets_are_the_matrices_and_all_weights_adds_the_norms():
    llama = tiny.tiny_lm("llama").model
    linear = target_params(llama, [1], "linear")
    assert sorted(n.rsplit(".", 2)[-2] for n in linear) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert all(axis == 0 for _, axis in linear.values())
    every = target_params(llama, [1], "all-weights")
    assert set(every) - set(linear) == {"layers.1.input_layernorm.weight", "layers.1.post_attention_layernorm.weight"}


def test_gpt2_conv1d_channels_are_columns():
    gpt2 = tiny.tiny_lm("gpt2").model
    linear = target_params(gpt2, [0, 2], "linear")
    assert len(linear) == 2 * 4 and all(axis == 1 for _, axis in linear.values())
    assert "layers.2.attn.c_attn.weight" in linear and not any("ln_" in n for n in linear)


def test_snapshot_restore_is_bit_identical():
    model = tiny.tiny_lm("llama").model
    with torch.no_grad():  # norm weights start at exactly 1, which 4-bit per-tensor keeps as 1
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = target_params(model, range(3), "all-weights")
    snapshot = WeightSnapshot(params)
    quantize_layers(params, 4, "per-tensor")
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) == len(params)
    snapshot.restore(["layers.0.mlp.up_proj.weight"])
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, before["model.layers.0.mlp.up_proj.weight"])
    assert not torch.equal(model.model.layers[1].mlp.up_proj.weight, before["model.layers.1.mlp.up_proj.weight"])
    snapshot.restore()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
