"""Load any causal LM by one spec string.

    lm = load_model("smollm2-135m")                  # offline zoo (default)
    lm = load_model("EleutherAI/pythia-410m@step3000", dtype="bfloat16")   # hub id
    lm = load_model("smollm2-135m", dtype="auto")    # = dtype=None: bfloat16 on CUDA, float32 on CPU
    lm = load_model("path/to/folder")  /  load_model("model.Q4_K_M.gguf")
    lm = LoadedModel.wrap(model, tokenizer, name="my-model")   # objects you built
    lm.model, lm.tokenizer, lm.info.n_layers, lm.info.weights_hash

Weights go straight from the files to the target device in the target dtype (``device_map={"": device}``):
no float32 copy of the whole model is ever made on the host (benchmarks/load_rss.py measures the peak).

No code that comes with a model runs: ``trust_remote_code=False`` always, and a folder whose config.json or
tokenizer_config.json has an ``auto_map`` (classes from the model's own Python files) is refused, naming how to
load it yourself and hand it over with ``LoadedModel.wrap``. Weights are read as safetensors (or GGUF); a
``pytorch_model.bin`` pickle is read with ``weights_only=True``, and one that names anything but tensors is refused.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from safetensors import SafetensorError
from torch import nn

from ..errors import ModelLoadError
from .checks import (
    check_decoder_config,
    check_folder,
    check_no_custom_code,
    check_trained,
    custom_code_error,
    first_line,
    missing_tokenizer,
    pickle_error,
)
from .describe import describe
from .info import ModelInfo
from .spec import split_revision
from .zoo import DEFAULT_MODEL, ZOO, converted_gguf, zoo_folder

log = logging.getLogger(__name__)

AUTO_DTYPE = "auto"
"""The dtype name that means "pick from the device": :func:`default_dtype`."""

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


@dataclass
class LoadedModel:
    """A model in eval mode, its tokenizer, and the facts results record about it."""

    model: nn.Module
    tokenizer: object
    info: ModelInfo

    @classmethod
    def wrap(cls, model: nn.Module, tokenizer, *, name: str, source: str | None = None) -> LoadedModel:
        """Wrap a model and tokenizer you built yourself (e.g. a tiny random model)."""
        model.eval()
        info = describe(model, tokenizer, name=name, source=source or name)
        return cls(model=model, tokenizer=tokenizer, info=info)


def default_dtype(device: torch.device) -> torch.dtype:
    """``default_dtype(torch.device("cuda"))`` -> ``torch.bfloat16``: the dtype ``dtype=None`` or ``"auto"``
    loads in on ``device``: bfloat16 on CUDA (half the memory, the dtype most checkpoints ship in), float32
    elsewhere (CPU results stay exact and unchanged)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def is_dtype_name(dtype: object) -> bool:
    """``is_dtype_name("bf16")`` -> True: whether ``dtype`` is ``None``, ``"auto"`` or a name in ``DTYPES``."""
    return dtype is None or (isinstance(dtype, str) and dtype.lower() in (AUTO_DTYPE, *DTYPES))


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device | None = None) -> torch.dtype:
    """``resolve_dtype("bf16")`` -> ``torch.bfloat16``; ``None`` or ``"auto"``: :func:`default_dtype` of
    ``device`` (``None``: the device :func:`resolve_device` picks; a given one is not checked for being present)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if not is_dtype_name(dtype):
        raise ModelLoadError(f"unknown dtype '{dtype}'; use auto, float32, float16 or bfloat16 "
                             "(auto: bfloat16 on CUDA, float32 on CPU)")
    if dtype is None or dtype.lower() == AUTO_DTYPE:
        return default_dtype(resolve_device(None) if device is None else torch.device(device))
    return DTYPES[dtype.lower()]


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"unknown device '{device}'; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device 'cuda' was asked for but no CUDA GPU is available; use --device cpu")
    return device


def load_model(
    spec: str | LoadedModel = DEFAULT_MODEL,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    *,
    device_map: str | None = None,
    revision: str | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer, every parameter in one ``dtype`` (default ``"auto"``: bfloat16 on CUDA,
    float32 on CPU; the dtype used is recorded in ``info.dtype``).

    ``spec`` is a zoo name (``smollm2-135m``, ``gemma3-270m``), a local folder, a ``.gguf``
    file, or a Hugging Face hub id, optionally ``ID@REVISION``. ``device`` defaults to CUDA
    when present, else CPU; ``device_map="auto"`` spreads a big model over all GPUs instead
    (every weight must fit: weights offloaded to CPU or disk are an error). The weights are read straight onto
    the device in ``dtype``, with no float32 host copy first. A :class:`LoadedModel`
    (``LoadedModel.wrap(...)``) is returned as it is, so one can stand wherever a spec does.
    """
    if isinstance(spec, LoadedModel):
        return spec
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # the device first (a missing GPU fails before any loading), then the dtype that follows from it
    target = resolve_device(device if device_map is None else None)
    torch_dtype = resolve_dtype(dtype, target)
    if revision is None:
        spec, revision = split_revision(spec)
    source, is_hub = _resolve_source(spec)
    # device_map={"": device}: every tensor is read from the files straight onto the device in torch_dtype
    # (transformers 5 always loads this way; low_cpu_mem_usage is gone and ignored)
    kwargs = {"dtype": torch_dtype, "device_map": device_map if device_map is not None else {"": target}}
    if revision is not None:
        kwargs["revision"] = revision
    if is_hub and not _hub_reachable():
        kwargs["local_files_only"] = True
    if not is_hub:
        check_folder(Path(source))
        check_no_custom_code(Path(source), spec)
    try:
        tok_kwargs = {k: kwargs[k] for k in ("revision", "local_files_only") if k in kwargs}
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, **tok_kwargs)
    except (OSError, ValueError) as exc:
        if "trust_remote_code" in str(exc):  # a hub model whose tokenizer is its own code
            raise custom_code_error(spec, source, "tokenizer_config.json") from None
        if is_hub:
            raise _hub_error(spec, revision, kwargs.get("local_files_only", False), exc) from None
        raise missing_tokenizer(Path(source)) or ModelLoadError(
            f"could not load the tokenizer of {source}: {first_line(exc)}") from None
    # never the model's own code; a .bin pickle only as tensors; safetensors only where the folder has them
    safe = {"trust_remote_code": False, "weights_only": True}
    if not is_hub and any(Path(source).glob("*.safetensors")):
        safe["use_safetensors"] = True
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(source, output_loading_info=True, **safe, **kwargs)
    except pickle.UnpicklingError as exc:
        raise pickle_error(str(source), exc) from None
    except (OSError, ValueError, SafetensorError) as exc:
        if "trust_remote_code" in str(exc):  # a hub model of a kind transformers knows only from its own code
            raise custom_code_error(spec, source, "config.json") from None
        if is_hub:
            raise _hub_error(spec, revision, kwargs.get("local_files_only", False), exc) from None
        kind = re.search(r"Unrecognized configuration class .*?(\w+)'>", str(exc))
        if kind:
            raise ModelLoadError(f"{source} holds a {kind[1].removesuffix('Config')} model, which transformers "
                                 "cannot load as a causal LM (it is not decoder-only); use a decoder-only causal "
                                 "LM (e.g. GPT-2, Llama, Pythia, SmolLM2)") from None
        raise ModelLoadError(f"could not load a causal LM from {source}: {first_line(exc)}") from None
    for part, where in ((model.config, "config.json"), (tokenizer, "tokenizer_config.json")):
        auto_map = getattr(part, "auto_map", None) or getattr(part, "init_kwargs", {}).get("auto_map")
        if auto_map:  # a hub model that ships code beside a class transformers has: its code is meant, refuse
            raise custom_code_error(spec, source, where, auto_map)
    check_decoder_config(model, spec)
    check_trained(model, loading, spec)
    _check_resident(model, spec)
    # some checkpoints keep norms or buffers in another dtype; a tensor already in torch_dtype is kept, not copied
    model.to(dtype=torch_dtype)
    mixed = {p.dtype for p in model.parameters()} - {torch_dtype}
    if mixed:
        raise ModelLoadError(f"parameters stayed in {mixed} after casting to {torch_dtype}")
    model.eval()
    info = describe(model, tokenizer, name=spec if revision is None else f"{spec}@{revision}",
                    source=str(source), revision=revision)
    log.info("loaded %s: %d layers, d=%d, %s on %s", info.name, info.n_layers, info.hidden_size,
             info.dtype, info.device)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def _resolve_source(spec: str) -> tuple[str, bool]:
    """Where to load ``spec`` from, and whether that is a hub id."""
    if spec in ZOO:
        return str(zoo_folder(spec)), False
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {path} does not exist; check the path")
        return str(converted_gguf(path)), False
    if path.is_dir():
        return str(path), False
    if path.exists():
        raise ModelLoadError(f"{path} is a file but not a .gguf file; pass its folder or a .gguf file")
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:  # hub ids are NAME or OWNER/NAME
        raise ModelLoadError(f"model folder {path} does not exist; check the path")
    return spec, True


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _check_resident(model: nn.Module, spec: str) -> None:
    """Raise if ``device_map`` offloaded weights to CPU or disk (they sit on the meta device)."""
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ModelLoadError(
            f"device_map offloaded part of {spec} to CPU or disk because it does not fit in memory; "
            "layerscope needs every weight in memory: use more GPUs, --dtype bfloat16 or a smaller model"
        )


def _hub_error(spec: str, revision: str | None, offline: bool, exc: Exception) -> ModelLoadError:
    zoo = ", ".join(ZOO)
    if offline and revision is not None:
        cached = ", ".join(_cached_revisions(spec)) or "none"
        why = (f"the Hugging Face hub cannot be reached (no network) and revision '{revision}' is not in the "
               f"local hub cache (cached revisions: {cached})")
    elif offline:
        why = "the Hugging Face hub cannot be reached (no network) and it is not in the local hub cache"
    else:
        why = f"the Hugging Face hub refused it ({str(exc).splitlines()[0]})"
    named = spec if revision is None else f"{spec}@{revision}"
    return ModelLoadError(
        f"could not load model '{named}': it is not a zoo name ({zoo}), not an existing folder or "
        f".gguf file, and {why}. Use a zoo name, a local folder or a .gguf file, "
        "or check the hub id, the revision and your network."
    )


def _cached_revisions(repo_id: str) -> list[str]:
    """``_cached_revisions("EleutherAI/pythia-410m")`` -> ``["main", "step3000"]``: the refs in the local hub cache."""
    from huggingface_hub import constants

    refs = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "refs"
    return sorted(p.relative_to(refs).as_posix() for p in refs.rglob("*") if p.is_file())
