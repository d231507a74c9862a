"""Next-token NLL of many texts, in batches, with nothing else kept.

    nll_sum, n_scored = score_texts(lm, texts)     # (n,), (n,); mean NLL = nll_sum / n_scored
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..models.info import input_device
from ..models.load import LoadedModel
from .batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
from .guards import check_finite, encode, first_nonfinite_layer
from .pooling import token_nll


@torch.inference_mode()
def score_texts(lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL (float64) and scored-token count per text; each equals a single-text
    ``outputs.loss`` times its count. ``ExtractionError`` before any forward pass for a text longer
    than the model's maximum positions or of one token, and for a NaN or inf NLL (naming layer and text)."""
    ids = encode(lm, texts, max_length, min_tokens=2)
    nll_sum, n_scored = np.zeros(len(texts)), np.zeros(len(texts), dtype=np.int64)
    device = input_device(lm.model)
    for index in plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH,
                              memory_budget(lm.model, lm.info.vocab_size)):
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        logits = lm.model(**batch.model_inputs(), use_cache=False).logits
        total, count = token_nll(logits.to(batch.input_ids.device), batch)
        check_finite(lm, texts, index, bad_nll=~torch.isfinite(total),
                     first_bad_layer=lambda row, batch=batch: _first_bad_layer(lm, batch, row))
        nll_sum[index], n_scored[index] = total.cpu().numpy(), count.cpu().numpy()
    return nll_sum, n_scored


def _first_bad_layer(lm: LoadedModel, batch, row: int) -> int | None:
    """Run row ``row`` of ``batch`` again, with hidden states, to find where NaN or inf starts."""
    keep = batch.attention_mask[row].bool()
    inputs = {k: v[row : row + 1, keep] for k, v in batch.model_inputs().items()}
    out = lm.model(**inputs, output_hidden_states=True, use_cache=False)
    return first_nonfinite_layer(out.hidden_states, torch.ones_like(inputs["input_ids"], dtype=torch.bool))
