"""Next-token NLL of many texts, in batches, with nothing else kept.

    nll_sum, n_scored = score_texts(lm, texts)     # (n,), (n,); mean NLL = nll_sum / n_scored
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..models.info import input_device
from ..models.load import LoadedModel
from .batching import collate, pad_id, plan_batches, token_budget, tokenize
from .pooling import token_nll


@torch.inference_mode()
def score_texts(lm: LoadedModel, texts: Sequence[str], *, batch_size: int = 16,
                max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL (float64) and scored-token count per text; each equals a single-text
    ``outputs.loss`` times its count."""
    ids = tokenize(lm.tokenizer, texts, max_length)
    nll_sum, n_scored = np.zeros(len(texts)), np.zeros(len(texts), dtype=np.int64)
    device = input_device(lm.model)
    for index in plan_batches([len(x) for x in ids], batch_size, token_budget(lm.info.vocab_size)):
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        logits = lm.model(**batch.model_inputs(), use_cache=False).logits
        total, count = token_nll(logits.to(batch.input_ids.device), batch)
        nll_sum[index], n_scored[index] = total.cpu().numpy(), count.cpu().numpy()
    return nll_sum, n_scored
