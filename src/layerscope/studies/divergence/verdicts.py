"""A divergence r's verdict at one tested layer: its test over the tested layers, the interval, the label it earns.

    tests = tested_profile(ua, pref, sig)           # ua: (n_cat, k tested layers), pref: (n_cat,)
    entry = verdict("mean", 30, tests[-1], ua[:, -1], pref, names, 0.95)
    entry["label"]    # the notebook's interpretation (interpret(r)) only where q < 1 - level
    verdict_key(entry)    # (significant, sign): what a sensitivity check must keep for the headline to hold
"""

from __future__ import annotations

import numpy as np

from ...study.finite import defined
from ...study.sensitivity import influence, not_significant
from ..shared.correlation import Significance, add_q, pearson_tests
from .summary import PoolingVerdict

LABELS = [(-0.5, "INVERSE (strong negative)"), (-0.2, "Weak negative"), (0.2, "DECOUPLED (near zero)"),
          (0.5, "Weak positive")]


def interpret(r: float | None) -> str:
    """The notebook's label for a correlation: thresholds -0.5, -0.2, 0.2, 0.5; "undefined" for None or NaN."""
    if r is None or np.isnan(r):
        return "undefined"
    return next((label for upper, label in LABELS if r < upper), "ALIGNED (strong positive)")


def tested_profile(ua: np.ndarray, pref: np.ndarray, sig: Significance) -> list[dict]:
    """Per column of ``ua`` (n_cat, k tested layers): r with ``pref`` (n_cat,) as ``value``, ``p``, ``p_perm``,
    the Fisher-z ``ci_lo``, ``ci_hi`` and ``q`` (Benjamini-Hochberg of p_perm over the k) with ``significant``."""
    return add_q(pearson_tests(ua, pref, sig.n_permutations, sig.seed, sig.level), "p_perm", sig.level)


def verdict(pooling: str, layer: int, test: dict, ua: np.ndarray, pref: np.ndarray, names: list[str], level: float,
            stage: str | None = None, reason: str | None = None) -> PoolingVerdict:
    """The verdict at one tested layer: ``verdict("mean", 30, tests[-1], ua[:, -1], pref, names, 0.95)``.

    ``test``: a :func:`tested_profile` entry; ua, pref: (n_cat,). The entry holds r, p, p_perm, q, ``significant``,
    the categories with ``leverage`` (:func:`sensitivity.influence`), the headline interval ``ci_lo``, ``ci_hi``
    (``interval`` "Fisher-z", or "leave-one-out range" when a category has leverage; ``fisher_z`` keeps the
    other) and the ``label``: the notebook's interpretation only when significant, else the not-significant text,
    or ``reason`` when the pooling is undefined for the data."""
    spread = influence(ua, pref, names)
    entry = {"pooling": pooling, "layer": layer, **({"stage": stage} if stage else {}), "r": defined(test["value"]),
             "p": defined(test["p"]), "p_perm": defined(test["p_perm"]), "q": defined(test["q"]),
             "significant": bool(test["significant"]), "fisher_z": [defined(test["ci_lo"]), defined(test["ci_hi"])],
             "leverage": spread["flagged"], "loo_range": spread["range"]}
    entry["interval"] = "leave-one-out range" if spread["flagged"] else "Fisher-z"
    entry["ci_lo"], entry["ci_hi"] = spread["range"] if spread["flagged"] else entry["fisher_z"]
    entry["label"] = reason or earned_label(entry, len(pref), level)
    return entry


def earned_label(entry: PoolingVerdict, n: int, level: float) -> str:
    """The notebook's label when the r of ``entry`` is significant, else ``not significant (n, p_perm, q[, CI])``
    (the Fisher-z CI only where it is valid)."""
    if entry["r"] is None:
        return "undefined"
    if entry["significant"]:
        return interpret(entry["r"])
    ci = (entry["ci_lo"], entry["ci_hi"]) if entry["interval"] == "Fisher-z" else None
    return not_significant(n, entry["p_perm"], entry["q"], ci, level)


def verdict_key(entry: PoolingVerdict) -> tuple[bool, int]:
    """What a check must keep for the headline to hold: significance, and the sign of a significant r."""
    if not entry["significant"]:
        return False, 0
    return True, 0 if entry["r"] is None else int(np.sign(entry["r"]))
