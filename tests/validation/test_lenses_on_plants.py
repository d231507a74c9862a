"""The logit and the tuned lens read identical states identically: on a copy with blocks that write nothing, the
inserted blocks' states are one state, so the lens grid is the same there and a tuned lens trained on the copy
learns the same translator for each of them (every translator is fitted to its own state alone)."""

import sys
from pathlib import Path

import torch

from layerscope.engine.lenses.prompt import lens
from layerscope.engine.lenses.tuned_train import train_tuned_lens
from layerscope.models import LoadedModel
from layerscope.plant import inserted_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tiny  # noqa: E402


def planted(at: int = 2, k: int = 3):
    tok = tiny.tokenizer(False)
    torch.manual_seed(0)
    return inserted_identity(LoadedModel.wrap(tiny.model("llama", len(tok), 5), tok, name="tiny"), at, k)


def test_the_logit_lens_grid_is_identical_across_inserted_blocks():
    lm = planted()
    grid = lens(lm, "The river carried small boats past the old mill")
    tokens, probs = grid.top1(column="token_id"), grid.top1(column="prob")
    for s in range(3, 6):  # states 2..5 are one state: the same top-1 token and probability at every position
        assert tokens.loc[s].tolist() == tokens.loc[2].tolist()
        assert probs.loc[s].tolist() == probs.loc[2].tolist()
    assert probs.loc[1].tolist() != probs.loc[2].tolist()  # block 1 writes: state 2 is not state 1


def test_a_tuned_lens_trained_on_the_copy_has_one_translator_for_the_inserted_states():
    lm = planted()
    trained = train_tuned_lens(lm, tiny.CORPUS + tiny.TEXTS, steps=3, tokens_per_step=64, progress=False, seed=1)
    weights = [trained.translators[s].weight.detach() for s in range(2, 6)]
    biases = [trained.translators[s].bias.detach() for s in range(2, 6)]
    for w, b in zip(weights[1:], biases[1:], strict=True):
        assert torch.allclose(w, weights[0], atol=1e-6) and torch.allclose(b, biases[0], atol=1e-6)
    assert not torch.allclose(trained.translators[1].weight, weights[0], atol=1e-3)  # another state, another map
