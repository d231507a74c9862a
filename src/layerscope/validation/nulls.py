"""How often each study prints a verdict that is false: the study's own analysis and verdict code run on null
relabelings of its data, one extraction (the activation cache) and then many relabelings, none with a forward pass.

    from layerscope import load_model
    from layerscope.validation.nulls import (ablation_null, divergence_null, false_alarm_rows, phases_null,
                                             probe_null, scaling_null, scaling_self_copy, scaling_split_null, wilson)
    lm = load_model("smollm2-135m")
    rows = divergence_null(lm, n_null=200, seed=0)     # one tidy row per (instance, verdict)
    rows += phases_null(lm, n_null=30, seed=0)         # any setting of the study: phases_null(lm, n_bootstrap=2000)
    rows += ablation_null(lm, n_null=200, seed=0)      # the configurations scored once, then 200 relabelings
    rows += scaling_null(lm, n_null=200, seed=0)       # each model's peak verdict, preferences shuffled
    rows += scaling_split_null(lm, n_null=30, seed=0)  # the same model's pairs in three random parts
    rows += scaling_self_copy(lm, copies=2)            # one model under two names: one instance, never assessable
    rows += probe_null(lm, n_null=5, seed=0, max_seconds=600)   # decodable verdicts, coin-flipped pairs, <= 10 min
    for r in false_alarm_rows(rows):                   # per verdict: instances, false_alarms, rate, Wilson interval
        print(r["study"], r["verdict"], r["false_alarms"], "/", r["instances"], r["ci_lo"], r["ci_hi"])
    wilson(3, 200)                                     # (lo, hi), the Wilson score interval of 3 in 200 (95 %)

Each ``*_null`` function loads the model (a zoo name, folder or :class:`~layerscope.models.LoadedModel`), reads the
study's inputs as its ``run`` does (``StudyConfig(study, models=(lm,), **settings)``, so every setting of the study
can be given), extracts once, and then for instance i = 0 .. n_null - 1 relabels the data with
``np.random.default_rng([seed, i])`` (so any one instance can be recomputed alone) and runs the study's own analysis
(``analyse_run`` / ``analyse_model``) and its verdict-table code (``Study.verdicts``) on it. A row is
``{"study", "null", "verdict", "instance", "seed", "model", "printed", "assessed", "status", "label", "value",
"claim", "key", "seconds", "setup_s"}``: ``printed`` is True when the study would print the verdict (its status is
"holds and robust" or "holds but fragile", or, for a label outside the verdict table, the label is given),
``assessed`` False where the study could not test it (status "not assessable", or an undetermined label),
``status`` the verdict table's status (None for a label outside it), ``label`` the study's own label (a pattern,
H5's result),
``value`` the verdict's key number, ``seconds`` the instance's relabeling, analysis and verdicts, ``setup_s`` the
model load and extraction once. Every verdict a row names is false under its null, so a printed one is a false
alarm; :func:`false_alarm_rows` counts them per (study, null, verdict) with the Wilson interval of the rate.

The relabelings (plain functions on data; ``rng`` a ``np.random.Generator``):

- :func:`shuffle_preferences` (divergence, phases, the scaling peak): the per-pair output preferences NLL(B) -
  NLL(A) permuted across all pairs, the geometry kept, so no pair's (or category's) geometry is linked to its
  preference. :func:`shuffled_run` applies it to a run: pair i gets the NLLs of both texts of pair order[i], so the
  mean and the summed preference move together; the vectors, token counts, texts and categories stay.
- :func:`permute_languages` (ablation): the texts' language labels permuted across all texts. The ablation groups
  texts by language (its bootstrap resamples texts within each language, its checks leave one language out) and
  each language by resource level (D_HR, D_LR), so the unit is the text: text t takes the (language, sample)
  label of text order[t], and the resource level that language has, under every configuration and variant alike
  (each text's scores stay paired with its own baseline). Each language keeps its number of texts; no language
  is low-resource in any consistent way.
- :func:`coin_flip_pairs` (probe): A and B of each statement pair swapped by a fair coin, pair by pair, so no
  contrast is consistent across pairs; the vectors follow the texts (:func:`flipped_rows`).
- :func:`split_pairs` (scaling): the pairs of each category dealt at random into ``n_splits`` parts.

Scaling's "the peak moves with size" (SHIFTS) needs at least 3 models of one architecture with a significant peak
(``MIN_FAMILY``): the same model twice under two names (:func:`scaling_self_copy`) is never assessable, and with 3
or more copies the peaks coincide (range 0), so SHIFTS can never be printed: a trivially safe null. The meaningful
null is :func:`scaling_split_null`: the same model's profile on three random parts of the pairs, analysed as three
models of one family by the study's own code; the peak of one model cannot move, so SHIFTS is a false alarm.
:func:`scaling_null` is the shuffled-preference null of each model's peak verdict.

The probe's causal verdicts (needed, steerable) run forward passes per state and contrast (minutes per relabeling on
a CPU), so :func:`probe_null` measures the decodable verdicts only (``steer`` off).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..data import PairDataset
from ..models import DEFAULT_MODEL, LoadedModel
from ..modes import NOTEBOOKS
from ..stats import wilson
from ..studies.shared.inputs import PairRun
from ..study.config import StudyConfig
from ..study.result import StudyResult
from ..study.settings import ConfigError
from ..study.verdicts import HOLDS_FRAGILE, HOLDS_ROBUST, NOT_ASSESSABLE, Verdict

PRINTED = (HOLDS_ROBUST, HOLDS_FRAGILE)
"""Verdict-table statuses under which a study prints its claim."""
ROW_KEYS = ("study", "null", "verdict", "instance", "printed")
"""What :func:`false_alarm_rows` needs in each row."""
TEXT_LABELS = ("lang", "sample", "resource")
"""The columns of the ablation's per-text scores that name a text and its group."""
SPLITS = 3
"""Parts of the pairs :func:`scaling_split_null` analyses as models of one family: the scaling study's
``MIN_FAMILY``, the fewest with which its stability verdict can be assessed at all."""


