"""The atlas's table rows and summary from one model's streamed pass
(:func:`layerscope.engine.atlas.stream.atlas_pass`).

    summary, rows = analyse_pass("smollm2-135m", measured, seed=42, n_resamples=200)    # measured: an AtlasPass
    rows += cross_model_rows({"a": (30, layers_a, pooled_a), "b": (18, layers_b, pooled_b)}, seed=42)

After the pass it computes what needs every text at once, from the texts' mean-pooled vectors: the linear and the
debiased CKA matrices between layers, the TwoNN intrinsic dimension and the dataset matrix entropy per layer; then
the phase boundaries with their bootstrap intervals (:mod:`.boundaries`). Table metrics: ``lens_ce``,
``lens_entropy``, ``lens_kl``, ``lens_top1_agree`` (and ``tuned_lens_*``, the same through a tuned lens, when the
pass had one), ``block_influence`` (``tokens`` "all" or "excl_massive"),
``angular_distance``, ``cka`` and ``cka_debiased`` (``layer_b``; ``model_b`` for another model's layer),
``twonn_id``, ``prompt_entropy`` / ``dataset_entropy`` (nats, with ``_normalised`` and ``_effective_rank``
siblings), ``massive_ratio`` (and ``massive_ratio_max``, ``massive_fixed_dim_share``, per ``position_class``
``massive_class_ratio`` and ``massive_top_share``), ``norm``, ``top1_ratio`` and ``boundary`` (``family``,
``variant``, ``boundary``, ``ci_lo``, ``ci_hi``, ``support``).
"""

from __future__ import annotations

import time

import numpy as np

from ...engine.atlas.massive_profile import CLASSES
from ...engine.atlas.stream import AtlasPass
from ...engine.forward.massive import MASSIVE_RATIO
from ...measures.cka_debiased import debiased_cka_matrix, random_cka_baseline
from ...measures.entropy import matrix_entropy
from ...measures.intrinsic import twonn_dimension
from ...measures.similarity import cka_matrix
from ...study.result import layer_row
from .boundaries import atlas_boundaries
from .summary import AtlasModel

VERDICT_METRICS = ("lens_kl", "block_influence", "twonn_id", "top1_ratio")
"""The profiles the headline's change points and L* come from: a NaN or inf there is an error."""

MAX_DEBIASED_TEXTS = 1000
"""Texts the debiased CKA matrix uses at most (a seeded subset beyond): it holds one n x n matrix per layer."""

LOG_SCALE = ("massive_ratio", "norm")


