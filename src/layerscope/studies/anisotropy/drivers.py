"""What drives the anisotropy peak L*: the position-0 sink, massive-activation tokens, or outlier dimensions.

    flags, flag_layers = massive_flags(states, n_layers)      # (len(flag_layers), n_tokens) bool
    massive = massive_summary(flags, flag_layers, states)     # which tokens, where, at which layers
    ratio = pos0_norm_ratio(states.layers[3], states.text_index, states.position)   # sink strength at layer 3
    driver = driver_at(states, n_layers, star, base, at, flags.any(axis=0))   # what removes the top-1 share at L*
    checks = lstar_checks(primary, sets); robust_text(sets[primary]["l_star"], checks)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from ...engine.forward.massive import MASSIVE_RATIO, massive_tokens
from ...engine.forward.tokens import TokenStates
from ...measures.spectrum import covariance_spectrum, metrics_from_spectrum
from ...study.sensitivity import check_entry
from .summary import Bell, Driver, LStarCheck, Massive, TokenSet

SINK_RATIO = 5.0
"""Sink onset: the first layer where the position-0 token's norm exceeds SINK_RATIO x the median token norm of its
text (the median of that ratio over the texts with at least 2 tokens)."""
DRIVER_SHARE = 0.5
"""An exclusion drives L* when it leaves less than DRIVER_SHARE (half) of the top-1 share at L*."""
LISTED = 20
"""Mid-sentence massive-activation tokens listed in the summary (all are counted)."""
CHECK_NAMES = {"all": "with all tokens", "excl_pos0": "without position 0",
               "excl_massive": "without massive-activation tokens",
               "excl_pos0_massive": "without position 0 and massive-activation tokens"}
POST_NORM = "after the final norm"


class Exclusion(NamedTuple):
    """One exclusion :func:`driver_at` tries at L*."""

    key: str  # "sink", "massive", "outlier_dims", "sink_and_massive" (or "none": no exclusion drives L*)
    label: str  # the driver's label, should it be the one
    left_out: str  # what it leaves out, in words
    top1_ratio: float | None  # top1_ratio at L* without it (None: fewer than 2 token states left)


NO_DRIVER = Exclusion("none", "none of these", "", None)


def massive_flags(states: TokenStates, n_layers: int) -> tuple[np.ndarray, list[int]]:
    """Massive-activation tokens (``engine.forward.massive.massive_tokens`` at ``MASSIVE_RATIO``, per text) at each
    decoder block output 1..n_layers-1 and the last block's output before the final norm (listed as layer ``n_layers``).

    Returns (len(layers), n_tokens) bool and those layers; the embeddings (0) and the post-norm state are left out.
    """
    layers = list(range(1, n_layers + 1))
    flags = [massive_tokens(states.layers[layer] if layer < n_layers else states.pre_norm, states.text_index,
                            MASSIVE_RATIO) for layer in layers]
    return np.asarray(flags, dtype=bool).reshape(len(layers), len(states.position)), layers


def massive_summary(flags: np.ndarray, flag_layers: list[int], states: TokenStates,
                    decode: Callable[[int], str] | None = None) -> Massive:
    """The flagged tokens: how many, how many at position 0, their positions and layers, and the first ``LISTED``
    mid-sentence ones (text, position, token id, token text when ``decode`` is given, layers)."""
    hit = np.flatnonzero(flags.any(axis=0))
    mid = [i for i in hit if states.position[i] > 0]
    listed = [{"text": int(states.text_index[i]), "position": int(states.position[i]),
               "token_id": int(states.token_id[i]),
               "token": decode(int(states.token_id[i])) if decode is not None else None,
               "layers": [flag_layers[k] for k in np.flatnonzero(flags[:, i])]} for i in mid[:LISTED]]
    return {"ratio": MASSIVE_RATIO, "n_tokens": len(hit), "n_position_0": int(len(hit) - len(mid)),
            "n_mid_sentence": len(mid), "positions": sorted({int(states.position[i]) for i in hit}),
            "layers": [flag_layers[k] for k in np.flatnonzero(flags[:, hit].any(axis=1))], "mid_sentence": listed}


def massive_label(positions: list[int]) -> str:
    """``"massive-activation tokens (2 mid-sentence tokens at positions 4, 9)"`` from the tokens' positions."""
    shown = ", ".join(map(str, sorted(set(positions))[:8])) + (", ..." if len(set(positions)) > 8 else "")
    many = "s" if len(positions) != 1 else ""
    return (f"massive-activation tokens ({len(positions)} mid-sentence token{many} at "
            f"position{'s' if len(set(positions)) > 1 else ''} {shown})")


def pos0_norm_ratio(layer: np.ndarray, text_index: np.ndarray, position: np.ndarray) -> float | None:
    """Median over texts (with >= 2 tokens) of |h_pos0| / median |h| of the text's tokens; layer: (n_tokens, d).
    None when no text has two tokens."""
    frame = pd.DataFrame({"text": text_index, "norm": np.linalg.norm(np.asarray(layer, dtype=np.float64), axis=1)})
    groups = frame.groupby("text")["norm"]
    first = frame[np.asarray(position) == 0].set_index("text")["norm"]
    ratio = (first / groups.median())[groups.size() >= 2].dropna()
    return float(ratio.median()) if len(ratio) else None


def sink_onset(ratios: list[float | None]) -> int | None:
    """The first layer whose :func:`pos0_norm_ratio` exceeds ``SINK_RATIO`` (``ratios`` indexed by layer)."""
    return next((layer for layer, r in enumerate(ratios) if r is not None and r > SINK_RATIO), None)


