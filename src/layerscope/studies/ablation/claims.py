"""The ablation study's rows of a run's summary table: per model and quantization variant, H5 (protecting the first
and last layers cuts the low- vs high-resource disparity by more than 30%) with the bootstrap interval of the
reduction and the left-out languages that flip it.

    claims(result)   # [Verdict("ablation", "smollm2-135m", "H5 [per-channel/linear]: ...", "not significant", ...)]
"""

from __future__ import annotations

from ...modes import NOTEBOOKS
from ...study.result import StudyResult
from ...study.validated import with_card
from ...study.verdicts import NOT_ASSESSABLE, Verdict, flipped, seed_claim, status_of
from .summary import AblationSummary, H5Verdict

TESTED = {"SUPPORTED": True, "NOT_SUPPORTED": False, "INCONCLUSIVE": False}
"""What each default-mode H5 result says of the claim (NOT_APPLICABLE, UNDETERMINED: not assessable)."""


def card_verdict(variant: str) -> str:
    """H5's name on the validation card for one quantization variant (its rate under permuted languages)."""
    return f"H5 [{variant}]"


def claims(result: StudyResult) -> list[Verdict]:
    """One verdict per model and variant; notebooks mode (or a result written before the interval): "not assessable",
    the notebook's result kept in the claim."""
    seed = result.config.get("compat") == NOTEBOOKS
    summary: AblationSummary = result.summary
    return [h5_claim(result.study, model, label, v["verdicts"]["h5"], seed)
            for model, s in summary["models"].items() for label, v in s["variants"].items()]


def h5_claim(study: str, model: str, variant: str, h5: H5Verdict, seed: bool = False) -> Verdict:
    claim = f"H5 [{variant}]: protecting the first and last layers cuts the disparity by > 30%"
    result = h5["result"]
    if seed or (result in TESTED and "ci" not in h5):
        return Verdict(study, model, seed_claim(claim, result, seed), NOT_ASSESSABLE, reduction_text(h5))
    if result not in TESTED:
        return Verdict(study, model, f"{claim} ({result})", NOT_ASSESSABLE, reason_text(h5))
    flips = flipped(h5.get("checks"))
    key = with_card(reduction_text(h5), f"{study}: {card_verdict(variant)}", model)
    return Verdict(study, model, f"{claim} ({result})", status_of(TESTED[result], flips), key, flips)


def reduction_text(h5: H5Verdict) -> str:
    """``"reduction = +12.3% [+4.1%, +20.2%], threshold 30%"`` (without an interval: the point alone)."""
    if h5.get("reduction_pct") is None:
        return reason_text(h5)
    text = f"reduction = {h5['reduction_pct']:+.1f}%"
    ci = h5.get("ci")
    if ci is not None and None not in ci:
        text += f" [{ci[0]:+.1f}%, {ci[1]:+.1f}%], threshold {h5.get('threshold', 30):g}%"
    return text


def reason_text(h5: H5Verdict) -> str:
    """Why there is no reduction to test: ``"D_LR / D_HR = 0.50 <= 1"`` or the verdict's reason."""
    if h5["result"] == "NOT_APPLICABLE" and h5.get("all_quantized_ratio") is not None:
        return f"D_LR / D_HR = {h5['all_quantized_ratio']:.2f} <= 1 with every layer quantized"
    return str(h5.get("reason", ""))
