"""The probe's decodable verdicts on coin-flipped pairs (see :mod:`layerscope.validation.nulls`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...models import DEFAULT_MODEL, LoadedModel
from ...study.settings import ConfigError
from .common import check_budget, is_printed, result_of, run_instances, study_config, verdict_row
from .relabel import coin_flips, flip_pairs, flipped_rows

COIN_FLIPS = "A and B swapped by a fair coin per pair"
PROBE_DECODABLE = "{name}: decodable beyond the best shallow reader"


def probe_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 5, seed: int = 0,
               max_seconds: float | None = None,
               **settings: Any) -> list[dict]:
    """The probe study's decodable verdicts (every ``side`` label set: each category's contrast and the pooled
    side) on ``n_null`` coin-flipped pair datasets (:func:`coin_flips`), from one extraction of the pairs. The
    causal tests (removal, steering) are not run: each needs forward passes per state and contrast."""
    from ...data import load_pairs
    from ...engine import extract
    from ...engine.forward.probing import state_vectors
    from ...models import load_model
    from ...studies.probe import Probe
    from ...studies.probe.analysis import ProbeOptions, analyse_model
    from ...studies.probe.decoding import DecodeOptions
    from ...studies.probe.labels import label_tasks, parse_sets

    check_budget(n_null, seed, max_seconds)
    config = study_config("probe", lm_or_spec, settings)
    if parse_sets(config.label_sets) != ("side",) or config.labels:
        raise ConfigError("probe_null flips the sides of the statement pairs, so it tests the side label sets only; "
                          "give label_sets='side' and no labels file")
    start = time.perf_counter()
    lm = load_model(config.models[0], dtype=config.dtype, device=config.device, device_map=config.device_map)
    pairs, n = load_pairs(config.dataset), lm.info.n_layers
    acts = extract(lm, pairs.texts(), layers=list(range(n + 1)), compat=config.compat, batch_size=config.batch_size,
                   max_length=config.max_length, store_dtype=config.store_dtype, cache=config.cache)  # as Probe.run
    pooled: dict[str, np.ndarray] = {}
    setup = time.perf_counter() - start
    options = ProbeOptions(DecodeOptions(config.folds, config.n_bootstrap, config.n_permutations, config.seed,
                                         config.ci_level, config.control_seeds), None, config.pooling)

    def instance(rng):
        flips = coin_flips(pairs.n_pairs, rng)
        rows = flipped_rows(flips)
        tasks, _ = label_tasks(("side",), flip_pairs(pairs, flips), None, None, config.folds)
        flipped: dict[str, np.ndarray] = {}

        def vectors_of(task, pooling):
            if pooling not in pooled:
                pooled[pooling] = state_vectors(acts, pooling)
            if pooling not in flipped:
                flipped[pooling] = pooled[pooling][rows]
            return flipped[pooling][task.pair_rows]

        summary, _ = analyse_model(lm.info.name, n, lm, tasks, vectors_of, options)
        table = Probe.verdicts(result_of("probe", config, {"models": {lm.info.name: summary}, "warnings": []}))
        by_claim = {name: v for name, v in zip(summary["label_sets"], table, strict=True)}
        return [verdict_row(PROBE_DECODABLE.format(name=name), is_printed(v.status), v,
                            summary["label_sets"][name]["probes"]["logreg"]["decodable_states"],
                            summary["label_sets"][name]["probes"]["logreg"]["best_gain"])
                for name, v in by_claim.items()]

    return run_instances("probe", COIN_FLIPS, lm.info.name, n_null, seed, setup, instance, max_seconds)
