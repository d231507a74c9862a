"""The atlas's table rows and summary from one model's streamed pass (:func:`layerscope.engine.atlas.atlas_pass`).

    summary, rows = analyse_pass("smollm2-135m", measured, seed=42)    # measured: an AtlasPass
    rows += cross_model_rows({"a": (30, layers_a, pooled_a), "b": (18, layers_b, pooled_b)}, seed=42)

After the pass it computes what needs every text at once, from the texts' mean-pooled vectors: the linear CKA
matrix between layers, the TwoNN intrinsic dimension and the dataset matrix entropy per layer. Table metrics:
``lens_ce``, ``lens_entropy``, ``lens_kl``, ``lens_top1_agree``, ``block_influence`` (``tokens`` "all" or
"excl_massive"), ``angular_distance``, ``cka`` (``layer_b``; ``model_b`` for another model's layer),
``twonn_id``, ``prompt_entropy`` / ``dataset_entropy`` (nats, with ``_normalised`` and ``_effective_rank``
siblings), ``massive_ratio`` (and ``massive_ratio_max``, ``massive_fixed_dim_share``, per ``position_class``
``massive_class_ratio`` and ``massive_top_share``), ``norm`` and ``top1_ratio``.
"""

from __future__ import annotations

import time

import numpy as np

from ...engine.atlas import AtlasPass
from ...engine.massive import MASSIVE_RATIO
from ...engine.massive_profile import CLASSES
from ...measures.entropy import matrix_entropy
from ...measures.intrinsic import twonn_dimension
from ...measures.similarity import cka_matrix
from ..result import layer_row
from .boundaries import boundaries, change_points
from .summary import AtlasModel

VERDICT_METRICS = ("lens_kl", "block_influence", "twonn_id", "top1_ratio")
"""The profiles the headline's change points and L* come from: a NaN or inf there is an error."""

BOUNDARY_METRICS = ("lens_kl", "lens_top1_agree", "block_influence", "angular_distance", "cka_next", "twonn_id",
                    "prompt_entropy", "dataset_entropy", "massive_ratio", "norm", "top1_ratio")
"""The profiles whose change points are compared with the thirds (ratios and norms on a log10 scale;
``cka_next``: CKA of each layer with the next measured one)."""

LOG_SCALE = ("massive_ratio", "norm")


