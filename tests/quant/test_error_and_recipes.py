"""Quantization error by hand (SQNR, relative weight error), the study's per-layer SQNR against a quantized copy of
the model, and the recipes touching exactly the weights they name."""

import copy
import math

import numpy as np
import pytest
import torch

import tiny
from layerscope.engine.interventions.scoring import Scorer
from layerscope.models import decoder_layers
from layerscope.quant import RECIPES, fake_quantize, quantize_layers, sqnr_db, target_params, weight_rel_err
from layerscope.studies.ablation.configs import Variant
from layerscope.studies.ablation.layer_error import LayerErrors

# -- the measures by hand --


def test_sqnr_and_weight_error_of_a_2x2_weight_at_2_bits_by_hand():
    w = torch.tensor([[0.9, -0.3], [0.2, 0.6]], dtype=torch.float64)
    # 2 bits: levels -2..1, scale = absmax / 1 = 0.9; w / 0.9 = [[1, -0.33], [0.22, 0.67]] rounds to [[1, 0], [0, 1]]
    w_q = fake_quantize(w, 2, "per-tensor")
    assert w_q.flatten().tolist() == pytest.approx([0.9, 0.0, 0.0, 0.9])
    # x = (1, 2): y = W x = (0.9 - 0.6, 0.2 + 1.2) = (0.3, 1.4); y_q = W_q x = (0.9, 1.8); y - y_q = (-0.6, -0.4)
    y, y_q = [0.3, 1.4], [0.9, 1.8]
    signal = 0.3**2 + 1.4**2  # 2.05
    noise = (0.3 - 0.9) ** 2 + (1.4 - 1.8) ** 2  # 0.52
    assert sqnr_db(signal, noise) == pytest.approx(10 * math.log10(2.05 / 0.52))  # 5.957 dB
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert (w @ x).tolist() == pytest.approx(y) and (w_q @ x).tolist() == pytest.approx(y_q)
    # ||W - W_q||^2 = 0 + 0.3^2 + 0.2^2 + 0.3^2 = 0.22; ||W||^2 = 0.81 + 0.09 + 0.04 + 0.36 = 1.30
    assert weight_rel_err([w], [w_q]) == pytest.approx(math.sqrt(0.22 / 1.30))


def test_3_bit_per_channel_rows_by_hand():
    w = torch.tensor([[0.3, -0.1, 0.04], [-2.0, 0.5, 1.2]], dtype=torch.float64)
    # 3 bits: levels -4..3; row 0: scale 0.3 / 3 = 0.1 -> (3, -1, 0.4 -> 0); row 1: scale 2 / 3 -> (-3, 0.75 -> 1,
    # 1.8 -> 2)
    expected = [[0.3, -0.1, 0.0], [-2.0, 2 / 3, 4 / 3]]
    flat = [x for row in expected for x in row]
    assert fake_quantize(w, 3, "per-channel").flatten().tolist() == pytest.approx(flat)
    assert fake_quantize(w.T, 3, "per-channel", channel_axis=1).T.flatten().tolist() == pytest.approx(flat)
    # two tensors taken together, not averaged: (0.04^2 + (0.5 - 2/3)^2 + (1.2 - 4/3)^2) / sum of squares
    num = 0.04**2 + (0.5 - 2 / 3) ** 2 + (1.2 - 4 / 3) ** 2
    den = 0.09 + 0.01 + 0.0016 + 4.0 + 0.25 + 1.44
    assert weight_rel_err(list(w), list(torch.tensor(expected, dtype=torch.float64))) == pytest.approx(
        math.sqrt(num / den))


def test_sqnr_edges_and_arrays():
    assert sqnr_db(1.0, 0.0) == math.inf
    assert math.isnan(sqnr_db(0.0, 0.0))
    assert sqnr_db(0.0, 1.0) == -math.inf
    assert sqnr_db(np.array([100.0, 1.0, 5.0]), np.array([1.0, 1.0, 0.0])).tolist() == [20.0, 0.0, math.inf]
    zero = torch.zeros(2, 2)
    assert math.isnan(weight_rel_err([zero], [zero]))
    assert weight_rel_err([torch.ones(3)], [torch.ones(3)]) == 0.0


# -- the study's per-layer SQNR against a quantized copy of the model --


def linear_names(arch, name):
    """My own rule for the linear weights of a decoder block (GPT-2: Conv1D, channels in columns)."""
    if arch == "gpt2":
        return name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
    return name.endswith("proj.weight")


def naive(w, bits, scheme, axis=0):
    """Symmetric round-to-nearest written out: one scale per tensor, per output channel or per group of inputs."""
    qmax, qmin = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))

    def rtn(v):
        s = v.abs().max() / qmax
        return v.clone() if s == 0 else torch.clamp(torch.round(v / s), qmin, qmax) * s

    if scheme == "per-tensor" or w.dim() == 1:
        return rtn(w)
    rows = w.T if axis == 1 else w
    size = rows.shape[1] if scheme == "per-channel" else int(scheme.split(":")[1])
    out = torch.stack([torch.cat([rtn(r[i:i + size]) for i in range(0, len(r), size)]) for r in rows])
    return out.T if axis == 1 else out


