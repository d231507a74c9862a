"""Anisotropy (seed 003): per layer, how concentrated the covariance spectrum of all token
states is; L* = the layer of maximum top1_ratio; the bell-curve test around it; and what the
notebook never checks: outlier dimensions and the effect of position 0.

    per_layer = [anisotropy_metrics(states.layers[l]) for l in range(n_layers + 1)]
    star = l_star([m["top1_ratio"] for m in per_layer])
    bell_test(values, star);  reference_match(star, 28)
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from ...engine.tokens import TokenStates
from ...spectrum import anisotropy_metrics
from ..finite import check_rows, check_values
from ..result import layer_row

METRICS = ("eigenvalue_variance", "top1_ratio", "effective_rank", "cos_to_mean", "var_top10", "var_top50")
OUTLIER_METRICS = ("n_outlier_dims", "outlier_share_top1", "top1_ratio_without_outliers")
VERDICT_METRICS = (*METRICS, *OUTLIER_METRICS, "eigenvalue_share")
"""Every per-layer number: L*, the bell test and the outlier verdict are computed from them."""
SPECTRUM_RANKS = 100
SATURATED = 0.99


def l_star(top1: list[float]) -> int:
    """The layer with the largest top1_ratio (the first one on a tie)."""
    return int(np.argmax(top1))


def bell_test(values: list[float], star: int) -> dict:
    """Linear-regression slopes before L* (layers < L*) and from L* on; bell = rising then falling."""
    def trend(segment):
        if len(segment) < 2:
            return 0.0, 0.0, 1.0
        fit = stats.linregress(np.arange(len(segment)), segment)
        return float(fit.slope), float(fit.rvalue), float(fit.pvalue)

    (s1, r1, p1), (s2, r2, p2) = trend(values[:star]), trend(values[star:])
    return {"is_bell_curve": bool(s1 > 0 and s2 < 0), "phase1_slope": s1, "phase1_r": r1, "phase1_p": p1,
            "phase2_slope": s2, "phase2_r": r2, "phase2_p": p2, "max_value": float(values[star])}


def reference_match(star: int, reference: int | None) -> dict | None:
    """The notebook's bands: within 3 layers excellent, within 5 good, else a discrepancy."""
    if reference is None:
        return None
    distance = abs(star - reference)
    band = "EXCELLENT MATCH" if distance <= 3 else "GOOD MATCH" if distance <= 5 else "DISCREPANCY"
    return {"reference_l_star": reference, "distance": distance, "verdict": band}


def key_layers(star: int, n_layers: int) -> list[int]:
    """0, L*/2, L*, (L* + L)/2, L, as the notebook picks them (duplicates dropped)."""
    return list(dict.fromkeys([0, star // 2, star, (star + n_layers) // 2, n_layers]))


def token_set_summary(per_layer: list[dict], n_layers: int, reference: int | None) -> dict:
    top1 = [m["top1_ratio"] for m in per_layer]
    star = l_star(top1)
    saturated = [layer for layer, value in enumerate(top1) if value >= SATURATED]
    return {
        "l_star": star,
        "bell": bell_test(top1, star),
        "reference": reference_match(star, reference),
        "key_layers": key_layers(star, n_layers),
        "saturated_layers": saturated,
        "layers_with_outliers": [layer for layer, m in enumerate(per_layer) if m["n_outlier_dims"]],
    }


def outlier_verdict(all_tokens: list[dict], summary: dict, without_pos0: list[dict] | None) -> str:
    """Does a top1_ratio near 1 come from outlier dimensions (and from position 0)?"""
    layers = summary["saturated_layers"]
    if not layers:
        peak = max(m["top1_ratio"] for m in all_tokens)
        return f"No layer reaches top1_ratio >= {SATURATED} (the largest is {peak:.3f}); nothing to explain."
    share = np.mean([all_tokens[layer]["outlier_share_top1"] for layer in layers])
    without = np.mean([all_tokens[layer]["top1_ratio_without_outliers"] for layer in layers])
    dims = sorted({d for layer in layers for d in all_tokens[layer]["outlier_dims"]})
    span = f"layers {layers[0]} to {layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"
    text = (f"top1_ratio is at least {SATURATED} at {span} ({len(layers)} layers). There, on average "
            f"{share:.1%} of the top principal direction lies in {len(dims)} outlier dimension(s) "
            f"({', '.join(map(str, dims[:8]))}{', ...' if len(dims) > 8 else ''}), and without those dimensions "
            f"top1_ratio is {without:.3f}. ")
    text += ("So yes: the saturation comes from outlier dimensions. " if share > 0.5 and without < 0.5
             else "So no: outlier dimensions do not explain the saturation. ")
    if without_pos0 is not None:
        rest = np.mean([without_pos0[layer]["top1_ratio"] for layer in layers])
        text += (f"Without position 0 the same layers have top1_ratio {rest:.3f}: "
                 + ("the saturation comes from the position-0 token (BOS, or the first word of a model "
                    "without BOS, acting as an attention sink), whose state lies far from all others." if rest < 0.5
                    else "position 0 alone does not explain it either."))
    return text


def check_states(name: str, states: TokenStates) -> None:
    """``NonFiniteError`` naming the layer, text and position of the first NaN or inf token state: checked before
    any spectrum, where NaN would crash inside LAPACK and inf turn every metric into NaN."""
    finite = np.isfinite(states.layers).all(axis=2)  # (n_layers + 1, n_tokens)
    if not finite.all():
        layer, token = np.argwhere(~finite)[0]
        check_values("anisotropy", name, f"layer {layer} token state of text {states.text_index[token]} at position "
                     f"{states.position[token]}", states.layers[layer, token])


def analyse_model(name: str, n_layers: int, states: TokenStates, token_sets: list[str], primary: str,
                  reference: int | None) -> tuple[dict, list[dict]]:
    views = {"all": states, "excl_pos0": states.select(states.position > 0)}
    rows, sets, per_set = [], {}, {}
    check_states(name, states)
    for tokens in token_sets:
        view = views[tokens]
        per_layer = [anisotropy_metrics(view.layers[layer]) for layer in range(n_layers + 1)]
        per_set[tokens] = per_layer
        for layer, m in enumerate(per_layer):
            extra = {"tokens": tokens, "n": len(view.position)}
            rows += [layer_row(name, layer, n_layers, metric, m[metric], **extra) for metric in METRICS]
            rows += [layer_row(name, layer, n_layers, metric, m[metric], **extra) for metric in OUTLIER_METRICS]
            normalised = m["eigenvalues"][:SPECTRUM_RANKS] / m["eigenvalues"].sum()
            rows += [layer_row(name, layer, n_layers, "eigenvalue_share", v, rank=k + 1, **extra)
                     for k, v in enumerate(normalised)]
        check_rows("anisotropy", rows, VERDICT_METRICS)  # before L* and the verdicts
        sets[tokens] = token_set_summary(per_layer, n_layers, reference)
        sets[tokens]["n_tokens"] = int(len(view.position))
    summary = {
        "n_layers": n_layers,
        "hidden_dim": int(states.layers.shape[2]),
        "primary": primary,
        "token_sets": sets,
        "l_star": sets[primary]["l_star"],
        "outlier_verdict": outlier_verdict(per_set["all"], sets["all"], per_set.get("excl_pos0"))
        if "all" in per_set else None,
    }
    return summary, rows
