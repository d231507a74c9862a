"""One model at a time: load it, hand it to the study, time each step, free it before the next one loads.

    timings: dict[str, float] = {}
    for run in each_model(config, timings):          # a progress line per model
        states = token_states(run.lm, texts)          # the study's own work on the loaded model
        run.mark("extract_s")                          # seconds since the last mark (loading: "load_s")
        info = run.release()                           # free the weights before a long analysis
        ...
        run.mark("analysis_s")

``timings`` adds up each step over the models (the manifest's ``timings``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from ..models import LoadedModel, ModelInfo, load_model
from ..progress import steps

if TYPE_CHECKING:
    from .config import StudyConfig


def free_memory() -> None:
    """Return freed tensors' memory (and the GPU's cached blocks) before the next model loads."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class ModelRun:
    """A loaded model and the clock of its steps."""

    def __init__(self, lm: LoadedModel, timings: dict[str, float], start: float):
        self.lm: LoadedModel | None = lm
        self.info: ModelInfo = lm.info
        self._timings, self._last = timings, start

    def mark(self, key: str) -> float:
        """Add the seconds since the last mark to ``timings[key]``; returns them."""
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        self._timings[key] = round(self._timings.get(key, 0.0) + seconds, 3)
        return seconds

    def release(self) -> ModelInfo:
        """Drop the model's weights (its info stays); each_model does it after the study's step anyway."""
        if self.lm is not None:
            self.lm = None
            free_memory()
        return self.info


def each_model(config: StudyConfig, timings: dict[str, float]) -> Iterator[ModelRun]:
    """Load each of ``config.models`` in turn (``load_s`` timed) and yield it; freed before the next loads."""
    for spec in steps(config.models, desc=f"{config.study}: models", unit="model"):
        start = time.perf_counter()
        run = ModelRun(load_model(spec, dtype=config.dtype, device=config.device, device_map=config.device_map),
                       timings, start)
        run.mark("load_s")
        try:
            yield run
        finally:
            run.release()
