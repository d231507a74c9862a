"""The length control of the pair studies: does the token-length difference of a pair explain its preference?

    summary["length_control"] = length_control(run)       # pair-level r of B - A tokens with each preference
    text = length_paragraph(summary["length_control"], "r_ua_pref_sum")   # what it says, for a report
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np

from ...report.markdown import number, signed
from ...stats import pearson
from .inputs import PairRun


class LengthControl(TypedDict):
    """:func:`length_control` of one model's pairs (r and p are None when every pair has the same length difference)."""

    mean_len_diff: float  # mean tokens of B minus tokens of A over the pairs
    r_len_pref: float | None  # Pearson r of the length difference with the per-token preference
    p_len_pref: float | None  # its t-test p
    r_len_pref_sum: float | None  # Pearson r of the length difference with the summed preference
    p_len_pref_sum: float | None  # its t-test p
    n: int  # pairs


def length_control(run: PairRun) -> LengthControl:
    """Pair-level Pearson r of the token-length difference B - A with the mean and the summed preference.

    When every pair has the same length difference, r and p are None (length cannot explain anything: absent by
    design, not a failed computation)."""
    if np.ptp(run.len_diff) == 0:
        r_mean = p_mean = r_sum = p_sum = None
    else:
        r_mean, p_mean = pearson(run.len_diff, run.pref)
        r_sum, p_sum = pearson(run.len_diff, run.pref_sum)
    return {"mean_len_diff": float(np.mean(run.len_diff)), "r_len_pref": r_mean, "p_len_pref": p_mean,
            "r_len_pref_sum": r_sum, "p_len_pref_sum": p_sum, "n": len(run.len_diff)}


def length_paragraph(control: LengthControl, metric: str) -> str:
    """What :func:`length_control` says about the preferences, for a report; ``metric`` names the rows
    that use the summed preference (e.g. ``r_ua_pref_sum``)."""
    r_mean, r_sum = _finite(control["r_len_pref"]), _finite(control["r_len_pref_sum"])
    text = (f"Length control: the token-length difference B - A averages {control['mean_len_diff']:+.2f} tokens "
            f"(n = {control['n']} pairs). It correlates with the per-token preference at "
            f"r = {signed(r_mean)} (p = {number(control['p_len_pref'])}) and with the summed preference "
            f"NLL_sum(B) - NLL_sum(A) at r = {signed(r_sum)} (p = {number(control['p_len_pref_sum'])}). ")
    if r_sum is None:
        return text + "Every pair has the same length difference, so length cannot explain either preference."
    if abs(r_sum) >= 0.5:
        text += (f"The summed preference mostly measures length, so read `{metric}` as a length control, not as "
                 "a second measure of preference.")
    elif abs(r_sum) >= 0.3:
        text += f"Length explains part of the summed preference; compare `{metric}` with the per-token rows."
    else:
        text += "Length explains little of the summed preference."
    if r_mean is not None and abs(r_mean) >= 0.3:
        text += " Even the per-token preference tracks length, so part of its correlations may be a length effect."
    return text


def _finite(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
