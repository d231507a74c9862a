"""One pooling's vectors, (n_texts, n_layers + 1, d), read one layer at a time.

    x = acts.pooled["mean"]     # a LayerStack; nothing is read yet
    x.shape                     # (n_texts, n_layers + 1, d)
    x[:, 5]                     # (n_texts, d) float32: hidden state 5 alone (from disk for a cached extraction)
    a, b = x[0::2], x[1::2]     # row selections, still lazy: a[:, 5] reads layer 5 once for both
    x[3]                        # (n_layers + 1, d): text 3 at every layer
    x.with_layer(30, pre)       # layer 30 replaced by ``pre`` (n_texts, d)
    np.asarray(x)               # every layer at once: only for data that fits in memory

A stack reads from a :class:`LayerSource`: an in-memory ``(n, n_layers + 1, d)`` array
(:class:`ArraySource`) or the layer-major files of an extraction (``engine.cache.store``). Whatever the
stored dtype, a layer comes back as float32. A source keeps the last layer it read, so the A and
B rows of one layer cost one read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ExtractionError


class LayerSource:
    """What a :class:`LayerStack` reads: ``read(l)`` -> (n_texts, d) float32 of hidden state ``l``."""

    n_texts: int
    n_states: int
    """Hidden states numbered 0 (embeddings) .. n_states - 1 (= n_layers)."""
    d: int
    layers: tuple[int, ...]
    """The hidden states this source holds (all of them unless the extraction chose some)."""

    def read(self, layer: int) -> np.ndarray:
        raise NotImplementedError

    def check_layer(self, layer: int) -> int:
        if not -self.n_states <= layer < self.n_states:
            raise IndexError(f"layer {layer} is out of range 0..{self.n_states - 1}")
        layer %= self.n_states
        if layer not in self.layers:
            raise ExtractionError(f"hidden state {layer} was not extracted: these activations hold layers "
                                  f"{list(self.layers)}; extract again with layers=None (every layer) or with it")
        return layer


class ArraySource(LayerSource):
    """Vectors already in memory: ``ArraySource(x)`` with ``x`` (n_texts, n_layers + 1, d), or
    ``ArraySource(x, layers=(0, 4, 8), n_states=9)`` with ``x`` (n_texts, 3, d) holding only those layers."""

    def __init__(self, array: np.ndarray, layers: Sequence[int] | None = None, n_states: int | None = None):
        array = np.asarray(array)
        if array.ndim != 3:
            raise ValueError(f"pooled vectors must be (n_texts, n_layers + 1, d), got shape {array.shape}")
        self.array = array
        self.n_texts, held, self.d = array.shape
        self.n_states = held if n_states is None else n_states
        self.layers = tuple(range(held)) if layers is None else tuple(int(k) for k in layers)
        if len(self.layers) != held:
            raise ValueError(f"{held} layers of vectors for {len(self.layers)} layer numbers {self.layers}")
        self._slot = {k: i for i, k in enumerate(self.layers)}

    def read(self, layer: int) -> np.ndarray:
        return np.asarray(self.array[:, self._slot[self.check_layer(layer)]], dtype=np.float32)


class LayerStack:
    """``(n_rows, n_layers + 1, d)`` vectors of one pooling, read one layer at a time; see the module docstring."""

    def __init__(self, source: LayerSource | np.ndarray, rows: np.ndarray | None = None,
                 overrides: dict[int, np.ndarray] | None = None):
        self.source = source if isinstance(source, LayerSource) else ArraySource(source)
        self.rows = rows
        """Positions in the source's texts, or None for all of them in order."""
        self.overrides = overrides or {}
        """layer -> (n_rows, d) vectors that replace that layer (e.g. the state before the final norm)."""

    @property
    def shape(self) -> tuple[int, int, int]:
        n = self.source.n_texts if self.rows is None else len(self.rows)
        return (n, self.source.n_states, self.source.d)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        return 3

    @property
    def layers(self) -> tuple[int, ...]:
        """The hidden states that can be read."""
        return tuple(sorted(set(self.source.layers) | set(self.overrides)))

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"LayerStack(shape={self.shape}, layers={len(self.layers)} of {self.shape[1]})"

    def layer(self, layer: int) -> np.ndarray:
        """``x.layer(5)``: (n_rows, d) float32, hidden state 5 of every row."""
        n_states = self.source.n_states
        if -n_states <= layer < n_states and layer % n_states in self.overrides:
            return self.overrides[layer % n_states]
        block = self.source.read(layer)
        return block if self.rows is None else block[self.rows]

    def __getitem__(self, key):
        if isinstance(key, tuple):
            if len(key) == 3:  # x[rows, layer, dims]: the dimensions taken from what the first two give
                return np.asarray(self[key[:2]])[..., key[2]]
            if len(key) != 2:
                raise IndexError("index a LayerStack as x[rows], x[rows, layer] or x[rows, layer, dims]")
            rows, layers = key
            picked = self if _is_all(rows) else self[rows]
            if isinstance(picked, np.ndarray):  # x[i, l]: one text
                return picked[layers]
            if isinstance(layers, (int, np.integer)):
                return picked.layer(int(layers))
            chosen = range(self.shape[1])[layers] if isinstance(layers, slice) else list(layers)
            return np.stack([picked.layer(int(k)) for k in chosen], axis=1)
        if isinstance(key, (int, np.integer)):
            return np.stack([self.layer(k)[key] for k in range(self.shape[1])])
        index = np.arange(self.shape[0])[key]
        rows = index if self.rows is None else self.rows[index]
        return LayerStack(self.source, rows, {k: v[index] for k, v in self.overrides.items()})

    def with_layer(self, layer: int, values: np.ndarray) -> LayerStack:
        """This stack with hidden state ``layer`` replaced by ``values`` (n_rows, d)."""
        values = np.asarray(values, dtype=np.float32)
        if values.shape != (self.shape[0], self.shape[2]):
            raise ValueError(f"replacement for layer {layer} must be {(self.shape[0], self.shape[2])}, "
                             f"got {values.shape}")
        return LayerStack(self.source, self.rows, {**self.overrides, layer % self.shape[1]: values})

    def __array__(self, dtype=None, copy=None):
        out = np.stack([self.layer(k) for k in range(self.shape[1])], axis=1)
        return out if dtype is None else out.astype(dtype)


def stack_of(x: LayerStack | np.ndarray) -> LayerStack:
    """``stack_of(x)``: ``x`` as a :class:`LayerStack` (an (n, n_layers + 1, d) array is wrapped, not copied)."""
    return x if isinstance(x, LayerStack) else LayerStack(ArraySource(x))


def _is_all(key) -> bool:
    return isinstance(key, slice) and key == slice(None)


def layer_blocks(x: LayerStack | np.ndarray, layers: Sequence[int]):
    """``for l, block in layer_blocks(run.a("mean"), layers)``: each layer's (n_rows, d) block in turn."""
    for layer in layers:
        yield layer, x[:, layer]
