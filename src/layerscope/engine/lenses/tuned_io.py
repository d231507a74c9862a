"""The tuned lens on disk: a folder the ``tuned-lens`` package (Belrose et al. 2023) reads and writes alike.

    write_lens(folder, translators.state_dict(), config)   # folder/config.json + folder/params.pt
    config, params = read_lens(folder)                     # dict, {"0.weight": (d, d), "0.bias": (d,), ...}
    check_shapes(folder, config, params, d_model=576, n_layers=30)   # LensError naming both sides on a mismatch

The folder holds

- ``params.pt``: the state dict of the translator list, one ``torch.nn.Linear(d, d)`` per hidden state
  ``0 .. n_layers - 1``: keys ``0.weight`` (d, d), ``0.bias`` (d,), ``1.weight``, ...; translator ``l`` maps
  ``h`` (..., d) to ``h + h @ W_l.T + b_l``. Hidden state ``n_layers`` has none (the model's own head reads it).
- ``config.json``: the ``tuned-lens`` package's keys ``base_model_name_or_path``, ``d_model``,
  ``num_hidden_layers``, ``bias`` (true), ``base_model_revision``, ``unembed_hash`` (the package's hash of the
  head's weight, which it checks on loading) and ``lens_type`` (``"linear_tuned_lens"``), and layerscope's own
  record under :data:`OWN_KEY` (the model's layerscope name, weights hash, steps, tokens per step, token-draws,
  optimiser, corpus, held-out and in-sample metrics); the package ignores a key it does not know.
  ``base_model_name_or_path`` is the weights' Hugging Face id where layerscope knows it (the zoo's SmolLM2:
  ``HuggingFaceTB/SmolLM2-135M-Instruct``), so the package can load the model from it.

``params.pt`` is read with ``torch.load(..., weights_only=True)``: a pickle that names anything but tensors and
plain containers (one whose unpickling would run code) is refused before anything in it runs, as a
:class:`LensError`.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from ...errors import LayerscopeError
from ...io import atomic_file
from ...jsonfile import JSONReadError, read_json

CONFIG = "config.json"
PARAMS = "params.pt"
LENS_TYPE = "linear_tuned_lens"
OWN_KEY = "layerscope"
"""The config.json key under which layerscope keeps its own record of how the lens was made."""
PACKAGE_KEYS = ("base_model_name_or_path", "d_model", "num_hidden_layers", "bias", "base_model_revision",
                "unembed_hash", "lens_type")
"""The keys of the ``tuned-lens`` package's config, in its order."""


class LensError(LayerscopeError):
    """A tuned-lens folder that cannot be read, or that does not fit the model it is used with."""


def package_config(name: str, d_model: int, n_layers: int, revision: str | None = None,
                   own: dict[str, Any] | None = None, unembed_hash: str | None = None) -> dict[str, Any]:
    """``package_config("HuggingFaceTB/SmolLM2-135M-Instruct", 576, 30, own={...})``: a config.json dict in the
    package's keys, with layerscope's ``own`` record (if any) under :data:`OWN_KEY`."""
    config: dict[str, Any] = {"base_model_name_or_path": name, "d_model": int(d_model),
                              "num_hidden_layers": int(n_layers), "bias": True, "base_model_revision": revision,
                              "unembed_hash": unembed_hash, "lens_type": LENS_TYPE}
    if own is not None:
        config[OWN_KEY] = own
    return config


