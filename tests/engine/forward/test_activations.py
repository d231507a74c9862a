import numpy as np

import tiny
from layerscope import Activations, extract


def test_save_and_load_round_trip(tmp_path):
    acts = extract(tiny.tiny_lm("gemma3", adds_bos=True), tiny.TEXTS, compat="notebooks", cache=False)
    acts.save(tmp_path / "a.npz")
    back = Activations.load(tmp_path / "a.npz")
    assert back.texts == acts.texts and back.settings == acts.settings and back.model == acts.model
    assert back.fingerprint == acts.fingerprint
    for p in acts.pooled:
        np.testing.assert_array_equal(back.pooled[p], acts.pooled[p])
    np.testing.assert_array_equal(back.nll_mean, acts.nll_sum / acts.n_scored)
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]  # no temp file left behind
