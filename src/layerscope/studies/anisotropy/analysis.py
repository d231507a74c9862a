"""Anisotropy (seed 003): per layer, how concentrated the covariance spectrum of all token
states is; L* = the layer of maximum top1_ratio; the bell-curve test around it; and what the
notebook never checks: outlier dimensions, the position-0 sink and massive-activation tokens.

    summary, rows = analyse_states(name, n_layers, states, config)   # token sets and settings from the StudyConfig
    summary, rows = analyse_model(name, n_layers, states, list(TOKEN_SETS), "all",
                                  reference=None, compat=None, level=0.95)   # the same, settings by hand
    bell_verdict(values, star, level=0.95)   # significant rise, then significant fall, or says which fails

Default mode: the profile's final layer (``n_layers``) is the last block's output before the model's final norm
(``TokenStates.pre_norm``); the post-norm state is a sensitivity row (``stage`` "pre_norm" / "post_norm" on the
rows of layer ``n_layers``). ``compat="notebooks"`` keeps the notebook's profile, rule and labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from ...engine.forward.tokens import TokenStates
from ...errors import LayerscopeError
from ...measures.spectrum import anisotropy_metrics
from ...modes import NOTEBOOKS
from ...report.markdown import number
from ...stats import bh_qvalues
from ...study.config import ConfigError
from ...study.finite import check_rows, check_values, defined
from ...study.result import layer_row
from ..shared.caveats import MIN_N
from .drivers import (
    SINK_RATIO,
    bell_label,
    driver_at,
    lstar_checks,
    massive_flags,
    massive_summary,
    pos0_norm_ratio,
    robust_text,
    sink_onset,
)
from .summary import AnisotropyAnalysis, Bell, ReferenceMatch, Sink, TokenSet

if TYPE_CHECKING:
    from ...study.config import StudyConfig

METRICS = ("eigenvalue_variance", "top1_ratio", "effective_rank", "cos_to_mean", "var_top10", "var_top50")
OUTLIER_METRICS = ("n_outlier_dims", "outlier_share_top1", "top1_ratio_without_outliers")
VERDICT_METRICS = (*METRICS, *OUTLIER_METRICS, "eigenvalue_share", "pos0_norm_ratio")
"""Every per-layer number: L*, the bell test, the driver and the outlier verdict are computed from them."""
SPECTRUM_RANKS = 100
SATURATED = 0.99
MIN_SEGMENT = 3
"""The bell test needs at least this many layers before L* and from L* on, else it is not assessable."""
TOKEN_SETS = {"all": "all tokens", "excl_pos0": "without position 0",
              "excl_massive": "without massive-activation tokens",
              "excl_pos0_massive": "without position 0 and massive-activation tokens"}
"""The token sets of the default mode and how reports name them (notebooks mode: "all", with --exclude-bos also
"excl_pos0"). ``excl_pos0_massive`` leaves out position 0 and every massive-activation token (wherever it sits)."""


def l_star(top1: list[float]) -> int:
    """The layer with the largest top1_ratio (the first one on a tie)."""
    return int(np.argmax(top1))


def bell_test(values: list[float], star: int) -> Bell:
    """The notebook's rule (notebooks mode): linear-regression slopes before L* (layers < L*) and from L* on; bell =
    rising then falling, whatever the slopes' size and p."""
    def trend(segment):
        if len(segment) < 2:
            return 0.0, 0.0, 1.0
        fit = stats.linregress(np.arange(len(segment)), segment)
        return float(fit.slope), float(fit.rvalue), float(fit.pvalue)

    (s1, r1, p1), (s2, r2, p2) = trend(values[:star]), trend(values[star:])
    return {"is_bell_curve": bool(s1 > 0 and s2 < 0), "phase1_slope": s1, "phase1_r": r1, "phase1_p": p1,
            "phase2_slope": s2, "phase2_r": r2, "phase2_p": p2, "max_value": float(values[star])}


def span(layers: list[int]) -> str:
    """``"layers 0-11"``, ``"layer 4"`` or ``"no layer"``."""
    if not layers:
        return "no layer"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def slope_text(x: float | None) -> str:
    """A slope with its sign: ``+0.0005``, ``-0.0123``; ``n/a`` when undefined."""
    return "n/a" if x is None else ("+" if x >= 0 else "-") + number(abs(x))


