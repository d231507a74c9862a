"""Model runs shared by the pair studies: load each model in turn, extract once, free it.

    summaries, rows, manifest = analyse_pairs(config, lambda run: analyse_model(run, run.layers))

where ``run`` is a :class:`PairRun`: ``run.a("mean")`` is (n_pairs, n_layers + 1, d) for the A
statements, ``run.pref`` is (n_pairs,) NLL(B) - NLL(A) (> 0: the model prefers A).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..data import PairDataset, load_pairs
from ..engine import Activations, extract
from ..models import ModelInfo, load_model
from .config import StudyConfig, select_layers
from .manifest import add_timings, dataset_entry, manifest, model_entry


@dataclass
class PairRun:
    """One model's activations on a pair dataset, arranged by pair."""

    acts: Activations
    pairs: PairDataset
    layers: list[int]
    """The hidden-state indices to test (from ``config.layers``)."""

    @property
    def info(self) -> ModelInfo:
        return self.acts.model

    def a(self, pooling: str) -> np.ndarray:
        return self.acts.pooled[pooling][0::2]

    def b(self, pooling: str) -> np.ndarray:
        return self.acts.pooled[pooling][1::2]

    @property
    def pref(self) -> np.ndarray:
        """Output preference per pair, mean NLL(B) - NLL(A), as the notebooks define it."""
        nll = self.acts.nll_mean
        return nll[1::2] - nll[0::2]


def pair_runs(config: StudyConfig, pairs: PairDataset, timings: dict[str, float]) -> Iterator[PairRun]:
    """Yield one :class:`PairRun` per model; each model is freed before the next loads."""
    for spec in config.models:
        start = time.perf_counter()
        lm = load_model(spec, dtype=config.dtype, device=config.device)
        layers = select_layers(config.layer_spec, lm.info.n_layers, lm.info.name)  # fail before extracting
        loaded = time.perf_counter()
        acts = extract(lm, pairs.texts(), compat=config.compat, batch_size=config.batch_size, cache=config.cache)
        add_timings(timings, load_s=loaded - start, extract_s=time.perf_counter() - loaded)
        del lm
        free_memory()
        yield PairRun(acts=acts, pairs=pairs, layers=layers)


def analyse_pairs(config: StudyConfig, analyse: Callable[[PairRun], tuple[dict, list[dict]]]
                  ) -> tuple[dict[str, dict], list[dict], dict]:
    """Run ``analyse(run) -> (summary, rows)`` on each model's pair run.

    Returns the summaries by model name, every table row, and the manifest (with timings).
    """
    pairs = load_pairs(config.dataset)
    timings: dict[str, float] = {}
    summaries, rows, done = {}, [], []
    for run in pair_runs(config, pairs, timings):
        start = time.perf_counter()
        summaries[run.info.name], model_rows = analyse(run)
        rows += model_rows
        done.append(run.acts)
        add_timings(timings, analysis_s=time.perf_counter() - start)
    models = [model_entry(acts.model, acts) for acts in done]
    return summaries, rows, manifest(config, models, dataset_entry(pairs), timings)


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
