"""Which weights of which decoder layers to quantize, and how to undo it.

    params = target_params(model, layers={3, 4}, targets="linear")   # name -> (param, channel axis)
    snapshot = WeightSnapshot(params)          # copies of these layers' weights only
    quantize_layers(params, bits=4, scheme="per-channel")
    snapshot.restore()                         # bit-identical originals, no reload

Snapshot only what one configuration changes and restore it before the next: memory then holds one
configuration's layers, never a second copy of the whole model.

``targets="linear"``: the weight matrices of the linear layers (nn.Linear, and GPT-2's
Conv1D, whose output channels are its columns). ``targets="all-weights"``: every parameter
whose name contains "weight", norm weights included, as the ablation notebook does.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ..models.info import decoder_layers
from .fake import fake_quantize

TARGETS = ("linear", "all-weights")


def _channel_axes(layer: nn.Module) -> dict[str, int]:
    """Parameter name -> output-channel axis, for the linear weights of a block."""
    axes = {}
    for name, module in layer.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.Linear):
            axes[f"{prefix}weight"] = 0
        elif type(module).__name__ == "Conv1D":  # transformers' GPT-2 linear: weight is (in, out)
            axes[f"{prefix}weight"] = 1
    return axes


def target_params(
    model: nn.Module, layers: Iterable[int], targets: str = "linear"
) -> dict[str, tuple[nn.Parameter, int]]:
    """{qualified name: (parameter, channel axis)} for the chosen layers and targets."""
    if targets not in TARGETS:
        raise ValueError(f"unknown targets {targets!r}; use one of {TARGETS}")
    blocks = decoder_layers(model)
    out = {}
    for i in sorted(set(layers)):
        axes = _channel_axes(blocks[i])
        for name, param in blocks[i].named_parameters():
            if targets == "linear" and name not in axes:
                continue
            if targets == "all-weights" and "weight" not in name:
                continue
            out[f"layers.{i}.{name}"] = (param, axes.get(name, 0))
    return out


class WeightSnapshot:
    """Copies of parameters, to put back once a configuration is done."""

    def __init__(self, params: dict[str, tuple[nn.Parameter, int]]):
        self._params = {name: p for name, (p, _) in params.items()}
        self._saved = {name: p.detach().clone() for name, p in self._params.items()}

    @property
    def nbytes(self) -> int:
        """Memory the copies take."""
        return sum(t.numel() * t.element_size() for t in self._saved.values())

    def saved(self, name: str) -> torch.Tensor:
        """The original value of parameter ``name``."""
        return self._saved[name]

    @torch.no_grad()
    def restore(self, names: Iterable[str] | None = None) -> None:
        for name in self._params if names is None else names:
            self._params[name].copy_(self._saved[name])


@torch.no_grad()
def quantize_layers(params: dict[str, tuple[nn.Parameter, int]], bits: int, scheme: str) -> None:
    """Replace each parameter by its fake-quantized value, in place."""
    for param, axis in params.values():
        param.copy_(fake_quantize(param.data, bits, scheme, axis))