# -- the summary ------------------------------------------------------------------------------------------------

def false_alarm_rows(rows: Iterable[dict], level: float = 0.95) -> list[dict]:
    """Per (study, null, verdict), in the order first seen: ``instances``, ``false_alarms`` (rows printed),
    ``rate``, its :func:`wilson` interval ``ci_lo``, ``ci_hi`` at ``level``, ``not_assessable`` (rows with
    ``assessed`` False, or without it whose status is "not assessable"), ``rate_assessed`` (false alarms over the
    assessed instances; None when none was) and ``seconds_per_instance`` (the mean of the rows' ``seconds``, where
    they have one)."""
    groups: dict[tuple, list[dict]] = {}
    seen: set[tuple] = set()
    for row in rows:
        missing = [key for key in ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"a null row lacks {', '.join(missing)}; pass the rows a *_null function returned")
        if not isinstance(row["printed"], (bool, np.bool_)):
            raise ValueError(f"row 'printed' must be True or False, not {row['printed']!r}")
        key = (row["study"], row["null"], row["verdict"])
        instance = (*key, row.get("seed"), row["instance"])
        if instance in seen:
            raise ValueError(f"instance {row['instance']} (seed {row.get('seed')}) of {row['study']} {row['verdict']!r}"
                             " appears twice; pass each null run's rows once (runs of other seeds may be joined)")
        seen.add(instance)
        groups.setdefault(key, []).append(row)
    out = []
    for (study, null, verdict), members in groups.items():
        n, k = len(members), sum(bool(r["printed"]) for r in members)
        lo, hi = wilson(k, n, level)
        seconds = [r["seconds"] for r in members if r.get("seconds") is not None]
        unassessed = sum(not r.get("assessed", r.get("status") != NOT_ASSESSABLE) for r in members)
        out.append({"study": study, "null": null, "verdict": verdict, "instances": n, "false_alarms": k,
                    "rate": k / n, "ci_lo": lo, "ci_hi": hi, "level": level, "not_assessable": unassessed,
                    "rate_assessed": k / (n - unassessed) if n > unassessed else None,
                    "seconds_per_instance": float(np.mean(seconds)) if seconds else None})
    return out


def is_printed(status: str | None) -> bool:
    """Whether a verdict-table status prints its claim ("holds and robust" or "holds but fragile")."""
    return status in PRINTED


