"""Score every text under every layer configuration, with one model load per model, reusing unchanged layers.

    scores = score_configs(lm, texts, configs, variants, batch_size, max_length)     # prefix reuse on
    scores.per_text            # config, variant, lang, resource, sample, n_quantized, nll, n_scored, ppl
    scores.layer_error         # variant, layer, lang, sqnr_db, sqnr_db_excl_pos0, weight_rel_err
    scores.reuse               # what prefix reuse did: passes, layers run, streams kept, memory

Prefix reuse: a configuration whose first quantized layer is k computes layers 0..k-1 exactly as the baseline
did, and one that agrees with an earlier configuration on layers 0..k-1 (the same layers quantized the same
way) computes them as that one did. The passes are ordered so neighbours share the longest prefix
(:mod:`~layerscope.engine.interventions.prefix_plan`), each pass keeps the residual streams later passes start from, and
a pass starting at k runs only layers k.. (:mod:`~layerscope.engine.interventions.prefix`). At most ``budget_bytes`` of
host memory hold kept streams; a pass whose stream does not fit runs whole. ``prefix_reuse=False``: every pass whole.

Weights: before each pass only the layers it quantizes (from its start on) are copied, then quantized, and put
back after it, so memory holds one configuration's changed layers at a time. The baseline is scored once and
shared by every variant; the per-layer quantization error is measured in its pass (:mod:`.layer_error`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...data.languages import LanguageTexts
from ...engine.interventions.prefix_plan import plan_passes
from ...engine.interventions.scoring import Scorer
from ...errors import ExtractionError
from ...models import LoadedModel, decoder_layers
from ...progress import steps
from ...quant import WeightSnapshot, quantize_layers, target_params
from .configs import LayerConfig, Variant
from .layer_error import LayerErrors

__all__ = ["PREFIX_BUDGET_GIB", "Scores", "Variant", "passes", "score_configs", "signatures_of"]

PREFIX_BUDGET_GIB = 4.0
"""Default host memory (GiB) for the residual streams prefix reuse keeps."""


@dataclass(frozen=True)
class Scores:
    per_text: pd.DataFrame
    """One row per configuration, variant and text: nll (mean per scored token), n_scored, ppl."""
    layer_error: pd.DataFrame
    """One row per variant, quantized layer and language (None: every text): sqnr_db, weight_rel_err."""
    reuse: dict
    """How the passes ran: on, passes, whole_passes, layers_run, layers_whole, peak_streams, stream_bytes,
    budget_bytes, whole_by_budget."""


def passes(configs: dict[str, LayerConfig], variants: list[Variant]) -> list[tuple[Variant | None, LayerConfig]]:
    """The (variant, configuration) pairs to score: the baseline once (variant None), then every other
    configuration under every variant (the ``only_L`` sweep under variants with ``sweep`` only)."""
    baseline = LayerConfig("baseline", frozenset(), "no layer quantized")
    return [(None, baseline)] + [(v, c) for v in variants for c in configs.values()
                                 if c.name != "baseline" and (v.sweep or not c.name.startswith("only_L"))]


def signatures_of(jobs: list[tuple[Variant | None, LayerConfig]], variants: list[Variant], n: int) -> list[tuple]:
    """Per pass, per decoder layer: None (original weights) or the index of the variant quantizing it
    (:func:`~layerscope.engine.interventions.prefix_plan.plan_passes`)."""
    return [tuple(None if v is None or i not in c.quantize else variants.index(v) for i in range(n)) for v, c in jobs]


def score_configs(lm: LoadedModel, languages: LanguageTexts, configs: dict[str, LayerConfig],
                  variants: list[Variant], batch_size: int | None, max_length: int | None, *,
                  prefix_reuse: bool = True, budget_bytes: int = int(PREFIX_BUDGET_GIB * 2**30)) -> Scores:
    entries = languages.texts()
    texts = [text for _, _, text in entries]
    resource = {lang.code: lang.resource for lang in languages.languages}
    n = len(decoder_layers(lm.model))
    jobs = passes(configs, variants)
    signatures = signatures_of(jobs, variants, n)
    scorer = Scorer(lm, texts, batch_size=batch_size, max_length=max_length)
    plan = plan_passes(signatures, budget_bytes // max(1, scorer.state_bytes), reuse=prefix_reuse)
    touched = {v.label: (v, {i for w, c in jobs if w == v for i in c.quantize}) for v in variants}
    errors = LayerErrors(lm, touched, len(texts))
    results: dict[int, list[dict]] = {}
    peak_bytes = 0
    for step in steps(plan.passes, f"ablation {lm.info.name}: configurations", "pass"):
        variant, cfg = jobs[step.job]
        if variant is None:
            nll_sum, n_scored = scorer.score(keep=step.keep, watch=errors.measuring)
        else:
            params = target_params(lm.model, [i for i in cfg.quantize if i >= step.start], variant.targets)
            snapshot = WeightSnapshot(params)
            try:
                quantize_layers(params, variant.bits, variant.scheme)
                nll_sum, n_scored = scorer.score(step.start, step.source, step.keep)
            except ExtractionError as exc:
                raise ExtractionError(f"{exc} (configuration {cfg.name!r}, {variant.label} at {variant.bits} bits; "
                                      "the unquantized model gave finite numbers, so quantizing caused it: try more "
                                      "--bits)") from None
            finally:
                snapshot.restore()
        peak_bytes = max(peak_bytes, scorer.kept_bytes)
        scorer.drop(step.free)
        results[step.job] = [
            {"config": cfg.name, "variant": variant.label if variant else "baseline", "lang": lang,
             "resource": resource[lang], "sample": sample, "n_quantized": len(cfg.quantize), "nll": s / k,
             "n_scored": int(k)} for (lang, sample, _), s, k in zip(entries, nll_sum, n_scored, strict=False)]
    frames = [pd.DataFrame(results[0]).assign(variant=v.label) for v in variants]
    frames += [pd.DataFrame(results[j]) for j in range(1, len(jobs))]  # the callers' order, whatever the plan's
    per_text = pd.concat(frames, ignore_index=True)
    with np.errstate(over="ignore"):
        per_text["ppl"] = np.exp(per_text["nll"].to_numpy())
    reuse = {"on": prefix_reuse, "passes": len(plan.passes), "whole_passes": sum(p.start == 0 for p in plan.passes),
             "layers_run": plan.layers_run(), "layers_whole": len(plan.passes) * n, "peak_streams": plan.peak_states,
             "peak_bytes": peak_bytes, "stream_bytes": scorer.state_bytes, "budget_bytes": budget_bytes,
             "whole_by_budget": plan.whole_by_budget}
    return Scores(per_text, pd.DataFrame(errors.rows(languages)), reuse)
