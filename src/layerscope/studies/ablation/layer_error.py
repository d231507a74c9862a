"""The error each quantized layer itself puts into its output: SQNR on the full-precision input, and the weights'
relative error.

    errors = LayerErrors(lm, {"per-channel/linear": (variant, {0, 1, 2})}, n_texts=48)
    scorer.score(watch=errors.measuring)            # the unquantized (baseline) pass, hooked batch by batch
    errors.rows(languages)                          # one dict per variant, layer and language (None: every text)

During the baseline pass, each measured block l is run a second time on the same input (its own positional
and keyword arguments) with its weights quantized as each variant quantizes them, then restored: y is the
block's full-precision output, y_q the quantized block's output on the same input, and

    SQNR_l = 10 log10( sum ||y||^2 / sum ||y - y_q||^2 )     (sums over every real token of the texts)

So the number belongs to the layer and the recipe, not to a configuration: it is the same in every
configuration that quantizes the layer, and damage passed on from the layers below does not enter it.
``sqnr_db_excl_pos0`` leaves each text's first token out (an attention sink's massive activation can hold
most of ||y||^2). The output y is the residual stream after the block, so the unchanged residual counts as signal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from ...data.languages import LanguageTexts
from ...engine.forward.batching import Batch
from ...engine.interventions.prefix import hidden_of
from ...models import LoadedModel, decoder_layers
from ...quant import WeightSnapshot, quantize_layers, sqnr_db, target_params, weight_rel_err
from .configs import Variant


class LayerErrors:
    """Per-text sums of ||y||^2 and ||y - y_q||^2 (all tokens, and the first token alone) for each variant and layer."""

    def __init__(self, lm: LoadedModel, layers: dict[str, tuple[Variant, set[int]]], n_texts: int):
        self.lm, self.layers = lm, layers
        measured = sorted({i for _, ls in layers.values() for i in ls})
        self.signal = {i: np.zeros((2, n_texts)) for i in measured}  # rows: every token, the first token
        self.noise = {(label, i): np.zeros((2, n_texts)) for label, (_, ls) in layers.items() for i in ls}
        self.weight_err: dict[tuple[str, int], float] = {}
        self._batch: Batch | None = None

    @contextlib.contextmanager
    def measuring(self, batch: Batch) -> Iterator[None]:
        """Measure every block in the forward passes of ``batch`` inside the ``with``."""
        self._batch = batch
        blocks = decoder_layers(self.lm.model)
        handles = [blocks[i].register_forward_hook(self._hook(i), with_kwargs=True) for i in self.signal]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _hook(self, layer: int):
        def measure(module, args, kwargs, output):
            batch = self._batch
            real = batch.attention_mask.bool()
            rows = torch.arange(len(batch.index), device=real.device)
            y = hidden_of(output).float()
            self._add(self.signal[layer], batch, (y**2).sum(-1), real, rows)
            for label, (variant, layers) in self.layers.items():
                if layer not in layers:
                    continue
                params = target_params(self.lm.model, [layer], variant.targets)
                snapshot = WeightSnapshot(params)
                try:
                    quantize_layers(params, variant.bits, variant.scheme)
                    if (label, layer) not in self.weight_err:
                        self.weight_err[label, layer] = weight_rel_err(
                            [snapshot.saved(name) for name in params], [p for p, _ in params.values()])
                    y_q = hidden_of(module.forward(*args, **kwargs)).float()
                finally:
                    snapshot.restore()
                self._add(self.noise[label, layer], batch, ((y - y_q) ** 2).sum(-1), real, rows)
        return measure

    @staticmethod
    def _add(sums: np.ndarray, batch: Batch, per_token: torch.Tensor, real: torch.Tensor, rows: torch.Tensor):
        """Add a batch's (B, T) squared norms to ``sums`` (2, n_texts): summed over real tokens, and at the first."""
        sums[0, batch.index] += (per_token * real).sum(-1).double().cpu().numpy()
        sums[1, batch.index] += per_token[rows, batch.first.to(real.device)].double().cpu().numpy()

    def rows(self, languages: LanguageTexts) -> list[dict]:
        """``{"variant", "layer", "lang", "sqnr_db", "sqnr_db_excl_pos0", "weight_rel_err"}`` per variant and layer,
        over every text (lang None) and per language."""
        langs = np.array([lang for lang, _, _ in languages.texts()])
        groups = [(None, np.ones(len(langs), dtype=bool))] + [(code, langs == code) for code in dict.fromkeys(langs)]
        out = []
        for (label, layer), noise in self.noise.items():
            signal = self.signal[layer]
            for lang, mask in groups:
                s, q = signal[:, mask].sum(axis=1), noise[:, mask].sum(axis=1)
                out.append({"variant": label, "layer": layer, "lang": lang, "sqnr_db": sqnr_db(s[0], q[0]),
                            "sqnr_db_excl_pos0": sqnr_db(s[0] - s[1], q[0] - q[1]),
                            "weight_rel_err": self.weight_err.get((label, layer), float("nan"))})
        return out
