"""Model runs shared by the pair studies: load each model in turn, extract once, free it.

    pairs = load_pairs(config.dataset)
    without_category(pairs, config.drop_category)      # a bad name fails here, before any model loads
    summaries, rows, manifest = analyse_pairs(config, pairs, lambda run: analyse_model(run, run.layers))

where ``run`` is a :class:`PairRun`: ``run.a("mean")`` is a lazy (n_pairs, n_layers + 1, d) stack for the A
statements (``run.a("mean")[:, l]`` reads layer l alone, (n_pairs, d)), ``run.pref`` is (n_pairs,)
NLL(B) - NLL(A) (> 0: the model prefers A), and ``run.without("numeric_vs_named")`` is the same run on the
other categories' pairs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ...data import PairDataset
from ...engine import Activations, extract
from ...engine.cache.layers import LayerStack
from ...models import ModelInfo
from ...study.config import ConfigError, StudyConfig, select_layers
from ...study.manifests import add_timings, dataset_entry, manifest, model_entry
from ...study.per_model import each_model


@dataclass
class PairRun:
    """One model's activations on a pair dataset, arranged by pair."""

    acts: Activations
    pairs: PairDataset
    layers: list[int]
    """The hidden-state indices to test (from ``config.layers``)."""
    stage: str = "post_norm"
    """What layer ``n_layers`` holds: "post_norm" (transformers' last hidden state, after the final norm) or
    "pre_norm" (the last block's output before it); see :meth:`at_stage`."""

    @property
    def info(self) -> ModelInfo:
        return self.acts.model

    def a(self, pooling: str) -> LayerStack:
        """The A statements' vectors, (n_pairs, n_layers + 1, d), read one layer at a time: ``run.a("mean")[:, l]``."""
        return self.acts.pooled[pooling][0::2]

    def b(self, pooling: str) -> LayerStack:
        return self.acts.pooled[pooling][1::2]

    @property
    def pref(self) -> np.ndarray:
        """Output preference per pair, mean NLL(B) - NLL(A), as the notebooks define it."""
        nll = self.acts.nll_mean
        return nll[1::2] - nll[0::2]

    @property
    def pref_sum(self) -> np.ndarray:
        """(n_pairs,) summed NLL(B) - NLL(A): the preference between the whole statements, which grows with length."""
        return self.acts.nll_sum[1::2] - self.acts.nll_sum[0::2]

    @property
    def len_diff(self) -> np.ndarray:
        """(n_pairs,) tokens of B minus tokens of A."""
        return self.acts.n_tokens[1::2] - self.acts.n_tokens[0::2]

    def at_stage(self, stage: str) -> PairRun:
        """This run with layer ``n_layers`` taken ``"pre_norm"`` (the last block's output, before the final norm)
        or ``"post_norm"`` (as transformers returns it): ``run.at_stage("pre_norm").a("mean")[:, -1]``."""
        if stage == self.stage:
            return self
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; use one of {STAGES}")
        if not self.acts.pre_norm:
            raise ValueError("these activations hold no pre-norm states; extract them again")
        final = self.info.n_layers
        if final not in self.acts.layers:  # the final layer was not extracted: nothing to swap
            return dataclasses.replace(self, stage=stage)
        acts = dataclasses.replace(self.acts, pooled={p: x.with_layer(final, self.acts.pre_norm[p])
                                                      for p, x in self.acts.pooled.items()},
                                   pre_norm={p: x[:, final] for p, x in self.acts.pooled.items()})
        return dataclasses.replace(self, acts=acts, stage=stage)

    def mean_from(self, pooling: str) -> PairRun:
        """This run with its ``mean`` pooling replaced by ``pooling`` (e.g. ``"mean_no_pos0"``), before and after
        the final norm, so an analysis of ``mean`` runs unchanged on the check's tokens."""
        acts = dataclasses.replace(self.acts, pooled={**self.acts.pooled, "mean": self.acts.pooled[pooling]},
                                   pre_norm={**self.acts.pre_norm, "mean": self.acts.pre_norm[pooling]}
                                   if self.acts.pre_norm else {})
        return dataclasses.replace(self, acts=acts)

    def select(self, index) -> PairRun:
        """This run on the pairs at positions ``index`` only: ``run.select([0, 3, 4])``.

        Rows 2i (A) and 2i + 1 (B) of every array are kept for each chosen pair i, in pair order;
        categories left without pairs are left out of ``pairs``.
        """
        index = np.unique(np.asarray(index, dtype=np.int64))
        rows = np.stack([2 * index, 2 * index + 1], axis=1).ravel()
        acts = dataclasses.replace(
            self.acts, texts=[self.acts.texts[i] for i in rows],
            pooled={pooling: x[rows] for pooling, x in self.acts.pooled.items()},
            pre_norm={pooling: x[rows] for pooling, x in self.acts.pre_norm.items()},
            nll_sum=self.acts.nll_sum[rows], n_scored=self.acts.n_scored[rows], n_tokens=self.acts.n_tokens[rows])
        return PairRun(acts=acts, pairs=select_pairs(self.pairs, index), layers=self.layers, stage=self.stage)

    def without(self, name: str) -> PairRun:
        """This run without the pairs of category ``name`` (``ConfigError`` if there is none)."""
        return self.select(np.flatnonzero(self.pairs.pair_categories() != category_index(self.pairs, name)))