def analyse_pass(name: str, p: AtlasPass, seed: int, n_resamples: int = 200, twonn: str = "mle",
                 tuned_lens: dict | None = None) -> tuple[AtlasModel, list[dict]]:
    """The rows of every measure of ``p`` and the model's summary (boundaries, L*, landmarks), TwoNN by
    ``twonn`` (``mle`` or ``facco``), the boundaries' intervals from ``n_resamples`` resamples of the texts.
    ``tuned_lens``: what the result records of the tuned lens ``p`` was measured through (its folder, hash and
    training), kept in the summary."""
    start = time.perf_counter()
    n_layers, layers = p.n_layers, p.layers
    rows: list[dict] = []

    def add(metric: str, at: list[int], values, n: int | np.ndarray, **extra) -> None:
        counts = np.broadcast_to(np.asarray(n), (len(at),))
        rows.extend(layer_row(name, layer, n_layers, metric, float(v), n=int(c), **extra)
                    for layer, v, c in zip(at, values, counts, strict=True))

    for metric, values in p.lens.items():
        add(metric, layers, values, p.n_scored)
    for metric, values in (p.tuned_lens or {}).items():
        add(f"tuned_{metric}", layers, values, p.n_scored)
    add("block_influence", p.transitions, p.block_influence, p.n_tokens, tokens="all")
    add("block_influence", p.transitions, p.block_influence_no_massive, p.kept_tokens, tokens="excl_massive")
    add("angular_distance", p.transitions, p.angular_distance, p.n_texts)
    add("norm", layers, p.norm, p.n_tokens)
    add("top1_ratio", layers, p.spectrum["top1_ratio"], p.n_tokens)
    for key, suffix in (("entropy", ""), ("normalised_entropy", "_normalised"), ("effective_rank",
                                                                                 "_effective_rank")):
        add(f"prompt_entropy{suffix}", layers, p.prompt_entropy[key], p.prompt_entropy_texts)
    rows += massive_rows(name, p)

    pooled = np.moveaxis(p.pooled, 1, 0)  # (len(layers), n_texts, d)
    for metric, matrix, n in (("cka", cka_matrix(pooled, seed=seed), p.n_texts),
                              ("cka_debiased", debiased_cka_matrix(pooled, max_texts=MAX_DEBIASED_TEXTS, seed=seed),
                               min(p.n_texts, MAX_DEBIASED_TEXTS))):
        rows += [layer_row(name, la, n_layers, metric, float(matrix[i, j]), n=n, pooling="mean", layer_b=lb)
                 for i, la in enumerate(layers) for j, lb in enumerate(layers)]
    twonn_ids = [twonn_dimension(pooled[j], return_n=True, estimator=twonn) for j in range(len(layers))]
    add("twonn_id", layers, [d for d, _ in twonn_ids], [n for _, n in twonn_ids], pooling="mean",
        estimator=twonn)
    dataset = [matrix_entropy(pooled[j], p.convention) for j in range(len(layers))]
    add("dataset_entropy", layers, [m.entropy for m in dataset], p.n_texts, pooling="mean")
    add("dataset_entropy_normalised", layers, [m.normalised_entropy for m in dataset], p.n_texts, pooling="mean")
    add("dataset_effective_rank", layers, [m.effective_rank for m in dataset], p.n_texts, pooling="mean")

    l_star = layers[int(np.argmax(p.spectrum["top1_ratio"]))]
    boundaries, boundary_rows = atlas_boundaries(name, p, n_resamples, seed, int(l_star), twonn)
    rows += boundary_rows
    half = {key: half_layer(lens["lens_kl"], layers, n_layers) for key, lens in (("logit", p.lens),
                                                                                   ("tuned", p.tuned_lens)) if lens}
    onset = np.flatnonzero(p.massive.massive_ratio > MASSIVE_RATIO)
    top_blocks = np.argsort(-p.block_influence, kind="stable")[:3]
    linear, debiased = random_cka_baseline(min(p.n_texts, MAX_DEBIASED_TEXTS), pooled.shape[2], seed=seed,
                                           repeats=3)
    summary: AtlasModel = {
        "n_layers": n_layers, "layers": layers, "n_texts": p.n_texts, "n_tokens": p.n_tokens,
        "n_scored": p.n_scored, "massive_tokens": p.massive_tokens, "l_star": int(l_star),
        "twonn_peak_layer": int(layers[int(np.nanargmax([d for d, _ in twonn_ids]))]),
        "lens_kl_half_layer": half["logit"], "tuned_lens_kl_half_layer": half.get("tuned"),
        "lens": {"family": "tuned lens" if p.tuned_lens is not None else "logit lens", "tuned_lens": tuned_lens},
        "massive_onset_layer": int(layers[onset[0]]) if len(onset) else None,
        "most_influential": sorted(int(p.transitions[i]) for i in top_blocks),
        "boundaries": boundaries,
        "conventions": {"cka": "debiased", "entropy": p.convention, "twonn": twonn,
                        "massive_threshold": float(MASSIVE_RATIO), "random_cka_linear": linear,
                        "random_cka_debiased": debiased},
        "seconds": {**p.seconds, "analysis_s": round(time.perf_counter() - start, 3)}}
    return summary, rows


def half_layer(kl: np.ndarray, layers: list[int], n_layers: int) -> int:
    """The first of ``layers`` where ``kl`` falls below half its value at the first layer (``n_layers`` if none)."""
    below = np.flatnonzero(kl < kl[0] / 2)
    return int(layers[below[0]]) if len(below) else n_layers


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
    """Linear and debiased CKA between every layer of each model and every layer of each later one, on the texts
    both measured (the first ``min(n_a, n_b)``: ``--max-tokens`` keeps a prefix of the texts): rows
    ``model``/``layer`` x ``model_b``/``layer_b``. ``pooled``: {model: (n_layers, layers, (n_texts, len(layers),
    d))}, in run order."""
    names, rows = list(pooled), []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (na, layers_a, xa), (nb, layers_b, xb) = pooled[a], pooled[b]
            n = min(len(xa), len(xb))
            la_, lb_ = np.moveaxis(xa[:n], 1, 0), np.moveaxis(xb[:n], 1, 0)
            for metric, cka, used in (
                    ("cka", cka_matrix(la_, lb_, seed=seed), n),
                    ("cka_debiased", debiased_cka_matrix(la_, lb_, max_texts=MAX_DEBIASED_TEXTS, seed=seed),
                     min(n, MAX_DEBIASED_TEXTS))):
                for r, la in enumerate(layers_a):
                    rows += [layer_row(a, la, na, metric, float(cka[r, c]), n=used, pooling="mean", model_b=b,
                                       layer_b=lb, depth_b=lb / nb) for c, lb in enumerate(layers_b)]
    return rows
