"""The notebooks' procedures as plain loops, written for the tests: the independent reference
that seed-compat results are checked against."""

import numpy as np
from scipy import stats


def uniformity(embeddings: np.ndarray) -> float:
    """Mean of the upper triangle of the cosine kernel, as the divergence notebook computes it."""
    normalized = embeddings / (np.linalg.norm(embeddings, axis=1, keepdims=True) + 1e-10)
    kernel = normalized @ normalized.T
    return float(np.mean(kernel[np.triu_indices(kernel.shape[0], k=1)]))


def centroid_asymmetry(ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """cos(a, centroid A) - cos(b, centroid B), one pair at a time."""
    def cos(e, c):
        return float(np.dot(e, c) / (np.linalg.norm(e) * np.linalg.norm(c) + 1e-10))

    ca, cb = ea.mean(0), eb.mean(0)
    return np.array([cos(e, ca) for e in ea]) - np.array([cos(e, cb) for e in eb])


def bootstrap_ci(x: np.ndarray, y: np.ndarray, n_bootstrap: int, level: float = 0.95):
    """One np.random.choice and one pearsonr per resample, from numpy's global random state."""
    rs = []
    for _ in range(n_bootstrap):
        idx = np.random.choice(len(x), size=len(x), replace=True)
        if np.std(x[idx]) > 0 and np.std(y[idx]) > 0:
            rs.append(stats.pearsonr(x[idx], y[idx])[0])
    alpha = 1 - level
    return tuple(np.percentile(rs, [alpha / 2 * 100, (1 - alpha / 2) * 100]))


def ablation_perplexities(source: str, tokenizer, texts: list[str], configs: dict, bits: int = 4) -> dict:
    """The ablation notebook's loop: per configuration, a fresh ``from_pretrained``, every
    'weight' parameter of the chosen decoder layers quantized per tensor, then one forward
    pass per text (truncated at 256 tokens) and exp(outputs.loss). Returns {(config, text index): ppl}."""
    import torch
    from transformers import AutoModelForCausalLM

    from layerscope.models import decoder_layers

    qmax, qmin = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
    ppl = {}
    for name, cfg in configs.items():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
        layers = decoder_layers(model)
        with torch.no_grad():
            for i in cfg.quantize:
                for pname, param in layers[i].named_parameters():
                    if "weight" in pname and param.requires_grad:
                        absmax = param.abs().max()
                        if absmax == 0:
                            continue
                        scale = absmax / qmax
                        param.copy_((torch.clamp(torch.round(param / scale), qmin, qmax) * scale).to(param.dtype))
            for k, text in enumerate(texts):
                enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
                ppl[(name, k)] = torch.exp(model(enc["input_ids"], labels=enc["input_ids"]).loss).item()
        del model
    return ppl
