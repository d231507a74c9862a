"""The atlas study's rows of a run's summary table: per model, each consensus phase boundary with its bootstrap
interval and support, fragile when one of the checks (without position 0 and the massive tokens, without layer 0,
segments of at least 3 layers) moves it by more than the tolerance. The boundaries are descriptive (no p-value):
a boundary "holds" where the fit finds it.

    claims(result)   # [Verdict("atlas", "smollm2-135m", "phase boundary 1 at layer 3 of 30", ...), ...]
"""

from __future__ import annotations

from ...study.result import StudyResult
from ...study.verdicts import NOT_ASSESSABLE, Verdict, status_of
from .boundaries import VARIANTS
from .summary import AtlasModel, AtlasSummary


def claims(result: StudyResult) -> list[Verdict]:
    """One verdict per consensus boundary and model ("not assessable" where no family had enough finite layers)."""
    summary: AtlasSummary = result.summary
    out = []
    for model, s in summary["models"].items():
        out += model_claims(result.study, model, s)
    return out


def model_claims(study: str, model: str, s: AtlasModel) -> list[Verdict]:
    b = s["boundaries"]
    if not b.get("consensus"):
        return [Verdict(study, model, "phase boundaries (consensus of the measure families)", NOT_ASSESSABLE,
                        "no family of measures had enough finite layers")]
    spans = {x["index"]: x for x in b.get("intervals", []) if x.get("family") == "consensus"}
    moved, fragile, tol = b.get("moved"), b.get("fragile"), b.get("tolerance")
    out = []
    for k, layer in enumerate(b["consensus"]):
        claim = f"phase boundary {k + 1} at layer {layer} of {s['n_layers']}"
        key = span_text(layer, spans.get(k + 1))
        if moved is not None and tol is not None and k < len(moved):
            flips = tuple(VARIANTS.get(v, v) for v, shift in moved[k].items() if shift is not None and abs(shift) > tol)
        elif fragile is not None and k < len(fragile):
            flips = ("one of the checks",) if fragile[k] else ()
        else:  # a result without the checks: no way to say whether it is robust
            out.append(Verdict(study, model, claim, NOT_ASSESSABLE, key))
            continue
        out.append(Verdict(study, model, claim, status_of(True, flips), key, flips))
    return out


def span_text(layer: int, span: dict | None) -> str:
    """``"layer 3 [2-5], support 0.82"``: the boundary with its bootstrap interval and support."""
    if span is None:
        return f"layer {layer}"
    return f"layer {layer} [{span['ci_lo']}-{span['ci_hi']}], support {span['support']:.2f}"