STAGES = ("post_norm", "pre_norm")
TOKEN_CHECKS = {"without position 0": "mean_no_pos0", "without massive-activation tokens": "mean_no_massive"}
"""Sensitivity checks of mean pooling: the check's name -> the pooling that leaves those tokens out."""
NORM_CHECK = "after the final norm"
PROFILE_SUBSETS = ("all", NORM_CHECK)
"""Where a figure finds a profile: its rows (subset all) and the final layer after the final norm."""


def check_runs(run: PairRun, pooling: str, categories: bool = True) -> list[tuple[str, PairRun]]:
    """The sensitivity checks every default report shows, as (name, run) pairs to analyse like ``run``:

    without position 0 and without the massive-activation tokens (``pooling`` "mean" only), the final layer after
    the final norm (when ``run`` is at "pre_norm"), and, with ``categories``, each category left out in turn.
    """
    out = []
    if pooling == "mean":
        out += [(name, run.mean_from(key)) for name, key in TOKEN_CHECKS.items() if key in run.acts.pooled]
    if run.stage == "pre_norm":
        out.append((NORM_CHECK, run.at_stage("post_norm")))
    if categories:
        out += [(f"without {c.name}", run.without(c.name)) for c in run.pairs.categories]
    return out


def category_index(pairs: PairDataset, name: str) -> int:
    """Position of category ``name`` in ``pairs.categories``; ``ConfigError`` naming the categories if absent."""
    names = [c.name for c in pairs.categories]
    if name not in names:
        raise ConfigError(f"--drop-category {name!r} is not a category of {pairs.source}; "
                          f"choose one of {', '.join(names)}")
    return names.index(name)


def without_category(pairs: PairDataset, name: str, min_categories: int = 1) -> PairDataset:
    """The dataset without category ``name``: ``without_category(pairs, "numeric_vs_named", 3)``.

    ``ConfigError`` for an unknown name, or when fewer than ``min_categories`` categories would remain.
    """
    drop = category_index(pairs, name)
    kept = tuple(c for i, c in enumerate(pairs.categories) if i != drop)
    if len(kept) < min_categories:
        raise ConfigError(f"--drop-category {name!r} leaves {len(kept)} categories of {pairs.source}; this analysis "
                          f"needs at least {min_categories}")
    return PairDataset(categories=kept, source=pairs.source)


def select_pairs(pairs: PairDataset, index: np.ndarray) -> PairDataset:
    """The dataset of the pairs at the ascending positions ``index`` (in :meth:`PairDataset.texts` order)."""
    cats = pairs.pair_categories()
    starts = np.concatenate([[0], np.cumsum([len(c.pairs) for c in pairs.categories])])
    chosen: list[list[tuple[str, str]]] = [[] for _ in pairs.categories]
    for i in index:
        c = cats[i]
        chosen[c].append(pairs.categories[c].pairs[i - starts[c]])
    categories = tuple(dataclasses.replace(c, pairs=tuple(kept))
                       for c, kept in zip(pairs.categories, chosen, strict=False) if kept)
    return PairDataset(categories=categories, source=pairs.source)


def pair_runs(config: StudyConfig, pairs: PairDataset, timings: dict[str, float]) -> Iterator[PairRun]:
    """Yield one :class:`PairRun` per model; each model is freed before the next loads.

    Only the tested layers are pooled and stored, with the final layer ``n_layers`` (the divergence study's seed
    compat headline, tested or not)."""
    for run in each_model(config, timings):
        layers = select_layers(config.layer_spec, run.info.n_layers, run.info.name)  # fail before extracting
        acts = extract(run.lm, pairs.texts(), layers=extracted_layers(layers, run.info.n_layers),
                       compat=config.compat, batch_size=config.batch_size, max_length=config.max_length,
                       store_dtype=config.store_dtype, cache=config.cache)
        run.mark("extract_s")
        run.release()
        yield PairRun(acts=acts, pairs=pairs, layers=layers)


def extracted_layers(layers: list[int], n_layers: int) -> list[int]:
    """The hidden states a pair study reads: its tested ``layers`` and the final one, ``n_layers`` (the divergence
    study's notebooks-mode headline layer, which it reads even where it is not tested)."""
    return sorted({*layers, n_layers})


def analyse_pairs(config: StudyConfig, pairs: PairDataset, analyse: Callable[[PairRun], tuple[dict, list[dict]]]
                  ) -> tuple[dict[str, dict], list[dict], dict]:
    """Run ``analyse(run) -> (summary, rows)`` on each model's run on ``pairs``.

    Returns the summaries by model name, every table row, and the manifest (with timings).
    """
    timings: dict[str, float] = {}
    summaries, rows, models = {}, [], []
    for run in pair_runs(config, pairs, timings):
        start = time.perf_counter()
        summaries[run.info.name], model_rows = analyse(run)
        rows += model_rows
        models.append(model_entry(run.acts.model, run.acts))  # not the activations: each run's go once analysed
        add_timings(timings, analysis_s=time.perf_counter() - start)
    return summaries, rows, manifest(config, models, dataset_entry(pairs), timings)

