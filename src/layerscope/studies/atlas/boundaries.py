"""Phase boundaries from independent measures, beside the phases study's thirds and the anisotropy L*.

    b = boundaries({"lens_kl": kl, "twonn_id": ids, ...}, layers, l_star=12, n_layers=30)
    b["consensus"], b["thirds"], b["agree"], b["verdict"]

Each profile over the measured layers gets a piecewise-linear fit with 2 breakpoints
(:func:`layerscope.measures.changepoints.piecewise_linear_breaks`, exact least squares, segments of at least 2 layers);
its breaks are the first layers of the 2nd and 3rd segments. The consensus is the median over measures of the
first break and of the second. A boundary agrees with the thirds' when it lies within ``tolerance`` =
max(1, round(0.1 n_layers)) layers of it. This is a description, not a test: no p-value is claimed.
"""

from __future__ import annotations

import numpy as np

from ...measures.changepoints import piecewise_linear_breaks, thirds
from .summary import Boundaries

N_BREAKS, MIN_SIZE = 2, 2


def tolerance(n_layers: int) -> int:
    return max(1, round(0.1 * n_layers))


def change_points(profiles: dict[str, tuple[list[int], np.ndarray]]) -> tuple[dict[str, list[int]], dict[str, str]]:
    """``found, skipped = change_points({name: (layers, values)})``: each finite profile's 2 breaks as layers."""
    found, skipped = {}, {}
    for name, (layers, values) in profiles.items():
        values = np.asarray(values, dtype=np.float64)
        if not np.isfinite(values).all():
            skipped[name] = "a value is not finite"
        elif len(values) < (N_BREAKS + 1) * MIN_SIZE:
            skipped[name] = f"{len(values)} layers, fewer than {(N_BREAKS + 1) * MIN_SIZE} for 3 segments of 2"
        else:
            fit = piecewise_linear_breaks(values, n_breaks=N_BREAKS, min_size=MIN_SIZE)
            found[name] = [int(layers[b]) for b in fit.breaks]
    return found, skipped


def boundaries(profiles: dict[str, tuple[list[int], np.ndarray]], layers: list[int], l_star: int,
               n_layers: int) -> Boundaries:
    """The change points of every profile, their consensus, and how they compare with the thirds of ``layers``
    and with ``l_star`` (module docstring)."""
    found, skipped = change_points(profiles)
    split = thirds(layers)
    marks = [split["mid"][0] if split["mid"] else layers[-1], split["late"][0]]
    tol = tolerance(n_layers)
    support = [sum(any(abs(b - mark) <= tol for b in breaks) for breaks in found.values()) for mark in marks]
    consensus = agree = near = None
    if found:
        consensus = [int(np.floor(np.median([breaks[k] for breaks in found.values()]))) for k in range(N_BREAKS)]
        agree = [abs(c - mark) <= tol for c, mark in zip(consensus, marks, strict=True)]
        near = min(abs(l_star - c) for c in consensus) <= tol
    return {"per_metric": found, "skipped": skipped, "consensus": consensus, "thirds": marks, "tolerance": tol,
            "agree": agree, "support": support, "l_star_near": near,
            "verdict": verdict(consensus, marks, agree, support, len(found), tol, l_star, near)}


def verdict(consensus: list[int] | None, marks: list[int], agree: list[bool] | None, support: list[int],
            n_measures: int, tol: int, l_star: int, near: bool | None) -> str:
    """The comparison in a sentence a researcher can quote (it names the layers and the tolerance)."""
    if consensus is None:
        return "no measure had enough finite layers for change points; nothing to compare with the thirds"
    which = {(True, True): "agree with both", (True, False): "agree with the early/mid boundary only",
             (False, True): "agree with the mid/late boundary only", (False, False): "agree with neither"}
    star = "near" if near else "not near"
    return (f"the measures' change points (median over {n_measures}: layers {consensus[0]} and {consensus[1]}) "
            f"{which[tuple(agree)]} of the phases study's thirds (layers {marks[0]} and {marks[1]}) within "
            f"{tol} layer{'s' if tol > 1 else ''}; {support[0]} and {support[1]} of {n_measures} measures have a "
            f"change point that close to each; the anisotropy L* = {l_star} is {star} a consensus change point")