def hidden_after(model, tokenizer, texts, layer):
    """Per text: the residual stream after decoder block ``layer`` (T, d), run text by text, no padding."""
    with torch.no_grad():
        return [model(tokenizer(t, return_tensors="pt")["input_ids"], output_hidden_states=True)
                .hidden_states[layer + 1][0].double() for t in texts]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_layer_sqnr_equals_a_quantized_copy_of_the_model(arch, languages):
    lm = tiny.tiny_lm(arch, adds_bos=arch == "gpt2", n_layers=4)
    original = copy.deepcopy(lm.model)
    variant = Variant("pc", "per-channel", "linear", sweep=True, bits=4)
    errors = LayerErrors(lm, {"pc": (variant, {0, 1, 2, 3})}, n_texts=7)
    texts = [text for _, _, text in languages.texts()]
    Scorer(lm, texts, batch_size=3).score(watch=errors.measuring)
    rows = errors.rows(languages)
    assert all(torch.equal(a, b) for a, b in zip(lm.model.state_dict().values(), original.state_dict().values(),
                                                 strict=True))
    for layer in range(3):  # hidden_states[4] is after the final norm: the last block's output is not in it
        quantized = copy.deepcopy(original)
        old, new = [], []
        with torch.no_grad():
            for name, p in decoder_layers(quantized)[layer].named_parameters():
                if linear_names(arch, name):
                    old.append(p.detach().clone())
                    p.copy_(naive(p, 4, "per-channel", 1 if arch == "gpt2" else 0))
                    new.append(p.detach().clone())
        frobenius = math.sqrt(sum(float(((a.double() - b.double()) ** 2).sum()) for a, b in zip(old, new, strict=True))
                              / sum(float((a.double() ** 2).sum()) for a in old))
        ys = hidden_after(original, lm.tokenizer, texts, layer)
        yqs = hidden_after(quantized, lm.tokenizer, texts, layer)
        for lang, keep in ((None, range(7)), ("en", range(4)), ("sw", range(4, 7))):
            signal = sum(float((ys[i] ** 2).sum()) for i in keep)
            noise = sum(float(((ys[i] - yqs[i]) ** 2).sum()) for i in keep)
            signal_rest = sum(float((ys[i][1:] ** 2).sum()) for i in keep)
            noise_rest = sum(float(((ys[i][1:] - yqs[i][1:]) ** 2).sum()) for i in keep)
            row = next(r for r in rows if r["layer"] == layer and r["lang"] == lang)
            assert row["sqnr_db"] == pytest.approx(10 * math.log10(signal / noise), rel=1e-4), (layer, lang)
            assert row["sqnr_db_excl_pos0"] == pytest.approx(10 * math.log10(signal_rest / noise_rest), rel=1e-4)
            assert row["weight_rel_err"] == pytest.approx(frobenius, rel=1e-6)
    assert sorted((r["layer"], r["lang"] or "") for r in rows) == sorted(
        (layer, lang) for layer in range(4) for lang in ("", "en", "sw"))


# -- the recipes --


def block_prefix(arch):
    return "transformer.h." if arch == "gpt2" else "model.layers."


def expected_changes(arch, model, targets):
    """State-dict names a recipe must change, by my own rule on the names."""
    out = set()
    for name, _ in model.named_parameters():
        if not name.startswith(block_prefix(arch)):
            continue
        local = name.split(".", 3)[3]  # model.layers.1.mlp.up_proj.weight -> mlp.up_proj.weight
        if (targets == "linear" and linear_names(arch, local)) or (targets == "all-weights" and "weight" in local):
            out.add(name)
    return out


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_each_recipe_changes_exactly_the_weights_it_names(arch, recipe):
    r = RECIPES[recipe]
    lm = tiny.tiny_lm(arch, n_layers=3)
    with torch.no_grad():  # 1-D parameters (norms, biases) start at 0 or 1, which quantizing leaves as they are
        for p in lm.model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    bits = r.bits or 4
    quantize_layers(target_params(lm.model, range(3), r.targets), bits, r.scheme)
    after = lm.model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed == expected_changes(arch, lm.model, "linear" if r.name != "notebook" else "all-weights")
    assert not any(k.startswith("lm_head") or "wte" in k or "wpe" in k or "embed" in k or k.endswith("bias")
                   or "ln_f" in k or k == "model.norm.weight" for k in changed)
    name = f"{block_prefix(arch)}1.mlp.{'c_fc' if arch == 'gpt2' else 'down_proj'}.weight"
    scheme = {"notebook": "per-tensor", "per-channel": "per-channel", "group128": "group:128",
              "int8": "per-channel"}[recipe]
    assert (r.bits, bits) == ((8, 8) if recipe == "int8" else (None, 4))
    assert torch.equal(after[name], naive(before[name], bits, scheme, 1 if arch == "gpt2" else 0))


@pytest.mark.parametrize("axis", [0, 1])
def test_group128_pads_the_last_group_of_300_inputs(axis):
    torch.manual_seed(0)
    w = torch.randn(3, 300)
    w[:, 290] = 40.0  # an outlier in the last group (inputs 256..299) must not reach the first two groups' scales
    w[:, 5] = 0.0
    got = fake_quantize(w if axis == 0 else w.T, 4, "group:128", channel_axis=axis)
    got = got if axis == 0 else got.T
    for row in range(3):
        for lo, hi in ((0, 128), (128, 256), (256, 300)):
            chunk = w[row, lo:hi]
            scale = chunk.abs().max() / 7
            assert torch.equal(got[row, lo:hi], torch.clamp(torch.round(chunk / scale), -8, 7) * scale), (row, lo)
    assert got[:, 290].tolist() == [40.0] * 3 and got[:, 5].tolist() == [0.0] * 3
    assert not torch.equal(got, fake_quantize(w, 4, "per-channel"))  # one scale per row would differ