# -- the relabelings --------------------------------------------------------------------------------------------

def check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, e.g. np.random.default_rng(0); got {type(rng).__name__}")
    return rng


def shuffle_preferences(prefs, rng: np.random.Generator) -> np.ndarray:
    """``prefs`` (n_pairs,), one output preference per pair, permuted across the pairs: ``prefs[rng.permutation(n)]``
    (a copy; ``shuffle_preferences(np.arange(n), rng)`` is the permutation itself)."""
    check_rng(rng)
    prefs = np.asarray(prefs)
    if prefs.ndim != 1:
        raise ValueError(f"prefs must hold one value per pair, shape (n_pairs,); got shape {prefs.shape}")
    return prefs[rng.permutation(len(prefs))]


def with_pair_order(run: PairRun, order) -> PairRun:
    """``run`` whose pair i carries the scores (summed NLL and scored tokens, of its A and its B) of pair
    ``order[i]``, so ``with_pair_order(run, order).pref == run.pref[order]``; vectors, token counts, texts and
    categories stay where they are."""
    n = run.pairs.n_pairs
    order = np.asarray(order)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError(f"order must be a permutation of the {n} pair positions 0..{n - 1}; got shape "
                         f"{order.shape}")
    rows = np.stack([2 * order, 2 * order + 1], axis=1).ravel()
    acts = dataclasses.replace(run.acts, nll_sum=run.acts.nll_sum[rows], n_scored=run.acts.n_scored[rows])
    return dataclasses.replace(run, acts=acts)


def shuffled_run(run: PairRun, rng: np.random.Generator) -> PairRun:
    """``run`` with its preferences shuffled across pairs (:func:`shuffle_preferences`, one draw of ``rng``): its
    ``pref`` equals ``shuffle_preferences(run.pref, rng)`` for an ``rng`` in the same state."""
    return with_pair_order(run, shuffle_preferences(np.arange(run.pairs.n_pairs), rng))


