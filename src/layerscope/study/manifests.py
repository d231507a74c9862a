"""The manifest every result carries: which models (weights hash, layers), which data (hash),
library versions, the seed, and timings.

    manifest(config, [model_entry(info, acts)], dataset_entry(pairs), timings)
"""

from __future__ import annotations

from ..data import PairDataset
from ..engine import Activations
from ..models import ModelInfo, exact_name, prequantized
from ..provenance import library_versions
from .config import StudyConfig


def model_entry(info: ModelInfo, acts: Activations | None = None) -> dict:
    """The manifest's record of one model: ``exact`` names the checkpoint and its quantization (a zoo name's
    ``SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32``), ``prequantized`` the grid its weights already
    lie on (``Q4_1``; None for full precision as far as the spec tells). A planted copy's entry
    (:mod:`layerscope.plant`) names the checkpoint it was planted in (``..., planted +identity(at=15,k=4)``)
    and holds ``plant``, its records; a loaded model's has no such key."""
    spec = info.plant[0]["base"] if info.plant else info.name  # a planted copy: the model first planted
    exact = exact_name(spec, info.revision)
    if info.plant:
        exact = f"{exact}, planted {info.name.removeprefix(spec)}"
    entry = {"name": info.name, "exact": exact,
             "prequantized": prequantized(spec), "revision": info.revision, "weights_hash": info.weights_hash,
             "n_layers": info.n_layers,
             "hidden_size": info.hidden_size, "architecture": info.architecture, "adds_bos": info.adds_bos,
             "last_hidden_normed": info.last_hidden_normed, "dtype": info.dtype, "device": info.device,
             "max_positions": info.max_positions}
    if info.plant:  # a planted copy (layerscope.plant): what was planted in which base, oldest first
        entry["plant"] = list(info.plant)
    if acts is not None:
        entry["activations_fingerprint"] = acts.fingerprint
        entry["extraction"] = ({"batches": acts.stats.batches, "computed": acts.stats.batches_computed,
                                "reused": acts.stats.batches_reused} if acts.stats else None)
    return entry


def dataset_entry(pairs: PairDataset) -> dict:
    return {"kind": "pairs", "source": pairs.source, "hash": pairs.hash, "n_pairs": pairs.n_pairs,
            "n_categories": len(pairs.categories)}


def add_timings(timings: dict[str, float], **seconds: float) -> None:
    """Add each model's seconds to the run's totals (``load_s=..., extract_s=..., analysis_s=...``)."""
    for key, value in seconds.items():
        timings[key] = round(timings.get(key, 0.0) + value, 3)


def manifest(config: StudyConfig, models: list[dict], dataset: dict | None, timings: dict[str, float],
             max_length: int | None = None) -> dict:
    """``max_length``: the truncation the texts got, when it is not ``config.max_length`` (ablation, notebooks mode)."""
    return {"models": models, "dataset": dataset, "seed": config.seed, "max_length": max_length or config.max_length,
            "versions": library_versions(), "timings": timings}
