"""The record a plant leaves in the copy's :class:`~layerscope.models.ModelInfo`, and the hidden-state maps.

    state_map(planted.info)        # [0, 1, ..., 15, 20, 21, ...]: the planted copy's state for each base state
    planted.info.plant[-1]         # {"kind": "identity", "at": 15, "k": 4, "base": "smollm2-135m", ...}
    identity_map(at=15, k=4, n_layers=30)   # the map of one plant, worked out from its parameters

Hidden state s of a model of L blocks (s = 0..L) is the embeddings for s = 0 and the output of block s - 1
after; ``state_map[s]`` is the planted copy's state that equals (or, for scaled writes, corresponds to) the
base's state s, and ``None`` where the base state has no counterpart (the output of a removed block).

A record is plain JSON: ``{"kind", <the plant's parameters>, "base", "base_weights_hash", "n_layers_before",
"n_layers_after", "state_map"}``. The copy's ``weights_hash`` is the SHA-256 of the base's ``weights_hash`` and
the record's canonical JSON (all but the base's name), so a planted copy has its own activation-cache and
tuned-lens entries and two loads of the same weights under different names still share theirs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from ..models.info import ModelInfo
from ..models.load import LoadedModel


def identity_map(at: int, k: int, n_layers: int) -> list[int]:
    """k identity blocks inserted before block ``at``: s <= at -> s; s > at -> s + k."""
    return [s if s <= at else s + k for s in range(n_layers + 1)]


def duplicate_map(start: int, k: int, n_layers: int) -> list[int]:
    """blocks start..start+k-1 run twice: s <= start + k -> s (the first pass); s > start + k -> s + k."""
    return [s if s <= start + k else s + k for s in range(n_layers + 1)]


def remove_map(start: int, k: int, n_layers: int) -> list[int | None]:
    """blocks start..start+k-1 dropped: s <= start -> s; start < s <= start + k -> None; s > start + k -> s - k."""
    return [s if s <= start else None if s <= start + k else s - k for s in range(n_layers + 1)]


def scale_map(n_layers: int) -> list[int]:
    """scaled writes keep the depth: s -> s (from state start + 1 on, the states differ from the base's)."""
    return list(range(n_layers + 1))


def canonical(value: Any) -> str:
    """The canonical JSON of ``value``: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def planted_info(info: ModelInfo, kind: str, params: dict[str, Any], mapping: list[int | None],
                 n_layers_after: int) -> ModelInfo:
    """``info`` of the base, as the copy planted with ``kind(**params)`` has it: its name
    (``"smollm2-135m+identity(at=15,k=4)"``), depth, weights hash and one more record in ``plant``."""
    record = {"kind": kind, **params, "base": info.name, "base_weights_hash": info.weights_hash,
              "n_layers_before": info.n_layers, "n_layers_after": n_layers_after, "state_map": list(mapping)}
    unnamed = {key: value for key, value in record.items() if key != "base"}
    digest = hashlib.sha256(f"{info.weights_hash}\n{canonical(unnamed)}".encode()).hexdigest()
    args = ",".join(f"{key}={value}" for key, value in params.items())
    return dataclasses.replace(info, name=f"{info.name}+{kind}({args})", n_layers=n_layers_after,
                               weights_hash=digest, plant=(*info.plant, record))


def state_map(info: ModelInfo | LoadedModel) -> list[int | None]:
    """For each hidden state s of the model first planted (s = 0..L of the model as loaded), the hidden state of
    this copy that corresponds to it, through every plant of the chain (``None``: removed on the way). A model
    with no plant maps each state to itself."""
    info = info.info if isinstance(info, LoadedModel) else info
    if not info.plant:
        return list(range(info.n_layers + 1))
    mapped: list[int | None] = list(range(info.plant[0]["n_layers_before"] + 1))
    for record in info.plant:
        step = record["state_map"]
        mapped = [None if s is None else step[s] for s in mapped]
    return mapped
