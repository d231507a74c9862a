"""Refuse a model whose numbers would mean nothing, before it runs.

    check_folder(folder)                        # corrupt safetensors files
    check_no_custom_code(folder, spec)          # a model that needs its own Python code (auto_map)
    model, loading = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    check_trained(model, loading, spec)         # weights transformers initialised at random
    check_causal(model, tokenizer, spec)        # an encoder (BERT) or encoder-decoder is not a causal LM

A causal LM computes the state of token t from tokens 0..t only. layerscope's NLL and
its layer-wise geometry both assume it; an encoder such as BERT loads in transformers as
``BertLMHeadModel`` and runs, but every number it gives is of another kind.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch
from torch import nn

from ..errors import ModelLoadError, short
from ..jsonfile import JSONReadError, read_json
from .info import input_device, probe_ids

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
"""A folder with none of these has no tokenizer transformers can load."""

CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json")
"""Files whose ``auto_map`` names Python code shipped with a model (refused: :func:`check_no_custom_code`)."""

_PROBE = "Every word of this probe sentence is seen only by the words that come after it in the text."
SHOWN = 4
"""Weight names an error lists before '... and N more'."""


def check_folder(folder: Path) -> None:
    """Raise for a ``.safetensors`` file in ``folder`` whose header cannot be read (corrupt or truncated)."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(
                f"{path} is not a readable safetensors file ({first_line(exc)}): it is corrupt or truncated; "
                "download or save the model again"
            ) from None


def check_no_custom_code(folder: Path, spec: str) -> None:
    """Raise :func:`custom_code_error` when ``folder``'s config.json or tokenizer_config.json has an ``auto_map``
    (classes from Python files that ship with the model), a :class:`ModelLoadError` naming the file when it is not
    JSON that can be read (nested too deeply, not UTF-8, not a regular file, not JSON: transformers would recurse
    or block on it). A missing or unreadable file is left to transformers."""
    for name in CUSTOM_CODE_FILES:
        try:
            data = read_json(folder / name)
        except OSError:
            continue
        except JSONReadError as exc:
            raise ModelLoadError(f"model {spec}: {exc}; download or save the model again") from None
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if auto_map:
            raise custom_code_error(spec, str(folder), name, auto_map)


def custom_code_error(spec: str, source: str, where: str, auto_map: object = None) -> ModelLoadError:
    """The error for a model that needs its own code (``auto_map`` in ``where``), with how to hand it over."""
    values = auto_map.values() if isinstance(auto_map, dict) else ()
    refs = {v for value in values for v in (value if isinstance(value, list | tuple) else [value])
            if isinstance(v, str)}
    files = sorted({f"{ref.split('--')[-1].rsplit('.', 1)[0]}.py" for ref in refs})
    named = f" naming {', '.join(short(f, 60) for f in files[:SHOWN])}" if files else ""
    return ModelLoadError(
        f"model {spec} needs its own Python code ({where} has an auto_map{named}), which layerscope never runs; "
        f"if you trust that code, load the model yourself and hand it over: model = AutoModelForCausalLM."
        f"from_pretrained({source!r}, trust_remote_code=True); tokenizer = AutoTokenizer.from_pretrained("
        f"{source!r}, trust_remote_code=True); lm = LoadedModel.wrap(model, tokenizer, name='my-model'); then "
        "pass lm where a model spec goes (load_model(lm), StudyConfig(study=..., models=(lm,)))"
    )


def pickle_error(source: str, exc: BaseException) -> ModelLoadError:
    """The error for weights in a pickle (``pytorch_model.bin``) that holds more than tensors."""
    found = re.search(r"Unsupported (?:global: GLOBAL \S+|operand \S+)", str(exc))
    what = "".join(ch for ch in found[0] if ch.isprintable())[:120] if found else type(exc).__name__
    return ModelLoadError(
        f"the weights of {source} are a pickle (.bin) that holds more than tensors ({what}), and layerscope reads "
        "weights only, never code a pickle names; get the model as safetensors "
        "(model.safetensors) from where it came from, or, if you trust the file, load it yourself and "
        "save_pretrained it as safetensors"
    )


def missing_tokenizer(folder: Path) -> ModelLoadError | None:
    """The error for a model folder with no tokenizer files, or ``None`` when it has some."""
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    return ModelLoadError(
        f"model folder {folder} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); copy them "
        f"from where the model came from, or save them there with tokenizer.save_pretrained(folder)"
    )


