"""Pair runs built from arrays, so study analyses can be checked against naive loops."""

import numpy as np

from layerscope.data.pairs import Category, PairDataset
from layerscope.engine.activations import Activations, ExtractSettings
from layerscope.models.info import ModelInfo
from layerscope.studies.inputs import PairRun


def pair_run(seed=0, sizes=(5, 6, 4, 7, 5, 6), n_layers=8, d=6, name="synthetic") -> PairRun:
    rng = np.random.default_rng(seed)
    n_pairs = sum(sizes)
    categories = tuple(Category(name=f"c{c}", pairs=tuple((f"a{c}-{i}", f"b{c}-{i}") for i in range(k)))
                       for c, k in enumerate(sizes))
    pairs = PairDataset(categories=categories, source="synthetic")
    base = rng.normal(size=(1, n_layers + 1, d))
    pooled = {p: (base + rng.normal(scale=0.5 + 0.1 * np.arange(n_layers + 1)[:, None],
                                     size=(2 * n_pairs, n_layers + 1, d))).astype(np.float32)
              for p in ("mean", "last", "first")}
    n_scored = rng.integers(5, 15, size=2 * n_pairs)
    nll_sum = rng.uniform(2, 6, size=2 * n_pairs) * n_scored
    info = ModelInfo(name=name, source=name, revision=None, architecture="Synthetic", n_layers=n_layers,
                     hidden_size=d, vocab_size=10, bos_token_id=None, adds_bos=False, last_hidden_normed=True,
                     weights_hash="0" * 64, dtype="float32", device="cpu")
    acts = Activations(texts=pairs.texts(), pooled=pooled, nll_sum=nll_sum, n_scored=n_scored,
                       n_tokens=n_scored + 1, settings=ExtractSettings(), model=info, fingerprint="f" * 64)
    return PairRun(acts=acts, pairs=pairs, layers=list(range(n_layers + 1)))
