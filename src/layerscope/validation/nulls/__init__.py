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

The package: :mod:`.common` (the summary, the loop over instances), :mod:`.relabel` (the relabelings),
:mod:`.pairs` (divergence, phases, scaling), :mod:`.ablation` and :mod:`.probe`; every name is importable from
``layerscope.validation.nulls``.
"""

from __future__ import annotations

from ...stats import wilson
from .ablation import ABLATION_SIGNIFICANT, PERMUTED_LANGUAGES, ablation_null, ablation_scores, ablation_verdicts
from .common import (
    PRINTED,
    ROW_KEYS,
    check_budget,
    false_alarm_rows,
    is_printed,
    pair_run,
    result_of,
    run_instances,
    study_config,
    summary_text,
    verdict_row,
)
from .pairs import (
    DIVERGENCE_HEADLINE,
    DIVERGENCE_LAYER,
    DIVERGENCE_POINT,
    FALSE_PATTERNS,
    PHASES_LATE,
    PHASES_LAYER,
    PHASES_PATTERN,
    SCALING_ANY,
    SCALING_PEAK,
    SCALING_SHIFTS,
    SELF_COPY,
    SHUFFLED,
    SPLIT,
    SPLITS,
    divergence_null,
    divergence_point_null,
    divergence_point_verdicts,
    divergence_verdicts,
    phases_null,
    phases_verdicts,
    scaling_null,
    scaling_self_copy,
    scaling_split_null,
    scaling_verdicts,
    self_copy_verdicts,
    split_verdicts,
    stability_rows,
)
from .probe import COIN_FLIPS, PROBE_DECODABLE, probe_null
from .relabel import (
    TEXT_LABELS,
    check_rng,
    coin_flip_pairs,
    coin_flips,
    flip_pairs,
    flipped_rows,
    permute_languages,
    shuffle_preferences,
    shuffled_run,
    split_pairs,
    with_pair_order,
)

__all__ = [
    "ABLATION_SIGNIFICANT", "COIN_FLIPS", "DIVERGENCE_HEADLINE", "DIVERGENCE_LAYER", "DIVERGENCE_POINT",
    "FALSE_PATTERNS", "PERMUTED_LANGUAGES", "PHASES_LATE", "PHASES_LAYER", "PHASES_PATTERN", "PRINTED",
    "PROBE_DECODABLE", "ROW_KEYS", "SCALING_ANY", "SCALING_PEAK", "SCALING_SHIFTS", "SELF_COPY", "SHUFFLED",
    "SPLIT", "SPLITS", "TEXT_LABELS", "ablation_null", "ablation_scores", "ablation_verdicts", "check_budget",
    "check_rng", "coin_flip_pairs", "coin_flips", "divergence_null", "divergence_point_null",
    "divergence_point_verdicts", "divergence_verdicts", "false_alarm_rows",
    "flip_pairs", "flipped_rows", "is_printed", "pair_run", "permute_languages", "phases_null", "phases_verdicts",
    "probe_null", "result_of", "run_instances", "scaling_null", "scaling_self_copy", "scaling_split_null",
    "scaling_verdicts", "self_copy_verdicts", "shuffle_preferences", "shuffled_run", "split_pairs",
    "split_verdicts", "stability_rows", "study_config", "summary_text", "verdict_row", "wilson", "with_pair_order",
]
