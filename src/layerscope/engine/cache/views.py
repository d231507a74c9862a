"""Read-only views of a :class:`~layerscope.engine.cache.store.LayerStore`: one pooling as a layer source, and arrays
read from the store when looked up.

    stack = LayerStack(StoreSource(store, "mean"))   # what store.pooled("mean") returns
    pre = RowArrays(store, {"mean": "prenorm_mean"})  # what store.pre_norm() returns; pre["mean"] reads the file
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from .entry import Layout
from .layers import LayerSource


class LayerStore(Protocol):
    """What the views read of a :class:`~layerscope.engine.cache.store.LayerStore` (which imports this module)."""

    layout: Layout

    def read_layer(self, pooling: str, slot: int) -> np.ndarray: ...

    def read_rows(self, key: str) -> np.ndarray: ...


class StoreSource(LayerSource):
    """One pooling of a :class:`LayerStore`, for a :class:`LayerStack`; keeps the last layer it read."""

    def __init__(self, store: LayerStore, pooling: str):
        self.store, self.pooling = store, pooling
        layout = store.layout
        self.n_texts, self.n_states, self.d, self.layers = layout.n_texts, layout.n_states, layout.d, layout.layers
        self._slot = {k: i for i, k in enumerate(layout.layers)}
        self._last: tuple[int, np.ndarray] | None = None

    def read(self, layer: int) -> np.ndarray:
        layer = self.check_layer(layer)
        if self._last is None or self._last[0] != layer:
            self._last = (layer, self.store.read_layer(self.pooling, self._slot[layer]))
        return self._last[1]

    def __getstate__(self):
        return {**self.__dict__, "_last": None}


class RowArrays(Mapping):
    """A read-only mapping whose values are read from a :class:`LayerStore` when asked for, not kept."""

    def __init__(self, store: LayerStore, keys: dict[str, str]):
        self.store, self.keys = store, keys

    def __getitem__(self, name: str) -> np.ndarray:
        return self.store.read_rows(self.keys[name])

    def __iter__(self):
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)
