"""The atlas study's rows of a run's summary table: per model, each consensus change point with its bootstrap
interval, support and the families that see it, fragile when one of the checks (without position 0 and the massive
tokens, without layer 0, segments of at least 3 layers) has no boundary within the tolerance of it. A change point
holds where its family's fit finds it at a penalty calibrated so that a profile with no change gets an extra break
about 5 % of the time (its measured false-alarm rate and power are in the validation card).

    claims(result)   # [Verdict("atlas", "smollm2-135m", "phase boundary 1 at layer 2 of 30 (lens, ...)", ...), ...]
"""

from __future__ import annotations

from ...study.result import StudyResult
from ...study.validated import note
from ...study.verdicts import NOT_ASSESSABLE, NOT_SIGNIFICANT, Verdict, status_of
from .boundaries import VARIANTS
from .summary import AtlasModel, AtlasSummary


def claims(result: StudyResult) -> list[Verdict]:
    """One verdict per consensus boundary and model ("not assessable" where no family had enough finite layers,
    "not significant" where no profile changes course beyond its noise)."""
    summary: AtlasSummary = result.summary
    out = []
    for model, s in summary["models"].items():
        out += model_claims(result.study, model, s)
    return out


def model_claims(study: str, model: str, s: AtlasModel) -> list[Verdict]:
    b = s["boundaries"]
    if b.get("consensus") is None:
        return [Verdict(study, model, "phase boundaries (change points of the measure families)", NOT_ASSESSABLE,
                        "no family of measures had enough finite layers")]
    if not b["consensus"]:
        return [Verdict(study, model, "phase boundaries (change points of the measure families)", NOT_SIGNIFICANT,
                        "no profile changes course beyond its resamples' noise")]
    spans = {x["index"]: x for x in b.get("intervals", []) if x.get("family") == "consensus"}
    moved, fragile, tol = b.get("moved"), b.get("fragile"), b.get("tolerance")
    card = note("atlas boundary", model) if "seen_by" in b else ""  # the card measured this method, not the older
    seen = b.get("seen_by") or [[] for _ in b["consensus"]]
    out = []
    for k, layer in enumerate(b["consensus"]):
        families = f" ({', '.join(seen[k])})" if seen[k] else ""
        claim = f"phase boundary {k + 1} at layer {layer} of {s['n_layers']}{families}"
        key = span_text(layer, spans.get(k + 1)) + (f"; {card}" if card else "")
        if moved is not None and tol is not None and k < len(moved):
            flips = tuple(VARIANTS.get(v, v) for v, shift in moved[k].items()
                          if shift is not None and abs(shift) > tol
                          or shift is None and (b.get("variants", {}).get(v) or {}).get("consensus") == [])
        elif fragile is not None and k < len(fragile):
            flips = ("one of the checks",) if fragile[k] else ()
        else:  # a result without the checks: no way to say whether it is robust
            out.append(Verdict(study, model, claim, NOT_ASSESSABLE, key))
            continue
        out.append(Verdict(study, model, claim, status_of(True, flips), key, flips))
    return out


def span_text(layer: int, span: dict | None) -> str:
    """``"layer 3 [2-5], support 0.82"``: the boundary with its bootstrap interval, support and (when some resample
    put it elsewhere) how many did."""
    if span is None:
        return f"layer {layer}"
    moved = span.get("moved")
    tail = f", moved in {moved} of {span['n']} resamples" if moved else ""
    return f"layer {layer} [{span['ci_lo']}-{span['ci_hi']}], support {span['support']:.2f}{tail}"
