"""Oracles for the atlas pass, built by hand: one plain forward pass per text (no batching, no padding), the last
block's output taken with a forward hook, then naive per-token numpy loops.

    ref = reference(lm, texts)     # per text: ids, states (n_layers + 1, T, d) float64, hidden, logits
    flags = massive_flags(ref[0]["states"])
"""

import numpy as np
import torch

import tiny
from layerscope.models.info import decoder_layers

FINAL_NORM = {"llama": "model.norm", "gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm",
              "opt": "model.decoder.final_layer_norm", "gemma3": "model.norm"}
SOFTCAP = 1.5
"""Gemma's final soft-capping, set on the tiny gemma3 (whose config has none) so that it bites."""
TEXTS = [*tiny.TEXTS[:6], "The"]
"""Texts of very different lengths; "The" is one token without BOS (no Gram entropy, no next token)."""
RATIO = 100.0


def output_tensor(output):
    return output[0] if isinstance(output, (tuple, list)) else output


@torch.no_grad()
def reference(lm, texts):
    """Per text, from one unbatched forward pass: ``ids`` (T,), ``states`` (n_layers + 1, T, d) float64 with state
    ``n_layers`` the last block's output before the final norm, ``hidden`` transformers' hidden states (torch),
    ``logits`` (T, vocab) float64."""
    rows = []
    for text in texts:
        ids = lm.tokenizer(text)["input_ids"]
        got = []
        handle = decoder_layers(lm.model)[-1].register_forward_hook(
            lambda _m, _a, out, got=got: got.append(output_tensor(out)))
        try:
            out = lm.model(input_ids=torch.tensor(ids)[None], output_hidden_states=True)
        finally:
            handle.remove()
        hidden = [h[0] for h in out.hidden_states]
        states = np.stack([h.double().numpy() for h in hidden[:-1]] + [got[-1][0].double().numpy()])
        rows.append({"ids": ids, "states": states, "hidden": hidden, "logits": out.logits[0].double()})
    return rows


def cos(a, b):
    """Cosine of two vectors (float64)."""
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def massive_flags(states):
    """(T,) bool: the text's tokens whose max |activation| exceeds 100 x the text's median |activation| at any of
    states 1..n_layers (``states`` (n_layers + 1, T, d))."""
    flags = np.zeros(states.shape[1], dtype=bool)
    for layer in range(1, len(states)):
        mag = np.abs(states[layer])
        median = np.median(mag)
        for t in range(states.shape[1]):
            flags[t] |= mag[t].max() > RATIO * median
    return flags


def make_lm(arch, adds_bos=False, n_layers=3):
    lm = tiny.tiny_lm(arch, adds_bos=adds_bos, n_layers=n_layers)
    if arch == "gemma3":
        lm.model.config.final_logit_softcapping = SOFTCAP
    return lm


def lens_token_ce(lm, arch, r, layer):
    """(T - 1,) next-token cross-entropy of head(final_norm(h_layer)) at each position of reference text ``r``, a
    token at a time in float64, with the model's own softcap."""
    norm = lm.model.get_submodule(FINAL_NORM[arch])
    head = lm.model.get_output_embeddings()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    out = []
    with torch.no_grad():
        for k in range(len(r["ids"]) - 1):
            logits = norm(r["hidden"][layer][k]).double() @ head.weight.double().T
            if head.bias is not None:
                logits = logits + head.bias.double()
            if cap:
                logits = torch.tanh(logits / cap) * cap
            out.append(-torch.log_softmax(logits, dim=-1)[r["ids"][k + 1]].item())
    return np.array(out)
