"""Each bad input to a plant is one PlantError (a LayerscopeError) whose message names the problem and the fix,
raised before anything is copied; a model whose block list cannot be edited says which architectures are
supported and why this one is not."""

import copy

import pytest
from torch import nn
from transformers import LlamaConfig

import planted
from layerscope.engine.interventions.surgery import Intervention, intervened
from layerscope.errors import LayerscopeError
from layerscope.models import LoadedModel
from layerscope.plant import PlantError, duplicated_band, inserted_identity, removed_band, scaled_writes

SUPPORTED = "decoder-only transformers causal LMs"

CASES = [  # (plant, arguments, words of the message); the model has 4 blocks
    (inserted_identity, (5, 1), ["at=5 is outside the model's depth", "4 decoder blocks", "at must be in 0..4"]),
    (inserted_identity, (-1, 1), ["at=-1 is outside", "at must be in 0..4"]),
    (inserted_identity, (1, 0), ["k=0 plants nothing", "pass k >= 1"]),
    (inserted_identity, (1, -2), ["k=-2 plants nothing", "pass k >= 1"]),
    (inserted_identity, (1.5, 1), ["at must be a whole number, got 1.5", "pass an int"]),
    (inserted_identity, (True, 1), ["at must be a whole number", "pass an int"]),
    (duplicated_band, (3, 2), ["blocks 3..4, outside the model's depth", "start must be in 0..2"]),
    (duplicated_band, (-1, 1), ["start=-1", "start must be in 0..3"]),
    (duplicated_band, (0, 5), ["k=5 is more than the 4 decoder blocks", "pass k <= 4"]),
    (duplicated_band, (0, 0), ["k=0 plants nothing", "pass k >= 1"]),
    (removed_band, (0, 4), ["removing k=4 of the 4 decoder blocks", "leaves none", "k must be at most 3"]),
    (removed_band, (2, 3), ["blocks 2..4, outside the model's depth", "start must be in 0..1"]),
    (removed_band, (1, -1), ["k=-1 plants nothing", "pass k >= 1"]),
    (scaled_writes, (4, 0.5), ["start=4 is outside the model's depth", "start must be in 0..3"]),
    (scaled_writes, (-1, 0.5), ["start=-1 is outside", "start must be in 0..3"]),
    (scaled_writes, (0, float("nan")), ["scale=nan is not a finite number", "pass a finite scale"]),
    (scaled_writes, (0, float("inf")), ["scale=inf is not a finite number", "pass a finite scale"]),
    (scaled_writes, (0, 1), ["scale=1 leaves every write as it is", "pass a scale other than 1"]),
    (scaled_writes, (0, 1.0), ["scale=1", "pass a scale other than 1"]),
    (scaled_writes, (0, "half"), ["scale must be a number, got 'half'", "pass a float"]),
]


@pytest.mark.parametrize("plant, args, words", CASES, ids=[f"{c[0].__name__}{c[1]}" for c in CASES])
def test_each_bad_argument_names_the_fix(plant, args, words):
    lm = planted.model("llama")
    with pytest.raises(PlantError) as caught:
        plant(lm, *args)
    assert isinstance(caught.value, LayerscopeError)
    message = str(caught.value)
    assert message.startswith(plant.__name__ + ": "), message
    for word in words:
        assert word in message, (word, message)


def unsupported(lm: LoadedModel, plant=inserted_identity) -> str:
    with pytest.raises(PlantError) as caught:
        plant(lm, 0, 1)
    message = str(caught.value)
    assert SUPPORTED in message and "decoder_layers" in message, message
    assert "take the hidden state first and return it or a tuple starting with it" in message, message
    return message


def edited(lm: LoadedModel, **config) -> LoadedModel:
    """``lm`` with a deep copy of its model whose config has ``config`` set."""
    model = copy.deepcopy(lm.model)
    for key, value in config.items():
        setattr(model.config, key, value)
    return LoadedModel(model=model, tokenizer=lm.tokenizer, info=lm.info)


def test_a_model_whose_block_list_is_not_found_is_refused():
    lm = planted.model("gpt2")
    message = unsupported(edited(lm, num_hidden_layers=7))
    assert "no nn.ModuleList of config.num_hidden_layers decoder blocks was found" in message


def test_a_config_with_other_per_layer_lists_is_refused():
    lm = planted.model("llama")
    message = unsupported(edited(lm, no_rope_layers=[1, 0, 1, 1]), removed_band)
    assert "no_rope_layers" in message and "only layer_types is rewritten" in message


class Block(nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.layer_idx = index
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        return x + self.lin(x)


class Toy(nn.Module):
    """Not a transformers model: its blocks take ``x`` first."""

    def __init__(self):
        super().__init__()
        self.config = LlamaConfig(num_hidden_layers=2, hidden_size=4, intermediate_size=8, num_attention_heads=1,
                                  vocab_size=10)
        self.layers = nn.ModuleList([Block(0), Block(1)])


def test_blocks_that_do_not_take_the_hidden_state_first_are_refused():
    lm = planted.model("llama")
    message = unsupported(LoadedModel(model=Toy(), tokenizer=lm.tokenizer, info=lm.info), scaled_writes)
    assert "its blocks (Block) do not take the hidden state first" in message


def test_planting_inside_an_intervention_is_refused():
    lm = planted.model("llama")
    with intervened(lm, Intervention.skip(2)):
        with pytest.raises(PlantError, match=r"block 2 of .* runs a replaced forward .* plant the model outside any "
                                             r"intervention"):
            duplicated_band(lm, 0, 1)
    assert "forward" not in lm.model.model.layers[2].__dict__


def test_a_bare_module_is_refused():
    lm = planted.model("llama")
    with pytest.raises(PlantError, match="expected a LoadedModel .* got LlamaForCausalLM; load the model first"):
        inserted_identity(lm.model, 0, 1)
