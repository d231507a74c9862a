"""What each decoder block does to the residual stream, from one pass: the geometry the pruning rules read.

    t = block_transitions(lm, texts)      # one forward pass per batch, nothing kept but these
    t.influence                           # (L,) Block Influence of each block over every real token (ShortGPT)
    t.angular                             # (L + 1, L + 1) mean angular distance between depths, last token
                                          # (Gromov et al.); depth i: the stream entering block i, L: the last
                                          # block's output before the final norm

Block Influence is pooled over tokens as the atlas pools it (every real token of every text, position 0
included); the angular distances read each text's last token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ...measures.pruning import angular_distances
from ...models.info import decoder_layers, input_device
from ...models.load import LoadedModel
from ..forward.batching import MAX_TEXTS_PER_BATCH, collate, memory_budget, pad_id, plan_batches
from ..forward.guards import encode
from .prefix import hidden_of


@dataclass(frozen=True)
class Transitions:
    influence: np.ndarray
    """(L,) float64 mean over real tokens of 1 - cos(stream entering block l, stream leaving it)."""
    angular: np.ndarray
    """(L + 1, L + 1) float64 mean over texts of arccos(cos) / pi between depths, at each text's last token."""
    n_tokens: int
    """Real tokens behind ``influence``."""


@torch.inference_mode()
def block_transitions(lm: LoadedModel, texts: Sequence[str], *, batch_size: int | None = None,
                      max_length: int | None = None) -> Transitions:
    """Block Influence per block and angular distances between depths for ``texts`` (see the module)."""
    model = lm.model
    blocks = decoder_layers(model)
    n_layers = len(blocks)
    ids = encode(lm, texts, max_length, min_tokens=2)
    budget = memory_budget(model, lm.info.vocab_size, kept_states=2)
    influence = torch.zeros(n_layers, dtype=torch.float64)
    last = np.zeros((len(texts), n_layers + 1, lm.info.hidden_size), dtype=np.float32)
    n_tokens = 0
    device = input_device(model)
    now: dict = {}  # the batch being run: its rows, real-token mask and last columns

    def hook(layer: int):
        def record(_module, args, kwargs, output):
            entering = (args[0] if args else kwargs["hidden_states"]).float()
            leaving = hidden_of(output).float().to(entering.device)
            cos = F.cosine_similarity(entering, leaving, dim=-1)
            influence[layer] += torch.where(now["real"].to(cos.device), 1 - cos, 0.0).double().sum().cpu()
            at_last = (now["rows"].to(entering.device), now["last"].to(entering.device))
            last[now["index"], layer] = entering[at_last].cpu().numpy()
            if layer == n_layers - 1:
                last[now["index"], n_layers] = leaving[at_last].cpu().numpy()
        return record

    handles = [block.register_forward_hook(hook(layer), with_kwargs=True) for layer, block in enumerate(blocks)]
    try:
        for index in plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH, budget):
            batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
            real = batch.attention_mask.bool()
            now.update(index=index, real=real, rows=torch.arange(len(index)), last=batch.last)
            model(**batch.model_inputs(), use_cache=False)
            n_tokens += int(real.sum())
    finally:
        for handle in handles:
            handle.remove()
    return Transitions(influence=(influence / n_tokens).numpy(), angular=angular_distances(last), n_tokens=n_tokens)
