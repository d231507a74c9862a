"""What one extraction pass yields, and how it is saved.

    acts = extract(lm, texts)
    acts.pooled["mean"]        # (n_texts, n_layers + 1, d) float32; layer 0 = embeddings
    acts.pooled["mean_no_pos0"], acts.pooled["mean_no_massive"]   # sensitivity views, computed by default
    acts.pre_norm["mean"]      # (n_texts, d): the last block's output before the final norm
    acts.nll_mean[i]           # mean next-token NLL of text i (nats), = HF outputs.loss
    acts.save("out/activations.npz");  Activations.load("out/activations.npz")
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ExtractionError
from ..io import atomic_file
from ..models.info import ModelInfo
from .pooling import ALL_POOLINGS


@dataclass(frozen=True)
class ExtractSettings:
    """Everything besides the model and the texts that decides an extraction's numbers."""

    poolings: tuple[str, ...] = ALL_POOLINGS
    """``POOLINGS`` (mean, last, first) and the sensitivity views ``CHECK_POOLINGS``, see :mod:`.pooling`."""
    compat: str | None = None
    """``None``: corrected method (BOS dropped by id). ``"seed"``: the notebooks' (token 0 dropped)."""
    batch_size: int = 16
    max_length: int | None = None
    """Truncate texts to this many tokens (``None``: never truncate)."""
    padding_side: str = "right"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExtractStats:
    """How an extraction went; not part of its numbers."""

    batches: int
    batches_computed: int
    batches_reused: int
    seconds: float


@dataclass(frozen=True)
class Activations:
    texts: list[str]
    pooled: dict[str, np.ndarray]
    """pooling -> (n_texts, n_layers + 1, d) float32."""
    nll_sum: np.ndarray
    """(n_texts,) float64 summed next-token NLL in nats."""
    n_scored: np.ndarray
    """(n_texts,) int tokens that were predicted (all but the first)."""
    n_tokens: np.ndarray
    """(n_texts,) int tokens fed to the model, special tokens included."""
    settings: ExtractSettings
    model: ModelInfo
    fingerprint: str
    pre_norm: dict[str, np.ndarray] = field(default_factory=dict)
    """pooling -> (n_texts, d) float32: the same poolings of the last decoder block's output, before the model's
    final norm (``pooled[p][:, n_layers]`` is after it, as transformers' last hidden state). Empty for a file
    saved before layerscope captured it (format 1): extract again to get it."""
    stats: ExtractStats | None = field(default=None, compare=False)

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
        arrays = {f"pooled_{k}": v for k, v in self.pooled.items()}
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
        with np.load(path) as z:
            meta = json.loads(z["meta"].tobytes())
            settings = meta["settings"]
            settings["poolings"] = tuple(settings["poolings"])
            return cls(
                texts=meta["texts"],
                pooled={k.removeprefix("pooled_"): z[k] for k in z.files if k.startswith("pooled_")},
                pre_norm={k.removeprefix("prenorm_"): z[k] for k in z.files if k.startswith("prenorm_")},
                nll_sum=z["nll_sum"], n_scored=z["n_scored"], n_tokens=z["n_tokens"],
                settings=ExtractSettings(**settings), model=ModelInfo(**meta["model"]),
                fingerprint=meta["fingerprint"],
            )


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()