def _segment(values: list[float], layers: list[int]) -> dict:
    """Least-squares line through one segment: slope per layer, r and two-sided p (None where undefined)."""
    out = {"layers": [layers[0], layers[-1]] if layers else None, "n": len(layers), "slope": None, "r": None,
           "p": None}
    if len(layers) >= 2:
        fit = stats.linregress(layers, values)
        out.update(slope=defined(fit.slope), r=defined(fit.rvalue),
                   p=defined(fit.pvalue) if len(layers) >= MIN_SEGMENT else None)
    return out


def bell_verdict(values: list[float], star: int, level: float = 0.95) -> Bell:
    """Default rule: a bell curve needs a rise before L* (layers < L*) and a fall from L* on, each a slope of the right
    sign with q < 1 - level (Benjamini-Hochberg over the two p) and each fitted to >= MIN_SEGMENT layers.

    Returns the notebook's fields (``phase1_slope`` ... ``max_value``, ``is_bell_curve``) plus ``phase{1,2}_q``,
    ``phase{1,2}_layers`` ([first, last]), ``phase{1,2}_n``, ``assessable`` and ``verdict``, a sentence naming the
    layers and the slope that fails, with its p and q.
    """
    layers = list(range(len(values)))
    parts = (("before L*", "rise", layers[:star], 1), ("from L* on", "fall", layers[star:], -1))
    segments = [_segment([values[i] for i in seg], seg) for _, _, seg, _ in parts]
    out = {"max_value": float(values[star]), "level": level, "min_layers": MIN_SEGMENT}
    for k, seg in enumerate(segments, start=1):
        out.update({f"phase{k}_slope": seg["slope"], f"phase{k}_r": seg["r"], f"phase{k}_p": seg["p"],
                    f"phase{k}_q": None, f"phase{k}_layers": seg["layers"], f"phase{k}_n": seg["n"]})
    short = [f"{len(seg)} layer(s) {where} ({span(seg)})" for where, _, seg, _ in parts if len(seg) < MIN_SEGMENT]
    if short:
        return {**out, "assessable": False, "is_bell_curve": False,
                "verdict": f"bell test not assessable: {' and '.join(short)}; it needs >= {MIN_SEGMENT} layers on "
                           "each side of L*"}
    qs = [defined(q) for q in bh_qvalues([np.nan if s["p"] is None else s["p"] for s in segments])]
    passed, described = [], []
    for k, ((_where, _word, seg, sign), fit, q) in enumerate(zip(parts, segments, qs, strict=False), start=1):
        out[f"phase{k}_q"] = q
        passed.append(fit["slope"] is not None and fit["slope"] * sign > 0 and q is not None and q < 1 - level)
        described.append(f"{span(seg)}: slope {slope_text(fit['slope'])} per layer, p = {number(fit['p'])}, "
                         f"q = {number(q)}")
    if all(passed):
        rise, fall = described  # before L*, from L* on
        verdict = f"bell curve: rises before L* ({rise}) and falls from L* on ({fall})"
    else:
        verdict = "not a bell curve: " + "; ".join(f"no significant {word} {where} ({text})" for (where, word, _, _),
                                                   text, ok in zip(parts, described, passed, strict=False) if not ok)
    return {**out, "assessable": True, "is_bell_curve": all(passed), "verdict": verdict}


def reference_match(star: int, reference: int | None) -> ReferenceMatch | None:
    """The notebook's bands: within 3 layers excellent, within 5 good, else a discrepancy."""
    if reference is None:
        return None
    distance = abs(star - reference)
    band = "EXCELLENT MATCH" if distance <= 3 else "GOOD MATCH" if distance <= 5 else "DISCREPANCY"
    return {"reference_l_star": reference, "distance": distance, "verdict": band}


