"""``ls.probe`` on extracted activations: the state vectors it reads are the pooled states with the last one
before the final norm (recomputed by hand), and a planted contrast is found at every state."""

import numpy as np
import pytest
import torch

import layerscope as ls
import tiny
from layerscope.engine.forward.probing import state_vectors


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    lm = tiny.tiny_lm("llama", adds_bos=False, n_layers=3)
    texts = [f"Without doubt {s} grew in {1900 + i}." for i, s in enumerate(tiny.SUBJECTS)] + \
        [f"Maybe {s} grew a little in {1900 + i}." for i, s in enumerate(tiny.SUBJECTS)]
    return lm, texts, ls.extract(lm, texts, cache=tmp_path_factory.mktemp("cache"))


def test_state_vectors_are_token_means_with_the_last_before_the_final_norm(extracted):
    lm, texts, acts = extracted
    X = state_vectors(acts)
    assert X.shape == (len(texts), 4, lm.info.hidden_size)
    seen = {}
    handle = lm.model.model.layers[-1].register_forward_hook(lambda m, a, o: seen.__setitem__("x", o))
    with torch.no_grad():
        for i in (0, len(texts) - 1):
            ids = lm.tokenizer(texts[i], return_tensors="pt")["input_ids"]
            hidden = lm.model(input_ids=ids, output_hidden_states=True).hidden_states
            last = seen["x"][0] if isinstance(seen["x"], tuple) else seen["x"]
            expected = [h[0].double().mean(0).numpy() for h in hidden[:-1]] + [last[0].double().mean(0).numpy()]
            np.testing.assert_allclose(X[i], np.array(expected), rtol=1e-4, atol=1e-5)
    handle.remove()


def test_probe_finds_the_planted_side_at_every_state(extracted):
    _, texts, acts = extracted
    n = len(texts) // 2
    labels = ["A"] * n + ["B"] * n
    groups = [f"g{i}" for i in range(n)] * 2  # a subject's two texts: one group
    prof = ls.probe(acts, labels, groups=groups, method="mass_mean", folds=3, n_bootstrap=200, n_permutations=50)
    assert prof.accuracy.shape == (4,) and np.all(prof.accuracy == 1.0)  # 'Without doubt' vs 'Maybe'
    assert np.all(prof.q < 0.05) and prof.plateau_from == 0