def check_decoder_config(model: nn.Module, spec: str) -> None:
    """Raise for an encoder-decoder model, or a checkpoint saved as a head transformers knows is not a
    causal LM (``architectures`` in its config.json, e.g. ``BertForMaskedLM`` or ``BartForConditionalGeneration``)."""
    config = model.config
    kind = type(model).__name__
    if getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(f"model {spec} ({kind}) is an encoder-decoder model, not a decoder-only causal LM; "
                             "layerscope measures decoder-only causal LMs (e.g. GPT-2, Llama, Pythia, SmolLM2)")
    saved = list(getattr(config, "architectures", None) or [])
    causal, known = _head_names()
    if saved and not any(name in causal for name in saved) and all(name in known for name in saved):
        raise ModelLoadError(
            f"model {spec} was saved as {', '.join(saved)}, which is not a causal LM (transformers would load it as "
            f"{kind} and run it, but its NLL and layer states would mean nothing); use a decoder-only causal LM "
            "(e.g. GPT-2, Llama, Pythia, SmolLM2)"
        )


@functools.cache
def _head_names() -> tuple[frozenset[str], frozenset[str]]:
    """Class names transformers maps as causal LMs, and every class name its auto mappings know."""
    from transformers.models.auto import modeling_auto

    def names(mapping) -> set[str]:
        out = set()
        for value in mapping.values():
            out.update([value] if isinstance(value, str) else value)
        return out

    causal = names(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    known = set().union(*(names(m) for key, m in vars(modeling_auto).items()
                          if key.startswith("MODEL_") and key.endswith("_MAPPING_NAMES") and isinstance(m, dict)))
    return frozenset(causal), frozenset(known)


def check_trained(model: nn.Module, loading: dict, spec: str) -> None:
    """Raise when transformers initialised weights at random: ``missing_keys`` and ``mismatched_keys`` of
    ``from_pretrained(..., output_loading_info=True)``. A weight tied to a loaded one (an LM head
    sharing the embedding matrix) is trained and passes."""
    tensors = dict(model.state_dict(keep_vars=True))
    mismatched = sorted(key if isinstance(key, str) else key[0] for key in loading.get("mismatched_keys") or ())
    missing = set(loading.get("missing_keys") or ())
    loaded = {_storage(t) for k, t in tensors.items() if k not in missing}
    untrained = sorted(k for k in missing if k not in tensors or _storage(tensors[k]) not in loaded)
    bad = mismatched + [k for k in untrained if k not in mismatched]
    if bad:
        more = f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise ModelLoadError(
            f"model {spec} has no trained weights for {len(bad)} tensor(s) of {type(model).__name__} "
            f"({', '.join(bad[:SHOWN])}{more}): transformers would initialise them at random, so every number "
            "would be noise; use a checkpoint saved as a causal LM (a *ForCausalLM or *LMHeadModel)"
        )


def _storage(tensor: torch.Tensor) -> tuple[int, int, tuple[int, ...]]:
    return tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape)


@torch.no_grad()
def check_causal(model: nn.Module, tokenizer, spec: str) -> None:
    """Run a probe text and the same text with its second half changed: a causal LM's hidden
    states on the first half must not move. Raise naming the first layer where they do."""
    ids = probe_ids(model, tokenizer, _PROBE)
    keep = max(1, len(ids) // 2)
    vocab = model.get_input_embeddings().weight.shape[0]
    changed = ids[:keep] + [(t + 1) % vocab for t in ids[keep:]]
    out = model(input_ids=torch.tensor([ids, changed], device=input_device(model)), output_hidden_states=True,
                use_cache=False)
    for layer, hidden in enumerate(out.hidden_states):
        head = hidden[:, :keep].float()
        moved = torch.linalg.vector_norm(head[0] - head[1], dim=-1) / torch.linalg.vector_norm(head[0], dim=-1)
        moved = torch.nan_to_num(moved, nan=0.0)  # NaN weights are reported by the finite checks instead
        if moved.max() > max(1e-4, 8 * torch.finfo(hidden.dtype).eps):
            hint = " (its config says is_decoder=False)" if getattr(model.config, "is_decoder", None) is False else ""
            raise ModelLoadError(
                f"model {spec} ({type(model).__name__}) is not a causal LM{hint}: at layer {layer} the states of "
                "the first tokens change when later tokens change (it attends to later tokens, like an encoder "
                "such as BERT); use a decoder-only causal LM (e.g. GPT-2, Llama, Pythia, SmolLM2)"
            )


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
