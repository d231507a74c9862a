import numpy as np
import torch

import tiny
from layerscope.engine.forward.tokens import token_states


@torch.no_grad()
def test_token_states_equal_each_text_alone():
    lm = tiny.tiny_lm("gpt2", adds_bos=True)
    states = token_states(lm, tiny.TEXTS, batch_size=4)
    lengths = [len(lm.tokenizer(t)["input_ids"]) for t in tiny.TEXTS]
    assert states.layers.shape == (4, sum(lengths), 32) and states.layers.dtype == np.float32
    start = 0
    for i, text in enumerate(tiny.TEXTS):
        enc = lm.tokenizer(text, return_tensors="pt")
        hs = lm.model(**enc, output_hidden_states=True).hidden_states
        block = slice(start, start + lengths[i])
        for layer, h in enumerate(hs):
            np.testing.assert_allclose(states.layers[layer, block], h[0].numpy(), rtol=1e-4, atol=1e-5)
        assert states.text_index[block].tolist() == [i] * lengths[i]
        assert states.position[block].tolist() == list(range(lengths[i]))
        assert states.token_id[block].tolist() == enc["input_ids"][0].tolist()
        start += lengths[i]
    no_first = states.select(states.position > 0)
    assert no_first.layers.shape[1] == sum(lengths) - len(tiny.TEXTS)
    assert (no_first.token_id != lm.tokenizer.bos_token_id).all()
