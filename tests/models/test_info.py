import pytest
import torch

import tiny
from layerscope.models import decoder_layers
from layerscope.models.info import weights_hash

LAYER_PATHS = {"llama": "model.layers", "gpt2": "transformer.h", "gpt_neox": "gpt_neox.layers",
               "opt": "model.decoder.layers", "gemma3": "model.layers"}
FINAL_NORMS = {"llama": "model.norm", "gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm",
               "opt": "model.decoder.final_layer_norm", "gemma3": "model.norm"}


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_decoder_layers_found_across_architectures(arch):
    lm = tiny.tiny_lm(arch, n_layers=4)
    assert decoder_layers(lm.model) is lm.model.get_submodule(LAYER_PATHS[arch])
    assert lm.info.n_layers == 4 and lm.info.hidden_size == 32


@pytest.mark.parametrize("arch", tiny.ARCHS)
@torch.no_grad()
def test_last_hidden_state_is_recorded_as_after_the_final_norm(arch):
    """Reference: apply the architecture's final norm to the last block's output by hand."""
    lm = tiny.tiny_lm(arch)
    captured = []
    lm.model.get_submodule(LAYER_PATHS[arch])[-1].register_forward_hook(
        lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
    ids = torch.tensor([lm.tokenizer("The cat sat on the mat.")["input_ids"]])
    out = lm.model(input_ids=ids, output_hidden_states=True)
    normed = lm.model.get_submodule(FINAL_NORMS[arch])(captured[-1])
    assert torch.allclose(out.hidden_states[-1], normed, atol=1e-6)
    assert lm.info.last_hidden_normed is True


@pytest.mark.parametrize("bos", [False, True])
def test_adds_bos_and_bos_id_recorded(bos):
    lm = tiny.tiny_lm("llama", adds_bos=bos)
    assert lm.info.adds_bos is bos
    assert lm.info.bos_token_id == tiny.tokenizer(bos).convert_tokens_to_ids("<bos>")


def test_weights_hash_tracks_every_weight_and_nothing_else():
    a, b = tiny.model("llama", 400), tiny.model("llama", 400)
    assert weights_hash(a) == weights_hash(b)
    with torch.no_grad():
        b.model.layers[1].mlp.up_proj.weight[3, 5] += 1e-3
    assert weights_hash(a) != weights_hash(b)
    float32_hash = weights_hash(a)
    assert float32_hash != weights_hash(a.to(torch.bfloat16))


def test_weights_hash_counts_tied_weights_once():
    m = tiny.model("gpt2", 400)
    assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
    untied = tiny.model("gpt2", 400)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())
    assert weights_hash(m) != weights_hash(untied)  # the untied copy is hashed as its own tensor
