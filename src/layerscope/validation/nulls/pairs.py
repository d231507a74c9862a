"""The pair studies under shuffled preferences: divergence, phases, and scaling (also its split-pairs and
self-copy nulls); see :mod:`layerscope.validation.nulls`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...models import DEFAULT_MODEL, LoadedModel
from ...studies.divergence.claims import CARD_VERDICT as DIVERGENCE_CARD
from ...studies.scaling.claims import CARD_PEAK
from ...studies.shared.inputs import PairRun
from ...study.config import StudyConfig
from ...study.settings import ConfigError
from ...study.verdicts import Verdict
from .common import check_budget, is_printed, pair_run, result_of, run_instances, study_config, verdict_row
from .relabel import shuffled_run, split_pairs

SPLITS = 3
"""Parts of the pairs :func:`scaling_split_null` analyses as models of one family: the scaling study's
``MIN_FAMILY``, the fewest with which its stability verdict can be assessed at all."""


# -- divergence ---------------------------------------------------------------------------------------------------

DIVERGENCE_HEADLINE = DIVERGENCE_CARD
DIVERGENCE_POINT = "r changes sign (a divergence point), mean pooling"
DIVERGENCE_LAYER = "a tested layer with a significant r, mean pooling"
SHUFFLED = "preferences shuffled across pairs"


def divergence_verdicts(run: PairRun, config: StudyConfig) -> list[dict]:
    """The divergence study's analysis of ``run`` (``analyse_run``) and its verdicts: the verdict table's headline r
    (printed when it holds), a divergence point of mean pooling (printed in the headline when a sign change is
    significant) and a significant tested layer of mean pooling (listed in the report)."""
    from ...studies.divergence import Divergence
    from ...studies.divergence.analysis import analyse_run
    from ...studies.divergence.summary import headline_entry

    s, _ = analyse_run(run, config)
    (v,) = Divergence.verdicts(result_of("divergence", config, {"models": {run.info.name: s}, "warnings": []}))
    head = headline_entry(s)
    return [verdict_row(DIVERGENCE_HEADLINE, is_printed(v.status), v, head["label"], head["r"]), *_point_rows(s)]


def _point_rows(s: dict) -> list[dict]:
    points, layers = s["divergence_points"]["mean"], s["significant_layers"]["mean"]
    return [verdict_row(DIVERGENCE_POINT, bool(points), None,
                        [[p["layer_before"], p["layer_after"]] for p in points], len(points)),
            verdict_row(DIVERGENCE_LAYER, bool(layers), None, list(layers), len(layers))]


def divergence_point_verdicts(run: PairRun, config: StudyConfig) -> list[dict]:
    """The divergence point and significant-layer verdicts of :func:`divergence_verdicts` alone, from the analysis
    on all pairs (``analyse_subset`` on the run as ``analyse_model`` tests it): they read nothing of the sensitivity
    checks, which take two thirds of a full instance's time (tests check the rows are equal)."""
    from ...studies.divergence.analysis import analyse_subset, tested_run
    from ...studies.shared.correlation import Significance

    sig = Significance(config.compat, config.ci_level, config.seed, config.n_permutations)
    s, _, _ = analyse_subset(tested_run(run, config.compat), run.layers, sig)
    return _point_rows(s)


def divergence_point_null(lm_or_spec: str | LoadedModel = DEFAULT_MODEL, n_null: int = 200, seed: int = 0,
                          first: int = 0, max_seconds: float | None = None, **settings: Any) -> list[dict]:
    """:func:`divergence_point_verdicts` on instances ``first`` .. ``first + n_null - 1`` of
    :func:`divergence_null`'s shuffles (the same draws: instances beyond a full run's are new ones)."""
    check_budget(n_null, seed, max_seconds)
    config = study_config("divergence", lm_or_spec, settings)
    run, setup = pair_run(config)
    return run_instances("divergence", SHUFFLED, run.info.name, n_null, seed, setup,
                         lambda rng: divergence_point_verdicts(shuffled_run(run, rng), config), max_seconds,
                         first=first)


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
    from ...studies.phases import Phases
    from ...studies.phases.analysis import analyse_run

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


# -- scaling ------------------------------------------------------------------------------------------------------

SCALING_PEAK = CARD_PEAK
SCALING_SHIFTS = "peak depth across model sizes: SHIFTS"
SCALING_ANY = "peak depth across model sizes: STABLE or SHIFTS (assessable)"
SPLIT = "the pairs in random parts, analysed as models of one family"
SELF_COPY = "the same model under several names"


def scaling_verdicts(runs: dict[str, PairRun], config: StudyConfig, summaries: dict[str, dict] | None = None
                     ) -> tuple[dict, list[Verdict]]:
    """The scaling study's analysis (``analyse_run`` per model, ``peak_verdict`` across them, as ``Scaling.run``
    in the default mode) of ``runs`` ({name: run}) and its verdict table; ``summaries``: models already analysed."""
    from ...studies.scaling import PEAK_SEARCH, Scaling
    from ...studies.scaling.analysis import analyse_run, peak_verdict

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
    from ...studies.scaling.analysis import analyse_run

    s = analyse_run(run, config)[0]
    names = [run.info.name] + [f"{run.info.name} (copy {k})" for k in range(1, copies)]
    summary, table = scaling_verdicts({}, config, {name: s for name in names})
    return stability_rows(summary, table[0])