def write_lens(folder: str | Path, params: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """Write ``params`` (the translators' state dict, moved to the CPU) as ``params.pt`` and ``config`` as
    ``config.json`` into ``folder`` (made if missing), each atomically and config.json last; returns the folder."""
    folder = Path(folder)
    with atomic_file(folder / PARAMS) as f:  # each file whole or not at all; config.json last: a finished lens
        torch.save({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in params.items()}, f)
    with atomic_file(folder / CONFIG, "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=False) + "\n")
    return folder


def read_lens(folder: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config, params = read_lens(folder)``: config.json as a dict and params.pt as {key: CPU tensor}.

    :class:`LensError` naming the file and the fix for a missing folder or file, a config.json that is not a JSON
    object, a params.pt that is not a dict of tensors, and one that ``weights_only`` loading refuses (a pickle
    that would run code: nothing of it runs)."""
    folder = Path(folder)
    config_path, params_path = folder / CONFIG, folder / PARAMS
    for path in (config_path, params_path):
        if not path.is_file():
            raise LensError(f"{path} is missing; a tuned-lens folder holds {CONFIG} and {PARAMS} (as "
                            "TunedLens.save or the tuned-lens package write them): point at such a folder")
    try:
        config = read_json(config_path)
    except (OSError, JSONReadError) as exc:
        raise LensError(f"{config_path} is not readable JSON ({exc}); write it again with TunedLens.save") from None
    if not isinstance(config, dict):
        raise LensError(f"{config_path} holds a JSON {type(config).__name__}, not an object with the keys "
                        f"{', '.join(PACKAGE_KEYS)}; write it again with TunedLens.save")
    try:
        params = torch.load(params_path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LensError(f"{params_path} cannot be loaded as plain tensors ({first}); it may hold a pickle that "
                        "runs code, which is never unpickled. Use a params.pt that holds only the translators' "
                        "state dict of tensors (TunedLens.save or the tuned-lens package write one)") from None
    if not isinstance(params, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in params.items()):
        raise LensError(f"{params_path} holds a {type(params).__name__}, not a state dict {{'0.weight': tensor, "
                        "'0.bias': tensor, ...}; use a params.pt written by TunedLens.save or the tuned-lens package")
    return config, params


def check_shapes(folder: str | Path, config: dict[str, Any], params: dict[str, torch.Tensor], *, d_model: int,
                 n_layers: int, model: str = "the model") -> None:
    """:class:`LensError` naming the lens's and the model's sizes when the lens in ``folder`` does not fit a model
    of width ``d_model`` and ``n_layers`` blocks: config.json's ``d_model`` and ``num_hidden_layers``, and
    ``params`` holding exactly ``l.weight`` (d, d) and ``l.bias`` (d,) for l in 0..n_layers-1."""
    lens = f"the tuned lens in {folder}"
    fix = f"train a lens for {model} (train_tuned_lens) or load the lens with the model it was trained for"
    if config.get("lens_type", LENS_TYPE) != LENS_TYPE:
        raise LensError(f"{lens} is a {config.get('lens_type')!r} lens; layerscope reads only {LENS_TYPE!r} "
                        "lenses (one affine translator per hidden state)")
    got_d, got_n = config.get("d_model"), config.get("num_hidden_layers")
    if (got_d, got_n) != (d_model, n_layers):
        raise LensError(f"{lens} is for d_model={got_d} and {got_n} layers (config.json), but {model} has "
                        f"d_model={d_model} and {n_layers} layers; {fix}")
    want = {f"{i}.{part}" for i in range(n_layers) for part in ("weight", "bias")}
    if set(params) != want:
        extra, missing = sorted(set(params) - want), sorted(want - set(params))
        n_got = len({k.split(".")[0] for k in params})
        raise LensError(f"{lens} holds {n_got} translators in {PARAMS} (missing {missing[:4]}, extra {extra[:4]}), "
                        f"but {model} has {n_layers} layers and needs translators 0..{n_layers - 1}; {fix}")
    for key, tensor in params.items():
        shape = (d_model, d_model) if key.endswith("weight") else (d_model,)
        if tuple(tensor.shape) != shape:
            raise LensError(f"{lens}: {PARAMS} holds {key} of shape {tuple(tensor.shape)}, but {model} has "
                            f"d_model={d_model} and needs {shape}; {fix}")
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise LensError(f"{lens}: {PARAMS} holds {key} that is not all finite floating-point numbers; "
                            "train the lens again")
