"""What one extraction pass yields, and how it is saved.

    acts = extract(lm, texts)
    acts.pooled["mean"]        # a LayerStack (n_texts, n_layers + 1, d); layer 0 = embeddings
    acts.pooled["mean"][:, 5]  # (n_texts, d) float32: one layer, read alone from the on-disk store
    acts.pooled["mean_no_pos0"], acts.pooled["mean_no_massive"]   # sensitivity views, computed by default
    acts.pre_norm["mean"]      # (n_texts, d): the last block's output before the final norm
    acts.nll_mean[i]           # mean next-token NLL of text i (nats), = HF outputs.loss
    acts.save("out/activations.npz");  Activations.load("out/activations.npz")
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ExtractionError
from ...io import atomic_file
from ...models.info import ModelInfo
from ...modes import renamed_config
from ..cache.layers import ArraySource, LayerStack, stack_of
from .pooling import ALL_POOLINGS


@dataclass(frozen=True)
class ExtractSettings:
    """Everything besides the model and the texts that decides an extraction's numbers."""

    poolings: tuple[str, ...] = ALL_POOLINGS
    """``POOLINGS`` (mean, last, first) and the sensitivity views ``CHECK_POOLINGS``, see :mod:`.pooling`."""
    compat: str | None = None
    """``None``: corrected method (BOS dropped by id). ``"notebooks"``: the notebooks' (token 0 dropped)."""
    max_length: int | None = None
    """Truncate texts to this many tokens (``None``: never truncate)."""
    padding_side: str = "right"
    layers: tuple[int, ...] | None = None
    """The hidden states pooled and stored (``None``: every one, 0 = embeddings .. n_layers)."""
    store_dtype: str = "float32"
    """How the pooled vectors are stored: ``float32``, or ``float16`` for half the disk (read back as float32)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExtractSettings:
        """The settings :meth:`to_dict` wrote, also from a file saved before ``layers`` existed (its
        ``batch_size`` is dropped: the batch plan never changes a number)."""
        d = {k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}}
        d["poolings"] = tuple(d["poolings"])
        if d.get("layers") is not None:
            d["layers"] = tuple(d["layers"])
        return cls(**renamed_config(d))  # a file written by 0.4.0 or earlier spells the notebooks' mode "seed"


@dataclass(frozen=True)
class ExtractStats:
    """How an extraction went; not part of its numbers."""

    batches: int
    batches_computed: int
    batches_reused: int
    seconds: float
    store_wait_s: float = 0.0
    """Seconds the forward passes waited for the store (both pinned buffers still being written): above a few
    percent of ``seconds``, the disk, not the model, sets the pace."""
    store_write_s: float = 0.0
    """Seconds the writer thread spent checking and writing batches, alongside the passes."""


@dataclass(frozen=True)
class Activations:
    texts: list[str]
    pooled: dict[str, LayerStack]
    """pooling -> (n_texts, n_layers + 1, d) :class:`LayerStack`, read one layer at a time (``x[:, l]``); an
    (n_texts, n_layers + 1, d) array given here is wrapped in one."""
    nll_sum: np.ndarray
    """(n_texts,) float64 summed next-token NLL in nats."""
    n_scored: np.ndarray
    """(n_texts,) int tokens that were predicted (all but the first)."""
    n_tokens: np.ndarray
    """(n_texts,) int tokens fed to the model, special tokens included."""
    settings: ExtractSettings
    model: ModelInfo
    fingerprint: str
    pre_norm: Mapping[str, np.ndarray] = field(default_factory=dict)
    """pooling -> (n_texts, d) float32: the same poolings of the last decoder block's output, before the model's
    final norm (``pooled[p][:, n_layers]`` is after it, as transformers' last hidden state); from an extraction's
    store, each is read when looked up, not kept. Empty for a file saved before layerscope captured it (format 1):
    extract again to get it."""
    stats: ExtractStats | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "pooled", {p: stack_of(x) for p, x in self.pooled.items()})

    @property
    def layers(self) -> tuple[int, ...]:
        """The hidden states that were extracted (every one unless ``extract(..., layers=...)`` chose some)."""
        return next(iter(self.pooled.values())).layers if self.pooled else ()

    @property
    def nll_mean(self) -> np.ndarray:
        """(n_texts,) mean next-token NLL; NaN for a text with a single token."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.nll_sum / self.n_scored

    @property
    def n_texts(self) -> int:
        return len(self.texts)

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    def save(self, path: str | os.PathLike) -> None:
        """Write one ``.npz`` file (atomically) that :meth:`load` reads back."""
        meta = {"texts": self.texts, "settings": self.settings.to_dict(), "model": self.model.to_dict(),
                "fingerprint": self.fingerprint}
        arrays = {f"pooled_{k}": v[:, list(v.layers)] for k, v in self.pooled.items()}  # the extracted layers
        arrays.update({f"prenorm_{k}": v for k, v in self.pre_norm.items()})
        with atomic_file(path) as f:
            np.savez(f, nll_sum=self.nll_sum, n_scored=self.n_scored, n_tokens=self.n_tokens,
                     meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Activations:
        """``Activations.load("runs/extract-X")``: a file :meth:`save` wrote, or the folder holding its
        ``activations.npz`` (what ``layerscope extract`` writes), as :meth:`StudyResult.load` takes a run folder.
        A file written before the pre-norm capture loads with ``pre_norm == {}``."""
        path = Path(path)
        if path.is_dir():
            path = path / "activations.npz"
            if not path.is_file():
                raise ExtractionError(f"{path.parent} holds no activations.npz; pass a folder written by "
                                      "`layerscope extract` or a file written by Activations.save")
        elif not path.is_file():
            raise ExtractionError(f"activations file {path} does not exist; check the path")
        try:
            return cls._read(path)
        except ValueError as exc:
            if "pickle" not in str(exc):
                raise
            raise ExtractionError(f"{path} holds pickled Python objects, which layerscope never loads (they can "
                                  "run code); pass a file written by Activations.save or `layerscope extract`, "
                                  "or write it again with them") from None

    @classmethod
    def _read(cls, path: Path) -> Activations:
        with np.load(path, allow_pickle=False) as z:  # an object array is refused, never unpickled
            meta = json.loads(z["meta"].tobytes())
            settings = ExtractSettings.from_dict(meta["settings"])
            n_states = meta["model"]["n_layers"] + 1
            return cls(
                texts=meta["texts"],
                pooled={k.removeprefix("pooled_"): LayerStack(ArraySource(z[k], settings.layers, n_states))
                        for k in z.files if k.startswith("pooled_")},
                pre_norm={k.removeprefix("prenorm_"): z[k] for k in z.files if k.startswith("prenorm_")},
                nll_sum=z["nll_sum"], n_scored=z["n_scored"], n_tokens=z["n_tokens"],
                settings=settings, model=ModelInfo(**meta["model"]),
                fingerprint=meta["fingerprint"],
            )
