"""The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens"):
the logit lens with one learned affine translator per hidden state.

    lens = train_tuned_lens(lm, texts, steps=250, batch_size=8, seed=0)   # .tuned_lens_train; held-out split
    lens.logits(6, h6)                   # (..., vocab) the tuned-lens logits of hidden state 6 (..., d)
    lens.translate(6, h6)                # (..., d) float32: h + h @ W_6.T + b_6
    lens.record["heldout"]               # per-state held-out KL and CE (bits/token), logit lens vs tuned lens
    lens.save("lenses/smollm2")          # config.json + params.pt, the tuned-lens package's format
    lens = TunedLens.load("lenses/smollm2", lm)   # LensError on a bad file or other shapes; warns on other weights
    lens = TunedLens.zeros(lm)           # untrained: every translator 0, so lens.logits == the logit lens exactly
    ev = evaluate_lenses(lm, texts, lens)         # .tuned_lens_eval: per-state CE and KL with bootstrap intervals

Hidden state ``l`` is numbered as :mod:`.capture` does (0 = embeddings; ``l < n_layers``: the input of decoder
block ``l``, before the final norm; ``n_layers``: the head's input). Translator ``l`` (``l < n_layers``) is a
``torch.nn.Linear(d, d)`` applied as a residual: ``h + h @ W.T + b``, float32, initialised to zero; the lens
logits are ``transform(head(final_norm(h + h @ W.T + b)))`` (:func:`~.lens.layer_logits`, Gemma's soft-capping
included). State ``n_layers`` has no translator: the lens there is the model's own output.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...models.load import LoadedModel
from ...provenance import jsonable
from ..forward.batching import Batch, collate, pad_id
from ..forward.capture import capture_states
from ..forward.head import head_only_last
from .logit import final_norm, layer_logits
from .logit_rows import Scored, scored_tokens
from .tuned_io import (
    OWN_KEY,
    LensError,
    check_shapes,
    package_config,
    read_lens,
    write_lens,
)

__all__ = ["LensError", "TunedLens", "scored_states"]


def _head(lm: LoadedModel) -> torch.nn.Module:
    head = lm.model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        raise LensError(f"model {lm.info.name} has no output head with a weight (get_output_embeddings()), so no "
                        "lens can read its layers; layerscope supports decoder-only causal LMs")
    return head


class TunedLens(torch.nn.Module):
    """One affine translator per hidden state ``0 .. n_layers - 1`` of one model, and the record of its training.

    ``translators``: ``torch.nn.ModuleList`` of ``n_layers`` ``Linear(d, d)`` in float32 (``state_dict()`` keys
    ``0.weight`` (d, d), ``0.bias`` (d,), ...: the tuned-lens package's params.pt). ``record``: how the lens was
    made (model, weights hash, steps, seed, optimiser, corpus, held-out metrics), saved in config.json.
    """

    def __init__(self, d_model: int, n_layers: int, *, name: str, revision: str | None = None,
                 lm: LoadedModel | None = None, record: dict[str, Any] | None = None):
        super().__init__()
        self.translators = torch.nn.ModuleList(torch.nn.Linear(d_model, d_model) for _ in range(n_layers))
        with torch.no_grad():
            for translator in self.translators:
                translator.weight.zero_()
                translator.bias.zero_()
        self.d_model, self.n_layers, self.name, self.revision = d_model, n_layers, name, revision
        self.lm = lm
        self.record: dict[str, Any] = dict(record or {})

    @classmethod
    def zeros(cls, lm: LoadedModel) -> TunedLens:
        """The untrained lens of ``lm``: every translator zero (the logit lens), on the head's device."""
        lens = cls(lm.info.hidden_size, lm.info.n_layers, name=lm.info.name, revision=lm.info.revision, lm=lm,
                   record={"weights_hash": lm.info.weights_hash, "steps": 0})
        return lens.to(_head(lm).weight.device)

    def _model(self) -> LoadedModel:
        if self.lm is None:
            raise LensError(f"this tuned lens (for {self.name}) has no model to read through; load it with "
                            "TunedLens.load(folder, lm) or set lens.lm = lm")
        return self.lm

    def translate(self, state: int, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d) float32 ``h + h @ W.T + b`` of hidden state ``state`` (0 .. n_layers - 1) ``hidden`` (..., d),
        on the translators' device; ``state == n_layers`` gives ``hidden`` unchanged (in float32)."""
        if not 0 <= state <= self.n_layers:
            raise ValueError(f"hidden state {state} is outside 0..{self.n_layers}")
        weight = self.translators[0].weight if self.n_layers else None
        h = hidden.to(weight.device if weight is not None else hidden.device, torch.float32)
        if state == self.n_layers:
            return h
        return h + self.translators[state](h)

    def logits(self, state: int, hidden: torch.Tensor, *, lm: LoadedModel | None = None,
               head: torch.nn.Module | None = None, norm: torch.nn.Module | None = None) -> torch.Tensor:
        """(..., vocab) the tuned-lens logits of hidden state ``state`` ``hidden`` (..., d):
        ``transform(head(final_norm(translate(state, h))))`` in the head's dtype; at ``n_layers`` (``h`` the head's
        input) the model's own ``transform(head(h))``. Read through ``lm`` (default :attr:`lm`, the model the lens
        was made or loaded with). Gradients flow to the translators, not to the model."""
        lm = lm if lm is not None else self._model()
        head = head if head is not None else _head(lm)
        if state == self.n_layers:
            return layer_logits(lm, state, hidden, head=head)
        moved = self.translate(state, hidden).to(head.weight.dtype)
        return layer_logits(lm, state, moved, head=head, norm=norm if norm is not None else final_norm(lm))

    def config(self) -> dict[str, Any]:
        """config.json as a dict: the tuned-lens package's keys (``base_model_name_or_path``: the weights' Hugging
        Face id where layerscope knows it, else the model's name; ``unembed_hash`` from the record) and
        :attr:`record` under ``"layerscope"`` (with the model's own name as ``model``)."""
        own = jsonable({"model": self.name, **self.record})
        base = hub_name(self.name, self.lm.info.source if self.lm is not None else None)
        if isinstance(self.record.get("base_model_name_or_path"), str):
            base = self.record["base_model_name_or_path"]
        return package_config(base, self.d_model, self.n_layers, self.revision, own=own,
                              unembed_hash=self.record.get("unembed_hash"))

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/config.json`` and ``folder/params.pt`` (the tuned-lens package's format); returns it."""
        return write_lens(folder, self.translators.state_dict(), self.config())

    @classmethod
    def load(cls, folder: str | Path, lm: LoadedModel | None = None) -> TunedLens:
        """The lens in ``folder`` (written by :meth:`save` or the tuned-lens package), read through ``lm``.

        :class:`~.tuned_lens_io.LensError` for a missing or unsafe file and for translators that do not fit ``lm``
        (its width and layer count named beside the lens's); a ``UserWarning`` naming both hashes when the lens
        records other weights than ``lm``'s. Without ``lm`` the lens can :meth:`translate` but not :meth:`logits`.
        """
        config, params = read_lens(folder)
        d_model, n_layers = config.get("d_model"), config.get("num_hidden_layers")
        if lm is not None:
            check_shapes(folder, config, params, d_model=lm.info.hidden_size, n_layers=lm.info.n_layers,
                         model=f"model {lm.info.name}")
        elif isinstance(d_model, int) and isinstance(n_layers, int) and d_model > 0 and n_layers >= 0:
            check_shapes(folder, config, params, d_model=d_model, n_layers=n_layers)
        else:
            raise LensError(f"{Path(folder) / 'config.json'} has d_model={d_model!r} and num_hidden_layers="
                            f"{n_layers!r}, not positive integers; write the lens again with TunedLens.save")
        record = config.get(OWN_KEY) if isinstance(config.get(OWN_KEY), dict) else {}
        base = str(config.get("base_model_name_or_path"))
        name = record.get("model") if isinstance(record.get("model"), str) else base
        if name != base:
            record = {**record, "base_model_name_or_path": base}
        lens = cls(int(d_model), int(n_layers), name=name, revision=config.get("base_model_revision"), lm=lm,
                   record=record)
        lens.translators.load_state_dict({k: v.float() for k, v in params.items()})
        if lm is not None:
            saved = record.get("weights_hash")
            if saved and saved != lm.info.weights_hash:
                warnings.warn(f"the tuned lens in {folder} was trained on weights {saved}, but model "
                              f"{lm.info.name} has weights {lm.info.weights_hash}; its translators may not fit "
                              "these weights: train a lens for them", UserWarning, stacklevel=2)
            elif not saved and not _same_base(lens.name, lm):
                warnings.warn(f"the tuned lens in {folder} names base model {lens.name!r}, not {lm.info.name!r} "
                              f"({lm.info.source}), and records no weights hash; use it only if both are the same "
                              "weights", UserWarning, stacklevel=2)
            lens = lens.to(_head(lm).weight.device)
        return lens


def hub_name(name: str, source: str | None = None) -> str:
    """What a lens's ``base_model_name_or_path`` holds for a model called ``name``: the zoo's Hugging Face id of
    its weights (``smollm2-135m``: ``HuggingFaceTB/SmolLM2-135M-Instruct``), a hub id ``source`` as it is, else
    ``name``."""
    from ...models.zoo import ZOO

    entry = ZOO.get(name)
    if entry is not None and entry.hub_id:
        return entry.hub_id
    if source and "/" in source and not Path(source).exists() and source.count("/") == 1:
        return source
    return name


def _same_base(name: str, lm: LoadedModel) -> bool:
    """Whether a lens's ``base_model_name_or_path`` names ``lm``: its last path part (case and ``-``/``_``
    ignored) is that of the model's spec or source, or one contains the other (a hub id's name in a zoo name)."""
    def key(text: str) -> str:
        return Path(str(text).rstrip("/")).name.lower().replace("_", "-")

    lens_key = key(name)
    return any(lens_key and (lens_key == key(other) or lens_key in key(other) or key(other) in lens_key)
               for other in (lm.info.name, lm.info.source) if other)


@torch.no_grad()
def scored_states(lm: LoadedModel, ids: Sequence[Sequence[int]], index: Sequence[int] | np.ndarray
                  ) -> tuple[list[torch.Tensor], Scored]:
    """``states, scored = scored_states(lm, ids, index)``: one forward pass of the right-padded texts ``ids``
    (token id lists) and, of every hidden state ``0 .. n_layers``, the (N, d) rows of the ``N`` scored tokens
    (position ``t`` of a text whose token ``t + 1`` is real), in the model's dtype on the head's device. Only
    these rows outlive the pass (no (B, T, vocab) logits are made); ``scored``: their rows, columns, targets
    and ``index`` entries, on the head's device. Runs under ``no_grad`` (not inference mode), so the rows can
    feed a lens being trained."""
    n_layers = lm.info.n_layers
    device = _head(lm).weight.device
    scored = scored_tokens(ids, index)
    batch: Batch = collate(ids, np.asarray(index), pad_id=pad_id(lm.tokenizer), side="right")
    batch = batch.to(lm.model.get_input_embeddings().weight.device)
    rows, cols = scored.rows, scored.cols
    kept: dict[int, torch.Tensor] = {}

    def on_state(layer, hidden):
        kept[layer] = hidden[rows.to(hidden.device), cols.to(hidden.device)].to(device)

    with capture_states(lm, range(n_layers), on_state, pre_norm=False), head_only_last(lm) as head:
        lm.model(**batch.model_inputs(), use_cache=False)
    if head.hidden is None or len(kept) != n_layers:
        raise LensError(f"model {lm.info.name} ran without handing over all of its {n_layers + 1} hidden states; "
                        "layerscope supports decoder-only causal LMs from transformers")
    kept[n_layers] = head.hidden[rows.to(head.hidden.device), cols.to(head.hidden.device)].to(device)
    return [kept[layer] for layer in range(n_layers + 1)], scored.to(device, non_blocking=False)