def key_layers(star: int, n_layers: int) -> list[int]:
    """0, L*/2, L*, (L* + L)/2, L, as the notebook picks them (duplicates dropped)."""
    return list(dict.fromkeys([0, star // 2, star, (star + n_layers) // 2, n_layers]))


def token_set_summary(per_layer: list[dict], n_layers: int, reference: int | None, level: float | None = None
                      ) -> TokenSet:
    """L*, bell test (the notebook's rule without ``level``, :func:`bell_verdict` with it), reference match, key,
    saturated and outlier layers of one token set's profile (``per_layer``: n_layers + 1 metric dicts)."""
    top1 = [m["top1_ratio"] for m in per_layer]
    star = l_star(top1)
    saturated = [layer for layer, value in enumerate(top1) if value >= SATURATED]
    return {
        "l_star": star,
        "bell": bell_test(top1, star) if level is None else bell_verdict(top1, star, level),
        "reference": reference_match(star, reference),
        "key_layers": key_layers(star, n_layers),
        "saturated_layers": saturated,
        "layers_with_outliers": [layer for layer, m in enumerate(per_layer) if m["n_outlier_dims"]],
    }


def outlier_verdict(all_tokens: list[dict], summary: TokenSet, without_pos0: list[dict] | None) -> str:
    """Does a top1_ratio near 1 come from outlier dimensions (and from position 0)?"""
    layers = summary["saturated_layers"]
    if not layers:
        peak = max(m["top1_ratio"] for m in all_tokens)
        return f"No layer reaches top1_ratio >= {SATURATED} (the largest is {peak:.3f}); nothing to explain."
    share = np.mean([all_tokens[layer]["outlier_share_top1"] for layer in layers])
    without = np.mean([all_tokens[layer]["top1_ratio_without_outliers"] for layer in layers])
    dims = sorted({d for layer in layers for d in all_tokens[layer]["outlier_dims"]})
    span_text = f"layers {layers[0]} to {layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"
    text = (f"top1_ratio is at least {SATURATED} at {span_text} ({len(layers)} layers). There, on average "
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


def check_states(name: str, states: TokenStates, pre_norm: bool = False) -> None:
    """``NonFiniteError`` naming the layer, text and position of the first NaN or inf token state: checked before
    any spectrum, where NaN would crash inside LAPACK and inf turn every metric into NaN. ``pre_norm``: also
    ``states.pre_norm`` (named as layer n_layers before the final norm)."""
    stack = [(f"layer {layer}", states.layers[layer]) for layer in range(len(states.layers))]
    if pre_norm:
        stack.append((f"layer {len(states.layers) - 1} (before the final norm)", states.pre_norm))
    for where, layer in stack:
        finite = np.isfinite(layer).all(axis=1)
        if not finite.all():
            token = int(np.flatnonzero(~finite)[0])
            check_values("anisotropy", name, f"{where} token state of text {states.text_index[token]} at position "
                         f"{states.position[token]}", layer[token])


def layer_rows(name: str, layer: int, n_layers: int, m: dict, **extra) -> list[dict]:
    """The table rows of one layer's metrics ``m``: METRICS, OUTLIER_METRICS and the top eigenvalue shares."""
    rows = [layer_row(name, layer, n_layers, metric, m[metric], **extra) for metric in (*METRICS, *OUTLIER_METRICS)]
    normalised = m["eigenvalues"][:SPECTRUM_RANKS] / m["eigenvalues"].sum()
    return rows + [layer_row(name, layer, n_layers, "eigenvalue_share", v, rank=k + 1, **extra)
                   for k, v in enumerate(normalised)]


def headline_tokens(config: StudyConfig) -> str:
    """The headline token set: "excl_pos0" with ``--exclude-bos``, else "all"."""
    return "excl_pos0" if config.exclude_bos else "all"


def profiled_tokens(config: StudyConfig) -> list[str]:
    """The token sets to profile: every one of TOKEN_SETS; notebooks mode: "all" (with --exclude-bos also
    "excl_pos0")."""
    if config.compat == NOTEBOOKS:
        return ["all", "excl_pos0"] if config.exclude_bos else ["all"]
    return list(TOKEN_SETS)


def analyse_states(name: str, n_layers: int, states: TokenStates, config: StudyConfig,
                   decode: Callable[[int], str] | None = None) -> tuple[AnisotropyAnalysis, list[dict]]:
    """``summary, rows = analyse_states(name, n_layers, states, config)``: :func:`analyse_model` with the token sets,
    headline set, reference_lstar, compat and ci_level of ``config`` (what ``Anisotropy.run`` computes)."""
    return analyse_model(name, n_layers, states, profiled_tokens(config), headline_tokens(config),
                         config.reference_lstar, compat=config.compat, level=config.ci_level, decode=decode)


def analyse_model(name: str, n_layers: int, states: TokenStates, token_sets: list[str], primary: str,
                  reference: int | None, compat: str | None = None, level: float = 0.95,
                  decode: Callable[[int], str] | None = None) -> tuple[AnisotropyAnalysis, list[dict]]:
    """One model's summary and table rows: the notebook's analysis with ``compat="notebooks"``, else
    :func:`corrected_analysis` (``decode`` turns a token id into its text for the massive-token list)."""
    if compat != NOTEBOOKS:
        return corrected_analysis(name, n_layers, states, token_sets, primary, reference, level, decode)
    views = {"all": states, "excl_pos0": states.select(states.position > 0)}
    rows, sets, per_set = [], {}, {}
    check_states(name, states)
    for tokens in token_sets:
        view = views[tokens]
        per_layer = [anisotropy_metrics(view.layers[layer]) for layer in range(n_layers + 1)]
        per_set[tokens] = per_layer
        for layer, m in enumerate(per_layer):
            rows += layer_rows(name, layer, n_layers, m, tokens=tokens, n=len(view.position))
        check_rows("anisotropy", rows, VERDICT_METRICS)  # before L* and the verdicts
        sets[tokens] = token_set_summary(per_layer, n_layers, reference)
        sets[tokens]["n_tokens"] = len(view.position)
    summary: AnisotropyAnalysis = {
        "n_layers": n_layers,
        "hidden_dim": int(states.layers.shape[2]),
        "primary": primary,
        "token_sets": sets,
        "l_star": sets[primary]["l_star"],
        "outlier_verdict": outlier_verdict(per_set["all"], sets["all"], per_set.get("excl_pos0"))
        if "all" in per_set else None,
    }
    return summary, rows


def _profiles(states: TokenStates, n_layers: int, keep: np.ndarray) -> tuple[list[dict], dict]:
    """Metrics of the kept tokens at layers 0..n_layers-1 and the pre-norm final state (the profile), and of the
    post-norm final state."""
    profile = [anisotropy_metrics(states.layers[layer][keep]) for layer in range(n_layers)]
    return profile + [anisotropy_metrics(states.pre_norm[keep])], anisotropy_metrics(states.layers[n_layers][keep])


def _stage(layer: int, n_layers: int) -> dict:
    """``{"stage": "pre_norm"}`` for the profile's final layer, ``{}`` for the others."""
    return {"stage": "pre_norm"} if layer == n_layers else {}


def corrected_analysis(name: str, n_layers: int, states: TokenStates, token_sets: list[str], primary: str,
                       reference: int | None, level: float, decode: Callable[[int], str] | None = None
                       ) -> tuple[AnisotropyAnalysis, list[dict]]:
    """The default analysis: every token set's profile with the final layer before the final norm (rows at layer
    ``n_layers`` carry ``stage`` "pre_norm", and the post-norm state "post_norm"), :func:`bell_verdict` at
    ``level``, the sink's norm ratio per layer, the massive-activation tokens, what drives L*, and whether L* and
    the bell label hold without position 0, without massive tokens, without both and after the final norm."""
    if states.pre_norm is None:
        raise LayerscopeError(f"anisotropy, {name}: the token states hold no pre-norm final state; build them with "
                              "engine.forward.tokens.token_states (or pass pre_norm), or use compat='notebooks'")
    check_states(name, states, pre_norm=True)
    flags, flag_layers = massive_flags(states, n_layers)
    massive, flagged = massive_summary(flags, flag_layers, states, decode), flags.any(axis=0)
    masks = {"all": np.ones(len(states.position), dtype=bool), "excl_pos0": states.position > 0,
             "excl_massive": ~flagged, "excl_pos0_massive": (states.position > 0) & ~flagged}
    rows, sets, profiles, posts, skipped = [], {}, {}, {}, {}
    for tokens in token_sets:
        keep = masks[tokens]
        if keep.sum() < 2:
            if tokens == primary:
                raise ConfigError(f"anisotropy, {name}: {TOKEN_SETS[tokens]} leaves {int(keep.sum())} token state(s), "
                                  "and a covariance needs 2; use longer prompts or leave --exclude-bos out")
            skipped[tokens] = f"{int(keep.sum())} token state(s) left; a covariance needs 2"
            continue
        same = next((t for t in profiles if np.array_equal(masks[t], keep)), None)  # e.g. massive = position 0
        profile, post = (profiles[same], posts[same]) if same else _profiles(states, n_layers, keep)
        profiles[tokens], posts[tokens] = profile, post
        extra = {"tokens": tokens, "n": int(keep.sum())}
        for layer, m in enumerate(profile):
            rows += layer_rows(name, layer, n_layers, m, **extra, **_stage(layer, n_layers))
        rows += layer_rows(name, n_layers, n_layers, post, **extra, stage="post_norm")
        check_rows("anisotropy", rows, VERDICT_METRICS)  # before L* and the verdicts
        sets[tokens] = {**token_set_summary(profile, n_layers, reference, level), "n_tokens": extra["n"]}
        sets[tokens]["driver"] = driver_at(states, n_layers, sets[tokens]["l_star"], keep,
                                           profile[sets[tokens]["l_star"]], flagged)
        pre_norm_final = profile[n_layers]  # the profile's final layer: the last block's output before the norm
        after = token_set_summary([*profile[:n_layers], post], n_layers, None, level)
        sets[tokens]["post_norm"] = {"l_star": after["l_star"], "bell": after["bell"],
                                     "top1_ratio_final": post["top1_ratio"],
                                     "top1_ratio_final_pre_norm": pre_norm_final["top1_ratio"]}
    star = sets[primary]["l_star"]
    sink, sink_rows = sink_profile(name, n_layers, states, star)
    rows += sink_rows
    checks = lstar_checks(primary, sets)
    bell = sets[primary]["bell"]
    robust = robust_text(star, checks, bell_label(bell))
    summary: AnisotropyAnalysis = {
        "n_layers": n_layers,
        "hidden_dim": int(states.layers.shape[2]),
        "primary": primary,
        "final_layer": "pre_norm",
        "token_sets": sets,
        "skipped_token_sets": skipped,
        "l_star": star,
        "l_star_stage": "pre_norm" if star == n_layers else None,
        "bell_verdict": bell["verdict"],
        "driver": sets[primary]["driver"],
        "sink": sink,
        "massive": massive,
        "checks": checks,
        "robustness": robust,
        "caveats": caveats(bell, robust),
        "outlier_verdict": outlier_verdict(profiles["all"], sets["all"], profiles.get("excl_pos0"))
        if "all" in profiles else None,
    }
    return summary, rows


def sink_profile(name: str, n_layers: int, states: TokenStates, star: int) -> tuple[Sink, list[dict]]:
    """The position-0 norm ratio (:func:`drivers.pos0_norm_ratio`) per layer of the profile (the pre-norm final
    state at ``n_layers``) and after the final norm: the summary (``rule``, ``onset_layer``, the ratios, the one at
    ``star``) and the ``pos0_norm_ratio`` rows."""
    ratios = [pos0_norm_ratio(states.layers[layer] if layer < n_layers else states.pre_norm, states.text_index,
                              states.position) for layer in range(n_layers + 1)]
    post = pos0_norm_ratio(states.layers[n_layers], states.text_index, states.position)
    rows = [layer_row(name, layer, n_layers, "pos0_norm_ratio", r, tokens="all", **_stage(layer, n_layers))
            for layer, r in enumerate(ratios) if r is not None]
    if post is not None:
        rows.append(layer_row(name, n_layers, n_layers, "pos0_norm_ratio", post, tokens="all", stage="post_norm"))
    check_rows("anisotropy", rows)
    return {"rule": SINK_RATIO, "onset_layer": sink_onset(ratios), "pos0_norm_ratio": ratios,
            "pos0_norm_ratio_post_norm": post, "at_l_star": ratios[star]}, rows


def caveats(bell: Bell, robust: str) -> list[str]:
    """What a reader of the headline must know: bell segments with fewer than ``MIN_N`` layers, and a verdict that
    is not robust."""
    out = [f"the bell test fits {bell[f'phase{k}_n']} layers {where} (< {MIN_N})"
           for k, where in ((1, "before L*"), (2, "from L* on")) if MIN_SEGMENT <= bell[f"phase{k}_n"] < MIN_N]
    return out + ([robust] if robust.startswith("not robust") else [])
