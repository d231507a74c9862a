"""Pair runs built from arrays, so study analyses can be checked against naive loops."""

import dataclasses

import numpy as np

from layerscope.data.pairs import Category, PairDataset
from layerscope.engine.forward.activations import Activations, ExtractSettings
from layerscope.models.info import ModelInfo
from layerscope.studies.shared.inputs import PairRun


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


def without(run: PairRun, name: str) -> PairRun:
    """The run rebuilt from scratch without category ``name``: its pairs, texts and array rows left out."""
    keep_pairs = np.array([c.name != name for c in run.pairs.categories for _ in c.pairs])
    keep = np.repeat(keep_pairs, 2)  # the A and B rows of each pair
    pairs = PairDataset(categories=tuple(c for c in run.pairs.categories if c.name != name), source="synthetic")
    acts = Activations(texts=pairs.texts(), pooled={p: x[keep] for p, x in run.acts.pooled.items()},
                       nll_sum=run.acts.nll_sum[keep], n_scored=run.acts.n_scored[keep],
                       n_tokens=run.acts.n_tokens[keep], settings=run.acts.settings, model=run.acts.model,
                       fingerprint=run.acts.fingerprint)
    return PairRun(acts=acts, pairs=pairs, layers=run.layers)


def with_scores(run: PairRun, nll_sum, n_scored, n_tokens) -> PairRun:
    """The run with these per-text scores (each (2 n_pairs,), A of pair i at 2i, B at 2i + 1)."""
    acts = dataclasses.replace(run.acts, nll_sum=np.asarray(nll_sum, dtype=np.float64),
                               n_scored=np.asarray(n_scored), n_tokens=np.asarray(n_tokens))
    return PairRun(acts=acts, pairs=run.pairs, layers=run.layers)