def analyse_pass(name: str, p: AtlasPass, seed: int) -> tuple[AtlasModel, list[dict]]:
    """The rows of every measure of ``p`` and the model's summary (change points, L*, landmarks)."""
    start = time.perf_counter()
    n_layers, layers = p.n_layers, p.layers
    rows: list[dict] = []

    def add(metric: str, at: list[int], values, n: int | np.ndarray, **extra) -> None:
        counts = np.broadcast_to(np.asarray(n), (len(at),))
        rows.extend(layer_row(name, layer, n_layers, metric, float(v), n=int(c), **extra)
                    for layer, v, c in zip(at, values, counts, strict=True))

    for metric, values in p.lens.items():
        add(metric, layers, values, p.n_scored)
    add("block_influence", p.transitions, p.block_influence, p.n_tokens, tokens="all")
    add("block_influence", p.transitions, p.block_influence_no_massive, p.n_tokens - p.massive_tokens,
        tokens="excl_massive")
    add("angular_distance", p.transitions, p.angular_distance, p.n_texts)
    add("norm", layers, p.norm, p.n_tokens)
    add("top1_ratio", layers, p.spectrum["top1_ratio"], p.n_tokens)
    for key, suffix in (("entropy", ""), ("normalised_entropy", "_normalised"), ("effective_rank",
                                                                                 "_effective_rank")):
        add(f"prompt_entropy{suffix}", layers, p.prompt_entropy[key], p.prompt_entropy_texts)
    rows += massive_rows(name, p)

    pooled = np.moveaxis(p.pooled, 1, 0)  # (len(layers), n_texts, d)
    cka = cka_matrix(pooled, seed=seed)
    rows += [layer_row(name, la, n_layers, "cka", float(cka[i, j]), n=p.n_texts, pooling="mean", layer_b=lb)
             for i, la in enumerate(layers) for j, lb in enumerate(layers)]
    twonn = [twonn_dimension(pooled[j], return_n=True) for j in range(len(layers))]
    add("twonn_id", layers, [d for d, _ in twonn], [n for _, n in twonn], pooling="mean")
    dataset = [matrix_entropy(pooled[j]) for j in range(len(layers))]
    add("dataset_entropy", layers, [m.entropy for m in dataset], p.n_texts, pooling="mean")
    add("dataset_entropy_normalised", layers, [m.normalised_entropy for m in dataset], p.n_texts, pooling="mean")
    add("dataset_effective_rank", layers, [m.effective_rank for m in dataset], p.n_texts, pooling="mean")

    profiles = {
        "lens_kl": (layers, p.lens["lens_kl"]), "lens_top1_agree": (layers, p.lens["lens_top1_agree"]),
        "block_influence": (p.transitions, p.block_influence),
        "angular_distance": (p.transitions, p.angular_distance),
        "cka_next": (layers[:-1], np.diag(cka, 1)),
        "twonn_id": (layers, np.array([d for d, _ in twonn])),
        "prompt_entropy": (layers, p.prompt_entropy["normalised_entropy"]),
        "dataset_entropy": (layers, np.array([m.normalised_entropy for m in dataset])),
        "massive_ratio": (layers, np.log10(p.massive.massive_ratio)),
        "norm": (layers, np.log10(p.norm)), "top1_ratio": (layers, p.spectrum["top1_ratio"])}
    l_star = layers[int(np.argmax(p.spectrum["top1_ratio"]))]
    kl = p.lens["lens_kl"]
    half = np.flatnonzero(kl < kl[0] / 2)
    onset = np.flatnonzero(p.massive.massive_ratio > MASSIVE_RATIO)
    top_blocks = np.argsort(-p.block_influence, kind="stable")[:3]
    no_massive, _ = change_points({"block_influence": (p.transitions, p.block_influence_no_massive)})
    summary: AtlasModel = {
        "n_layers": n_layers, "layers": layers, "n_texts": p.n_texts, "n_tokens": p.n_tokens,
        "n_scored": p.n_scored, "massive_tokens": p.massive_tokens, "l_star": int(l_star),
        "twonn_peak_layer": int(layers[int(np.nanargmax([d for d, _ in twonn]))]),
        "lens_kl_half_layer": int(layers[half[0]]) if len(half) else n_layers,
        "massive_onset_layer": int(layers[onset[0]]) if len(onset) else None,
        "most_influential": sorted(int(p.transitions[i]) for i in top_blocks),
        "boundaries": boundaries(profiles, layers, int(l_star), n_layers),
        "boundaries_no_massive": no_massive,
        "seconds": {**p.seconds, "analysis_s": round(time.perf_counter() - start, 3)}}
    return summary, rows


def massive_rows(name: str, p: AtlasPass) -> list[dict]:
    """``massive_ratio`` and its companions per layer; the layer x position-class map as rows."""
    m, n_layers = p.massive, p.n_layers
    rows = []
    for i, layer in enumerate(m.layers.tolist()):
        n = int(m.n_texts[i])
        rows += [layer_row(name, layer, n_layers, "massive_ratio", float(m.massive_ratio[i]), n=n),
                 layer_row(name, layer, n_layers, "massive_ratio_max", float(m.massive_ratio_max[i]), n=n),
                 layer_row(name, layer, n_layers, "massive_fixed_dim_share", float(m.fixed_dim_share[i]), n=n,
                           dim=int(m.fixed_dim[i]))]
        for c, label in enumerate(CLASSES):
            rows += [layer_row(name, layer, n_layers, "massive_class_ratio", float(m.class_map[i, c]), n=n,
                               position_class=label),
                     layer_row(name, layer, n_layers, "massive_top_share", float(m.top_share[i, c]), n=n,
                               position_class=label)]
    return rows


def cross_model_rows(pooled: dict[str, tuple[list[int], np.ndarray]], seed: int) -> list[dict]:
    """Linear CKA between every layer of each model and every layer of each later one, on the texts both measured
    (the first ``min(n_a, n_b)``: ``--max-tokens`` keeps a prefix of the texts): rows ``model``/``layer`` x
    ``model_b``/``layer_b``. ``pooled``: {model: (n_layers, layers, (n_texts, len(layers), d))}, in run order."""
    names, rows = list(pooled), []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (na, layers_a, xa), (nb, layers_b, xb) = pooled[a], pooled[b]
            n = min(len(xa), len(xb))
            cka = cka_matrix(np.moveaxis(xa[:n], 1, 0), np.moveaxis(xb[:n], 1, 0), seed=seed)
            for r, la in enumerate(layers_a):
                rows += [layer_row(a, la, na, "cka", float(cka[r, c]), n=n, pooling="mean", model_b=b, layer_b=lb,
                                   depth_b=lb / nb) for c, lb in enumerate(layers_b)]
    return rows
