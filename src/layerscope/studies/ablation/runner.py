"""Score every text under every layer configuration, with one model load per model.

    per_text = score_configs(lm, texts, configs, variants, bits, batch_size, max_length)

The weights every configuration may touch are copied once (``WeightSnapshot``); before
each configuration only the weights the previous one changed are put back, so the model
is never reloaded. The baseline is scored once and shared by every variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...data.languages import LanguageTexts
from ...engine.scoring import score_texts
from ...errors import ExtractionError
from ...models import LoadedModel
from ...progress import steps
from ...quant import WeightSnapshot, quantize_layers, target_params
from .configs import LayerConfig


@dataclass(frozen=True)
class Variant:
    """How to quantize: a scheme and which weights."""

    label: str
    scheme: str
    targets: str
    sweep: bool


def score_configs(lm: LoadedModel, languages: LanguageTexts, configs: dict[str, LayerConfig],
                  variants: list[Variant], bits: int, batch_size: int, max_length: int | None) -> pd.DataFrame:
    entries = languages.texts()
    texts = [text for _, _, text in entries]
    resource = {lang.code: lang.resource for lang in languages.languages}
    touched = sorted({i for c in configs.values() for i in c.quantize})
    widest = "all-weights" if any(v.targets == "all-weights" for v in variants) else "linear"
    snapshot = WeightSnapshot(target_params(lm.model, touched, widest))

    def score(name: str, variant: Variant | None, n_quantized: int) -> list[dict]:
        try:
            nll_sum, n_scored = score_texts(lm, texts, batch_size=batch_size, max_length=max_length)
        except ExtractionError as exc:
            if variant is None:
                raise
            raise ExtractionError(f"{exc} (configuration {name!r}, {variant.label} at {bits} bits; the unquantized "
                                  "model gave finite numbers, so quantizing caused it: try more --bits)") from None
        return [{"config": name, "variant": variant.label if variant else "baseline", "lang": lang,
                 "resource": resource[lang], "sample": sample, "n_quantized": n_quantized, "nll": s / n,
                 "n_scored": int(n)} for (lang, sample, _), s, n in zip(entries, nll_sum, n_scored, strict=False)]

    baseline = score("baseline", None, 0)
    records = []
    jobs = [(v, c) for v in variants for c in configs.values()
            if c.name != "baseline" and (v.sweep or not c.name.startswith("only_L"))]
    dirty: list[str] = []
    try:
        for variant, cfg in steps(jobs, f"ablation {lm.info.name}: quantized configurations", "config"):
            snapshot.restore(dirty)
            params = target_params(lm.model, cfg.quantize, variant.targets)
            quantize_layers(params, bits, variant.scheme)
            dirty = list(params)
            records += score(cfg.name, variant, len(cfg.quantize))
    finally:
        snapshot.restore()
    frames = [pd.DataFrame(baseline).assign(variant=v.label) for v in variants] + [pd.DataFrame(records)]
    out = pd.concat(frames, ignore_index=True)
    with np.errstate(over="ignore"):
        out["ppl"] = np.exp(out["nll"].to_numpy())
    return out