def permute_languages(per_text: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """The ablation's per-text scores (``Scores.per_text``: a row per configuration, variant and text) with the
    texts' labels permuted: text t (a (lang, sample) key) takes the ``lang``, ``sample`` and ``resource`` of text
    ``order[t]`` (``order = rng.permutation(n_texts)``, texts in file order) on every one of its rows; its scores
    stay. Rows are put back in the runner's order (per configuration, texts in file order of their new labels)."""
    check_rng(rng)
    missing = [c for c in (*TEXT_LABELS, "config", "variant") if c not in per_text.columns]
    if missing:
        raise ValueError(f"per_text lacks the column(s) {', '.join(missing)}; pass the ablation runner's "
                         "Scores.per_text (score_configs(...).per_text)")
    keys = per_text.drop_duplicates(["lang", "sample"])[list(TEXT_LABELS)].reset_index(drop=True)
    order = rng.permutation(len(keys))
    position = pd.MultiIndex.from_frame(keys[["lang", "sample"]]).get_indexer(
        pd.MultiIndex.from_frame(per_text[["lang", "sample"]]))  # each row's text, by its place in file order
    out = per_text.copy()
    for column in TEXT_LABELS:
        out[column] = keys[column].to_numpy()[order][position]
    block = pd.factorize(per_text["variant"].astype(str) + "\0" + per_text["config"].astype(str))[0]
    return out.iloc[np.lexsort((order[position], block))].reset_index(drop=True)


def coin_flips(n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    """(n_pairs,) bool: a fair coin per pair (True: swap its A and B)."""
    check_rng(rng)
    return rng.random(int(n_pairs)) < 0.5


def flip_pairs(pairs: PairDataset, flips) -> PairDataset:
    """``pairs`` with A and B swapped in every pair where ``flips`` (n_pairs,) is True (pairs in
    :meth:`PairDataset.texts` order); categories, their order and descriptions kept."""
    flips = np.asarray(flips, dtype=bool)
    if flips.shape != (pairs.n_pairs,):
        raise ValueError(f"flips must hold one bool per pair, shape ({pairs.n_pairs},); got shape {flips.shape}")
    start, categories = 0, []
    for cat in pairs.categories:
        mine = flips[start:start + len(cat.pairs)]
        categories.append(dataclasses.replace(cat, pairs=tuple((b, a) if f else (a, b)
                                                               for (a, b), f in zip(cat.pairs, mine, strict=True))))
        start += len(cat.pairs)
    return PairDataset(categories=tuple(categories), source=pairs.source)


def coin_flip_pairs(pairs: PairDataset, rng: np.random.Generator) -> PairDataset:
    """``pairs`` with A and B of each pair swapped by a fair coin, pair by pair: ``flip_pairs(pairs,
    coin_flips(pairs.n_pairs, rng))``."""
    return flip_pairs(pairs, coin_flips(pairs.n_pairs, rng))


def flipped_rows(flips) -> np.ndarray:
    """(2 n_pairs,) where each text of the flipped dataset sits in the original's :meth:`PairDataset.texts`:
    ``original_vectors[flipped_rows(flips)]`` are the flipped texts' vectors."""
    flips = np.asarray(flips, dtype=bool)
    rows = np.stack([2 * np.arange(len(flips)), 2 * np.arange(len(flips)) + 1], axis=1)
    rows[flips] = rows[flips][:, ::-1]
    return rows.ravel()


def split_pairs(pairs: PairDataset, n_splits: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The pair positions (:meth:`PairDataset.texts` order) of ``n_splits`` disjoint parts covering every pair: each
    category's pairs shuffled (``rng.permutation``, categories in order) and dealt in turn, so part k holds
    positions k, k + n_splits, ... of the shuffled order and every part has every category."""
    check_rng(rng)
    if isinstance(n_splits, bool) or int(n_splits) != n_splits or n_splits < 2:
        raise ValueError(f"n_splits must be a whole number of at least 2; got {n_splits!r}")
    n_splits = int(n_splits)
    small = [c.name for c in pairs.categories if len(c.pairs) < 2 * n_splits]
    if small:
        raise ValueError(f"category {small[0]!r} has fewer than 2 x {n_splits} pairs, so a part would hold fewer than "
                         "2 of its statements per side; use fewer splits or a dataset with more pairs per category")
    parts: list[list[int]] = [[] for _ in range(n_splits)]
    start = 0
    for cat in pairs.categories:
        shuffled = start + rng.permutation(len(cat.pairs))
        for k in range(n_splits):
            parts[k] += shuffled[k::n_splits].tolist()
        start += len(cat.pairs)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


# -- running a study on relabelled data -------------------------------------------------------------------------

def study_config(study: str, lm_or_spec: Any, settings: dict) -> StudyConfig:
    """The config a study's own ``run`` would read, default mode only (notebooks mode prints untested labels)."""
    config = StudyConfig(study, models=(lm_or_spec,), **settings)
    if config.compat == NOTEBOOKS:
        raise ConfigError("a null run measures the default mode's tested verdicts; notebooks mode prints the "
                          "notebooks' labels untested (all 'not assessable'): leave compat out")
    return config


def pair_run(config: StudyConfig) -> tuple[PairRun, float]:
    """The one model's :class:`PairRun` on the study's pairs, extracted once as the study's ``run`` extracts it
    (through the activation cache), and the seconds it took (load and extraction)."""
    from ..studies.shared.categories import study_pairs
    from ..studies.shared.inputs import pair_runs

    start = time.perf_counter()
    pairs = study_pairs(config.dataset, getattr(config.settings, "drop_category", None))
    runs = pair_runs(config, pairs, {})
    try:
        run = next(runs)
    finally:
        runs.close()
    return run, time.perf_counter() - start


def result_of(study: str, config: StudyConfig, summary: dict) -> StudyResult:
    """A result holding ``summary``, as a study's ``verdicts`` reads it (no manifest, no table)."""
    return StudyResult(study=study, config=config.to_dict(), manifest={}, summary=summary, table=pd.DataFrame())


def verdict_row(verdict: str, printed: bool, v: Verdict | None = None, label: Any = None, value: Any = None,
                assessed: bool = True) -> dict:
    """One verdict of one instance: ``printed``, ``assessed`` (False where the study could not test it: a verdict
    table's "not assessable", or an undetermined label) and, from the verdict table where it is in it, its status,
    claim and key text."""
    return {"verdict": verdict, "printed": bool(printed),
            "assessed": bool(assessed) if v is None else v.status != NOT_ASSESSABLE,
            "status": v.status if v is not None else None, "label": label, "value": value,
            "claim": v.claim if v is not None else None, "key": v.key if v is not None else None}


def check_budget(n_null: int, seed: int, max_seconds: float | None) -> None:
    """``ConfigError`` naming the fix for a bad ``n_null``, ``seed`` or ``max_seconds``, before any model loads."""
    if isinstance(n_null, bool) or int(n_null) != n_null or n_null < 1:
        raise ConfigError(f"n_null must be a whole number of at least 1 (relabelings to run); got {n_null!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ConfigError(f"seed must be a whole number of 0 or more; got {seed!r}")
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
        raise ConfigError(f"max_seconds must be a positive number of seconds, or None for no limit; got "
                          f"{max_seconds!r}")


def run_instances(study: str, null: str, model: str, n_null: int, seed: int, setup_s: float,
                  instance: Callable[[np.random.Generator], list[dict]], max_seconds: float | None = None
                  ) -> list[dict]:
    """``instance(np.random.default_rng([seed, i]))`` for i < n_null, each row with the study, null, instance,
    seed, model, the instance's seconds and the setup's; with ``max_seconds``, no instance starts once the
    instances so far took that long (the first always runs)."""
    check_budget(n_null, seed, max_seconds)
    rows, spent = [], 0.0
    for i in range(int(n_null)):
        if max_seconds is not None and i and spent >= max_seconds:
            break
        start = time.perf_counter()
        verdicts = instance(np.random.default_rng([int(seed), i]))
        seconds = time.perf_counter() - start
        spent += seconds
        rows += [{"study": study, "null": null, "instance": i, "seed": int(seed), "model": model, **v,
                  "seconds": seconds, "setup_s": setup_s} for v in verdicts]
    return rows


# -- divergence ---------------------------------------------------------------------------------------------------

DIVERGENCE_HEADLINE = "r(UA, pref) at the last tested layer, mean pooling"
DIVERGENCE_POINT = "r changes sign (a divergence point), mean pooling"
DIVERGENCE_LAYER = "a tested layer with a significant r, mean pooling"
SHUFFLED = "preferences shuffled across pairs"


def divergence_verdicts(run: PairRun, config: StudyConfig) -> list[dict]:
    """The divergence study's analysis of ``run`` (``analyse_run``) and its verdicts: the verdict table's headline r
    (printed when it holds), a divergence point of mean pooling (printed in the headline when a sign change is
    significant) and a significant tested layer of mean pooling (listed in the report)."""
    from ..studies.divergence import Divergence
    from ..studies.divergence.analysis import analyse_run
    from ..studies.divergence.summary import headline_entry

    s, _ = analyse_run(run, config)
    (v,) = Divergence.verdicts(result_of("divergence", config, {"models": {run.info.name: s}, "warnings": []}))
    head = headline_entry(s)
    points, layers = s["divergence_points"]["mean"], s["significant_layers"]["mean"]
    return [verdict_row(DIVERGENCE_HEADLINE, is_printed(v.status), v, head["label"], head["r"]),
            verdict_row(DIVERGENCE_POINT, bool(points), None,
                        [[p["layer_before"], p["layer_after"]] for p in points], len(points)),
            verdict_row(DIVERGENCE_LAYER, bool(layers), None, list(layers), len(layers))]


def divergence_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 200, seed: int = 0,
                    max_seconds: float | None = None,
                    **settings: Any) -> list[dict]:
    """The divergence study's verdicts on ``n_null`` runs with the preferences shuffled across pairs
    (:func:`shuffled_run`), one extraction; ``settings``: any of the study's (``n_permutations``, ``layers``, ...)."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("divergence", lm_or_spec, settings)
    run, setup = pair_run(config)
    return run_instances("divergence", SHUFFLED, run.info.name, n_null, seed, setup,
                         lambda rng: divergence_verdicts(shuffled_run(run, rng), config), max_seconds)


# -- phases -------------------------------------------------------------------------------------------------------

PHASES_PATTERN = "phase pattern PYTHIA_PATTERN or LATE_INVERSION"
PHASES_LATE = "late-layer inversion at the last tested layer"
PHASES_LAYER = "a tested layer with a significant r"
FALSE_PATTERNS = ("PYTHIA_PATTERN", "LATE_INVERSION")
"""The pattern labels that claim a link; DECOUPLED (weak correlations throughout) is the truth under the null."""


def phases_verdicts(run: PairRun, config: StudyConfig) -> list[dict]:
    """The phases study's analysis of ``run`` (``analyse_run``) and its verdicts: a pattern that claims a link
    (PYTHIA_PATTERN or LATE_INVERSION printed; the row's ``label`` is the pattern, DECOUPLED included), the
    late-layer inversion, and a significant tested layer."""
    from ..studies.phases import Phases
    from ..studies.phases.analysis import analyse_run

    s, _ = analyse_run(run, config)
    pattern, late = Phases.verdicts(result_of("phases", config, {"models": {run.info.name: s}, "comparison": [],
                                                                  "warnings": []}))
    return [verdict_row(PHASES_PATTERN, is_printed(pattern.status) and s["pattern"] in FALSE_PATTERNS, pattern,
                        s["pattern"], s["phases"]["late"]["mean"]),
            verdict_row(PHASES_LATE, is_printed(late.status), late, s["late_label"], s["final_r"]),
            verdict_row(PHASES_LAYER, bool(s["significant_layers"]), None, list(s["significant_layers"]),
                        len(s["significant_layers"]))]


def phases_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 30, seed: int = 0,
                max_seconds: float | None = None,
                **settings: Any) -> list[dict]:
    """The phases study's verdicts on ``n_null`` runs with the preferences shuffled across pairs, one extraction."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("phases", lm_or_spec, settings)
    run, setup = pair_run(config)
    return run_instances("phases", SHUFFLED, run.info.name, n_null, seed, setup,
                         lambda rng: phases_verdicts(shuffled_run(run, rng), config), max_seconds)


# -- ablation -----------------------------------------------------------------------------------------------------

PERMUTED_LANGUAGES = "language labels permuted across texts"
ABLATION_SIGNIFICANT = {"halves": ("early", "late"),
                        "synergy": ("synergistic", "no synergy (above the additive expectation)")}
"""The halves' and synergy labels that claim a difference (the report prints them where an interval excludes 0)."""


def ablation_verdicts(scores, model: str, n: int, order: list[str], variants: list, config: StudyConfig
                      ) -> list[dict]:
    """The ablation study's analysis of ``scores`` (``analyse_model``) and its verdicts, per variant: H5 (the verdict
    table's), and the report's labels of which half matters more for the disparity and of synergy."""
    from ..studies.ablation import Ablation
    from ..studies.ablation.results import analyse_model

    s, _ = analyse_model(model, n, scores, order, variants, config)
    summary = {"bits": variants[0].bits, "recipe": variants[0].recipe, "primary": variants[0].label,
               "models": {model: s}, "warnings": []}
    table = Ablation.verdicts(result_of("ablation", config, summary))
    out = []
    for v, (label, entry) in zip(table, s["variants"].items(), strict=True):
        h5, halves, synergy = (entry["verdicts"].get(k, {}) for k in ("h5", "halves", "synergy"))
        critical, syn = halves.get("more_critical_for_disparity"), synergy.get("label")
        out += [verdict_row(f"H5 [{label}]", is_printed(v.status), v, h5["result"], h5.get("reduction_pct")),
                verdict_row(f"one half more critical for the disparity [{label}]",
                            critical in ABLATION_SIGNIFICANT["halves"], None, critical, halves.get("disparity_diff"),
                            assessed=critical is not None),
                verdict_row(f"synergy of the gateway layers [{label}]", syn in ABLATION_SIGNIFICANT["synergy"], None,
                            syn, synergy.get("difference"), assessed=syn not in (None, "undetermined"))]
    return out


def ablation_scores(config: StudyConfig):
    """Score the study's configurations once, as ``Ablation.run`` does: (scores, model name, decoder layers,
    configuration names, variants, seconds)."""
    from ..data.languages import load_languages
    from ..models import decoder_layers, load_model
    from ..studies.ablation import study_configs, study_max_length, study_variants
    from ..studies.ablation.runner import score_configs

    start = time.perf_counter()
    languages = load_languages(config.texts)
    variants = study_variants(config)
    lm = load_model(config.models[0], dtype=config.dtype, device=config.device, device_map=config.device_map)
    n = len(decoder_layers(lm.model))
    configs = study_configs(config, n)
    scores = score_configs(lm, languages, configs, variants, config.batch_size, study_max_length(config),
                           prefix_reuse=config.prefix_reuse, budget_bytes=int(config.prefix_budget_gib * 2**30))
    return scores, lm.info.name, n, list(configs), variants, time.perf_counter() - start


def ablation_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 200, seed: int = 0,
                  max_seconds: float | None = None,
                  **settings: Any) -> list[dict]:
    """The ablation study's verdicts on ``n_null`` relabelings of its per-text scores with the language labels
    permuted across texts (:func:`permute_languages`); the configurations are scored once (no pass per instance)."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("ablation", lm_or_spec, settings)
    scores, model, n, order, variants, setup = ablation_scores(config)

    def instance(rng):
        relabelled = dataclasses.replace(scores, per_text=permute_languages(scores.per_text, rng))
        return ablation_verdicts(relabelled, model, n, order, variants, config)

    return run_instances("ablation", PERMUTED_LANGUAGES, model, n_null, seed, setup, instance, max_seconds)


# -- scaling ------------------------------------------------------------------------------------------------------

SCALING_PEAK = "peak of r(UA, pref) (positive and significant)"
SCALING_SHIFTS = "peak depth across model sizes: SHIFTS"
SCALING_ANY = "peak depth across model sizes: STABLE or SHIFTS (assessable)"
SPLIT = "the pairs in random parts, analysed as models of one family"
SELF_COPY = "the same model under several names"


def scaling_verdicts(runs: dict[str, PairRun], config: StudyConfig, summaries: dict[str, dict] | None = None
                     ) -> tuple[dict, list[Verdict]]:
    """The scaling study's analysis (``analyse_run`` per model, ``peak_verdict`` across them, as ``Scaling.run``
    in the default mode) of ``runs`` ({name: run}) and its verdict table; ``summaries``: models already analysed."""
    from ..studies.scaling import PEAK_SEARCH, Scaling
    from ..studies.scaling.analysis import analyse_run, peak_verdict

    models = dict(summaries or {})
    for name, run in runs.items():
        models[name] = analyse_run(run, config)[0]
    n_cat = next(iter(models.values()))["n_categories"]
    summary = {"pooling": config.pooling, "models": models, "peak_stability": peak_verdict(models), "warnings": [],
               "n_categories": n_cat, "stage": "pre_norm", "peak_search": PEAK_SEARCH}
    return summary, Scaling.verdicts(result_of("scaling", config, summary))


def stability_rows(summary: dict, stability: Verdict) -> list[dict]:
    """The stability verdict: SHIFTS printed (false when every model is one model), and whether it was assessable."""
    verdict = summary["peak_stability"]["verdict"]
    peaks = [m["max_pos_pct"] for m in summary["models"].values() if m["max_pos_significant"]]
    spread = max(peaks) - min(peaks) if peaks else None
    return [verdict_row(SCALING_SHIFTS, is_printed(stability.status) and verdict == "SHIFTS", stability, verdict,
                        spread),
            verdict_row(SCALING_ANY, verdict != "not assessable", stability, verdict, len(peaks))]


def scaling_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 200, seed: int = 0,
                 max_seconds: float | None = None,
                 **settings: Any) -> list[dict]:
    """The scaling study's peak verdict of one model on ``n_null`` runs with the preferences shuffled across pairs."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("scaling", lm_or_spec, settings)
    run, setup = pair_run(config)

    def instance(rng):
        summary, table = scaling_verdicts({run.info.name: shuffled_run(run, rng)}, config)
        peak, m = table[1], summary["models"][run.info.name]
        return [verdict_row(SCALING_PEAK, is_printed(peak.status), peak, m["peak"], m["max_pos_r"])]

    return run_instances("scaling", SHUFFLED, run.info.name, n_null, seed, setup, instance, max_seconds)


def scaling_split_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 30, seed: int = 0,
                       n_splits: int = SPLITS, max_seconds: float | None = None,
                       **settings: Any) -> list[dict]:
    """The scaling study's stability verdict on ``n_null`` random splits of the pairs into ``n_splits`` parts
    (:func:`split_pairs`), each part's run (``run.select``) analysed as one model of the same family: one model's
    peak cannot move, so SHIFTS is a false alarm (rows also say how often any verdict was assessable)."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("scaling", lm_or_spec, settings)
    run, setup = pair_run(config)
    split_pairs(run.pairs, n_splits, np.random.default_rng(0))  # too few pairs per category fail here

    return run_instances("scaling", SPLIT, run.info.name, n_null, seed, setup,
                         lambda rng: split_verdicts(run, config, n_splits, rng), max_seconds)


def split_verdicts(run: PairRun, config: StudyConfig, n_splits: int, rng: np.random.Generator) -> list[dict]:
    """:func:`stability_rows` of ``run``'s pairs split by :func:`split_pairs`, each part (``run.select``) a model
    "NAME [part k of n]" of the run's architecture."""
    parts = split_pairs(run.pairs, n_splits, rng)
    runs = {f"{run.info.name} [part {k + 1} of {n_splits}]": run.select(index) for k, index in enumerate(parts)}
    summary, table = scaling_verdicts(runs, config)
    return stability_rows(summary, table[0])


def scaling_self_copy(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, copies: int = 2, **settings: Any
                      ) -> list[dict]:
    """The scaling study's stability verdict on one model analysed once and listed ``copies`` times under distinct
    names: one instance (no randomness). With 2 copies it is never assessable; with 3 or more the peaks coincide."""
    if isinstance(copies, bool) or int(copies) != copies or copies < 2:
        raise ConfigError(f"copies must be a whole number of at least 2; got {copies!r}")
    config = study_config("scaling", lm_or_spec, settings)
    run, setup = pair_run(config)
    return run_instances("scaling", f"{SELF_COPY} ({int(copies)} copies)", run.info.name, 1, 0, setup,
                         lambda rng: self_copy_verdicts(run, config, int(copies)))


def self_copy_verdicts(run: PairRun, config: StudyConfig, copies: int) -> list[dict]:
    """:func:`stability_rows` of ``run`` analysed once (``analyse_run``) and listed ``copies`` times, as the
    models "NAME", "NAME (copy 1)", ..."""
    from ..studies.scaling.analysis import analyse_run

    s = analyse_run(run, config)[0]
    names = [run.info.name] + [f"{run.info.name} (copy {k})" for k in range(1, copies)]
    summary, table = scaling_verdicts({}, config, {name: s for name in names})
    return stability_rows(summary, table[0])


# -- probe --------------------------------------------------------------------------------------------------------

COIN_FLIPS = "A and B swapped by a fair coin per pair"
PROBE_DECODABLE = "{name}: decodable beyond the best shallow reader"


def probe_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 5, seed: int = 0,
               max_seconds: float | None = None,
               **settings: Any) -> list[dict]:
    """The probe study's decodable verdicts (every ``side`` label set: each category's contrast and the pooled
    side) on ``n_null`` coin-flipped pair datasets (:func:`coin_flips`), from one extraction of the pairs. The
    causal tests (removal, steering) are not run: each needs forward passes per state and contrast."""
    from ..data import load_pairs
    from ..engine import extract
    from ..engine.forward.probing import state_vectors
    from ..models import load_model
    from ..studies.probe import Probe
    from ..studies.probe.analysis import ProbeOptions, analyse_model
    from ..studies.probe.decoding import DecodeOptions
    from ..studies.probe.labels import label_tasks, parse_sets

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


def summary_text(summary: Sequence[dict]) -> str:
    """The rows of :func:`false_alarm_rows` as a plain table, one line per verdict."""
    lines = []
    for r in summary:
        seconds = "" if r["seconds_per_instance"] is None else f", {r['seconds_per_instance']:.2f} s per instance"
        lines.append(f"{r['study']} | {r['null']} | {r['verdict']} | {r['false_alarms']} / {r['instances']} = "
                     f"{r['rate']:.3f} "
                     f"[{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] ({r['not_assessable']} not assessable{seconds})")
    return "\n".join(lines)
