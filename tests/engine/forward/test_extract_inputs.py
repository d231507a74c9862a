import numpy as np
import pytest

import tiny
from layerscope import ExtractionError, extract


@pytest.fixture(scope="module")
def lm():
    return tiny.tiny_lm("llama")


@pytest.mark.parametrize("kwargs, message", [
    ({"texts": []}, "non-empty list of texts"),
    ({"texts": "one string"}, "non-empty list of texts"),
    ({"texts": ["fine", "  "]}, "text 1 is '  '"),
    ({"texts": ["fine", None]}, "text 1 is None"),
    ({"poolings": ("mean", "max")}, "unknown pooling ['max']"),
    ({"compat": "notebook"}, "unknown compat mode 'notebook'"),
    ({"batch_size": 0}, "batch size must be a positive integer"),
    ({"padding_side": "middle"}, "padding side must be 'left' or 'right'"),
])
def test_bad_arguments_are_clear_errors(lm, kwargs, message):
    kwargs = {"texts": ["A cat.", "A dog."], **kwargs}
    with pytest.raises(ExtractionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        extract(lm, kwargs.pop("texts"), cache=False, **kwargs)


def test_a_subset_of_poolings_gives_the_same_vectors(lm):
    full = extract(lm, tiny.TEXTS, cache=False)
    last_only = extract(lm, tiny.TEXTS, poolings=("last",), cache=False)
    assert list(last_only.pooled) == ["last"]
    np.testing.assert_array_equal(last_only.pooled["last"], full.pooled["last"])


def test_truncation_scores_only_the_kept_tokens(lm):
    acts = extract(lm, tiny.TEXTS, max_length=4, cache=False)
    long = [len(lm.tokenizer(t)["input_ids"]) for t in tiny.TEXTS]
    assert acts.n_tokens.tolist() == [min(n, 4) for n in long]
    assert acts.n_scored.tolist() == [min(n, 4) - 1 for n in long]
