"""Named sets of decoder layers to quantize.

    standard_configs(12)["gateway_protected"]     # {1, ..., 10}: first and last left alone
    load_configs("mine.json", 12)                  # {"name": [layers to quantize], ...}
    sweep_configs(12)["only_L3"]                   # {3}
    Variant("group:128/linear", "group:128", "linear", sweep=True, bits=4, recipe="group128")   # how to quantize
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...data.files import parse_json, read_text, require_file
from ...errors import DatasetError, short


@dataclass(frozen=True)
class Variant:
    """How to quantize: a scheme, which weights, how many bits, and the recipe they come from."""

    label: str
    scheme: str
    targets: str
    sweep: bool
    bits: int = 4
    recipe: str = "custom"


@dataclass(frozen=True)
class LayerConfig:
    name: str
    quantize: frozenset[int]
    description: str = ""


def standard_configs(n: int) -> dict[str, LayerConfig]:
    """The ablation notebook's eight configurations for a model with ``n`` decoder layers."""
    half = n // 2
    specs = [
        ("baseline", set(), "no layer quantized"),
        ("all_quantized", set(range(n)), "every layer quantized"),
        ("first_protected", set(range(1, n)), "layer 0 protected, the rest quantized"),
        ("last_protected", set(range(n - 1)), "last layer protected, the rest quantized"),
        ("gateway_protected", set(range(1, n - 1)), "first and last layers protected"),
        ("middle_protected", {0, n - 1}, "middle layers protected (first and last quantized)"),
        ("first_half_protected", set(range(half, n)), "first half protected"),
        ("second_half_protected", set(range(half)), "second half protected"),
    ]
    return {name: LayerConfig(name, frozenset(layers), text) for name, layers, text in specs}


def sweep_configs(n: int) -> dict[str, LayerConfig]:
    return {f"only_L{i}": LayerConfig(f"only_L{i}", frozenset({i}), f"only layer {i} quantized") for i in range(n)}


def load_configs(path: str | os.PathLike, n: int) -> dict[str, LayerConfig]:
    """A JSON file ``{name: [layers to quantize]}`` or ``{name: {"quantize": [...], "description": ...}}``,
    checked against a model with ``n`` decoder layers.

    ``baseline`` and ``all_quantized`` are added when missing: every comparison needs them.
    """
    configs = {"baseline": LayerConfig("baseline", frozenset(), "no layer quantized"),
               "all_quantized": LayerConfig("all_quantized", frozenset(range(n)), "every layer quantized")}
    for config in read_configs(path).values():
        bad = [i for i in sorted(config.quantize) if i >= n]
        if bad:
            raise DatasetError(f"{path}: config '{config.name}': layer {bad[0]} is out of range; this model has "
                               f"decoder layers 0 to {n - 1}")
        configs[config.name] = config
    return configs


def read_configs(path: str | os.PathLike) -> dict[str, LayerConfig]:
    """``read_configs("mine.json")``: the file's configurations, each a list of layer numbers >= 0, checked
    without a model (:func:`load_configs` checks them against the model's layer count)."""
    path = Path(path)
    require_file(path, "configs file", "--configs (or pass 'standard')")
    data = parse_json(path, read_text(path))
    if not isinstance(data, dict) or not data:
        raise DatasetError(f'{path}: expected a JSON object {{"name": [layers to quantize], ...}}')
    configs = {}
    for name, body in data.items():
        layers, text = (body.get("quantize"), body.get("description", "")) if isinstance(body, dict) else (body, "")
        if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
            raise DatasetError(f"{path}: config {short(name)}: expected a list of layer numbers to quantize")
        if any(i < 0 for i in layers):
            raise DatasetError(f"{path}: config {short(name)}: layer {min(layers)} is negative; decoder layers "
                               "count from 0")
        configs[name] = LayerConfig(name, frozenset(layers), str(text))
    return configs
