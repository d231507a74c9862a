"""The ablation study under permuted language labels (see :mod:`layerscope.validation.nulls`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ...models import DEFAULT_MODEL, LoadedModel
from ...studies.ablation.claims import card_verdict
from ...study.config import StudyConfig
from .common import check_budget, is_printed, result_of, run_instances, study_config, verdict_row
from .relabel import permute_languages

PERMUTED_LANGUAGES = "language labels permuted across texts"
ABLATION_SIGNIFICANT = {"halves": ("early", "late"),
                        "synergy": ("synergistic", "no synergy (above the additive expectation)")}
"""The halves' and synergy labels that claim a difference (the report prints them where an interval excludes 0)."""


def ablation_verdicts(scores, model: str, n: int, order: list[str], variants: list, config: StudyConfig
                      ) -> list[dict]:
    """The ablation study's analysis of ``scores`` (``analyse_model``) and its verdicts, per variant: H5 (the verdict
    table's), and the report's labels of which half matters more for the disparity and of synergy."""
    from ...studies.ablation import Ablation
    from ...studies.ablation.results import analyse_model

    s, _ = analyse_model(model, n, scores, order, variants, config)
    summary = {"bits": variants[0].bits, "recipe": variants[0].recipe, "primary": variants[0].label,
               "models": {model: s}, "warnings": []}
    table = Ablation.verdicts(result_of("ablation", config, summary))
    out = []
    for v, (label, entry) in zip(table, s["variants"].items(), strict=True):
        h5, halves, synergy = (entry["verdicts"].get(k, {}) for k in ("h5", "halves", "synergy"))
        critical, syn = halves.get("more_critical_for_disparity"), synergy.get("label")
        out += [verdict_row(card_verdict(label), is_printed(v.status), v, h5["result"], h5.get("reduction_pct")),
                verdict_row(f"one half more critical for the disparity [{label}]",
                            critical in ABLATION_SIGNIFICANT["halves"], None, critical, halves.get("disparity_diff"),
                            assessed=critical is not None),
                verdict_row(f"synergy of the gateway layers [{label}]", syn in ABLATION_SIGNIFICANT["synergy"], None,
                            syn, synergy.get("difference"), assessed=syn not in (None, "undetermined"))]
    return out


def ablation_scores(config: StudyConfig):
    """Score the study's configurations once, as ``Ablation.run`` does: (scores, model name, decoder layers,
    configuration names, variants, seconds)."""
    from ...data.languages import load_languages
    from ...models import decoder_layers, load_model
    from ...studies.ablation import study_configs, study_max_length, study_variants
    from ...studies.ablation.runner import score_configs

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