def driver_at(states: TokenStates, n_layers: int, star: int, base: np.ndarray, at: dict, massive: np.ndarray
              ) -> Driver:
    """What the top-1 share at L* rests on, within the tokens ``base`` (n_tokens,) bool: top1_ratio at layer ``star``
    (the pre-norm state when star == n_layers) as it is (``at``: that layer's metrics of ``base``), without
    position 0 (the sink), without the mid-sentence tokens among ``massive`` (n_tokens,) bool, and without the
    outlier dimensions (``spectrum.outlier_dims``). The driver is the single exclusion leaving the least, if that is
    below ``DRIVER_SHARE`` of the value as it is (ties: the first of sink, massive tokens, outlier dimensions); else
    position 0 and the massive tokens together, if that is below it; else "none of these".

    Returns a :class:`~.summary.Driver`: ``"driver"`` is sink / massive / outlier_dims / sink_and_massive / none,
    ``"without"`` each exclusion tried.
    """
    x = states.pre_norm if star == n_layers else states.layers[star]
    pos0, mid = states.position == 0, massive & (states.position > 0)

    def without(drop: np.ndarray) -> float | None:
        keep = base & ~drop
        return metrics_from_spectrum(covariance_spectrum(x[keep])[0])["top1_ratio"] if keep.sum() >= 2 else None

    value = at["top1_ratio"]
    singles: dict[str, Exclusion] = {}  # by key, in the order ties are broken: sink, massive, outlier_dims
    both = None
    if (base & pos0).any():
        singles["sink"] = Exclusion("sink", "sink (position 0)", "position 0", without(pos0))
    if (base & mid).any():
        label = massive_label(states.position[base & mid].tolist())
        count = _count(int((base & mid).sum()), "mid-sentence massive-activation token")
        singles["massive"] = Exclusion("massive", label, f"the {count}", without(mid))
        if "sink" in singles:
            both = Exclusion("sink_and_massive", f"sink (position 0) and {label}", "position 0 and those tokens",
                             without(pos0 | mid))
    if at["n_outlier_dims"]:
        dims = at["outlier_dims"]
        shown = f"dim{'s' if len(dims) > 1 else ''} " + ", ".join(map(str, dims[:8])) + (", ..." * (len(dims) > 8))
        singles["outlier_dims"] = Exclusion("outlier_dims", f"outlier dimensions ({shown})",
                                            f"the outlier dimensions ({shown})", at["top1_ratio_without_outliers"])
    drops = [c for c in singles.values() if c.top1_ratio is not None and c.top1_ratio < DRIVER_SHARE * value]
    if not drops and both is not None and both.top1_ratio is not None and both.top1_ratio < DRIVER_SHARE * value:
        drops = [both]
    best = min(drops, key=lambda c: c.top1_ratio) if drops else NO_DRIVER
    tried = [*singles.values(), *([both] if both else [])]
    return {"layer": star, "top1_ratio": value, "rule": DRIVER_SHARE, "driver": best.key, "label": best.label,
            "without": [{"exclusion": c.key, "left_out": c.left_out, "top1_ratio": c.top1_ratio,
                         "share_left": None if c.top1_ratio is None else c.top1_ratio / value} for c in tried]}


def bell_label(bell: Bell) -> str:
    """``"bell curve"``, ``"not a bell curve"`` or ``"bell test not assessable"``: a bell verdict's label alone."""
    if not bell.get("assessable", True):
        return "bell test not assessable"
    return "bell curve" if bell["is_bell_curve"] else "not a bell curve"


def lstar_checks(primary: str, sets: dict[str, TokenSet]) -> list[LStarCheck]:
    """Sensitivity checks of the headline L* and bell label: each other token set, and the primary set's profile
    with the final layer after the final norm (``sets[primary]["post_norm"]``). ``check_entry`` dicts with
    ``value`` = L*, ``label`` = the bell label, and ``l_star_moves``, ``bell_flips``."""
    head = sets[primary]
    variants = [(CHECK_NAMES[t], s) for t, s in sets.items() if t != primary] + [(POST_NORM, head["post_norm"])]
    checks = []
    for name, s in variants:
        label = bell_label(s["bell"])
        moves, flips = s["l_star"] != head["l_star"], label != bell_label(head["bell"])
        checks.append(check_entry(name, s["l_star"], label, flips=moves or flips, l_star_moves=moves,
                                  bell_flips=flips))
    return checks


def robust_text(star: int, checks: list[LStarCheck], bell: str) -> str:
    """``"not robust: L* moves from 12 to 3 without position 0 / massive-activation tokens; the bell label becomes
    'bell curve' after the final norm"``, or ``"robust: L* = 12 and 'not a bell curve' hold with ..."``."""
    if not checks:
        return ""
    moved: dict[int, list[str]] = {}
    for c in checks:
        if c["l_star_moves"]:
            moved.setdefault(c["value"], []).append(c["check"])
    parts = [f"L* moves from {star} to {target} {_joined(names)}" if k == 0 else f"to {target} {_joined(names)}"
             for k, (target, names) in enumerate(moved.items())]
    parts += [f"the bell label becomes '{c['label']}' {c['check']}" for c in checks if c["bell_flips"]]
    if parts:
        return "not robust: " + "; ".join(parts)
    return f"robust: L* = {star} and '{bell}' hold {', '.join(c['check'] for c in checks)}"


def _count(n: int, noun: str) -> str:
    """``"1 token"``, ``"14 tokens"``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _joined(names: list[str]) -> str:
    """``["without position 0", "without massive-activation tokens", "after the final norm"]`` ->
    ``"without position 0 / massive-activation tokens, after the final norm"``."""
    without = [n.removeprefix("without ") for n in names if n.startswith("without ")]
    rest = [n for n in names if not n.startswith("without ")]
    return ", ".join(([f"without {' / '.join(without)}"] if without else []) + rest)
