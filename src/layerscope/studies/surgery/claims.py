"""The surgery study's rows of a run's summary table: per model, which blocks are critical when skipped (fragile
when a critical block does not raise NLL in both halves of the texts), whether block influence predicts the skip
cost (fragile when leaving out the first and last block flips it), whether ShortGPT's pruning rule beats random
sets, and whether the phase boundaries hold causally (the given ones, else this run's change points, else thirds).

    claims(result)   # [Verdict("surgery", "smollm2-135m", "blocks critical when skipped: 0, 29", ...), ...]
"""

from __future__ import annotations

from ...report.markdown import bits, number, signed
from ...study.result import StudyResult
from ...study.validated import note
from ...study.verdicts import NOT_ASSESSABLE, Verdict, key_text, status_of
from .report import BOUNDARY_SETS

LISTED = 6
"""Critical blocks named in the claim; the rest are counted."""
SPLIT_HALF = "split halves of the texts"
INTERIOR = "without the first and last block"


def claims(result: StudyResult) -> list[Verdict]:
    """Up to four verdicts per model, one for each part the run measured."""
    out = []
    for model, s in result.summary["models"].items():
        for part in (critical_claim, influence_claim, pruning_claim, boundary_claim):
            verdict = part(result.study, model, s)
            if verdict is not None:
                out.append(verdict)
    return out


def critical_claim(study: str, model: str, s: dict) -> Verdict | None:
    """Holds when a block's skip raises NLL with BH q < 0.05; fragile when one of them does not raise the mean NLL
    in both halves of the texts."""
    c = s.get("critical")
    if c is None:
        return None
    layers, both = c["layers"], set(c.get("in_both_halves", c["layers"]))
    named = ", ".join(map(str, layers[:LISTED])) + (f" and {len(layers) - LISTED} more" if len(layers) > LISTED
                                                    else "")
    claim = f"blocks critical when skipped: {named or 'none'}"
    key = f"{len(layers)} of {s['n_layers']} blocks at q < 0.05; {len(both & set(layers))} in both halves"
    card = note("surgery", model, ("false_alarm",))
    key += f"; {card}" if card else ""
    flips = (f"{SPLIT_HALF} (blocks {', '.join(str(b) for b in layers if b not in both)})",) \
        if set(layers) - both else ()
    return Verdict(study, model, claim, status_of(bool(layers), flips), key, flips)


def influence_claim(study: str, model: str, s: dict) -> Verdict | None:
    """Holds when block influence's Spearman rho with the skip cost is positive with q < 0.05 (BH over the two
    measures); fragile when the check without the first and last block flips it."""
    g = s.get("geometry", {}).get("block_influence")
    if g is None:
        return None
    claim = "block influence predicts the skip cost"
    key = key_text("rho", g.get("rho"), q=g.get("q"))
    if g.get("rho") is None:
        return Verdict(study, model, claim, NOT_ASSESSABLE, g.get("note", ""))
    predicts = bool(g["predicts"])
    flips = (INTERIOR,) if g.get("rho_interior") is not None and bool(g.get("predicts_interior")) != predicts else ()
    return Verdict(study, model, claim, status_of(predicts, flips), key, flips)


def pruning_claim(study: str, model: str, s: dict) -> Verdict | None:
    """Holds when ShortGPT's rule (prune the lowest block influence) ranks below random sets over every k (one
    rank-sum test)."""
    entry = s.get("pruning", {}).get("rules", {}).get("block_influence")
    if entry is None:
        return None
    ks = s["pruning"]["k"]
    claim = f"pruning by lowest block influence (ShortGPT) beats random sets, k = 1..{ks[-1] if ks else 0}"
    p = entry.get("overall_p")
    if p is None or "better_overall" not in entry:
        return Verdict(study, model, claim, NOT_ASSESSABLE, "")
    better = [k for k, b in zip(ks, entry.get("better_than_random", []), strict=False) if b]
    key = f"rank-sum p = {number(p)}; {len(better)} of {len(ks)} k beat random after BH"
    return Verdict(study, model, claim, status_of(bool(entry["better_overall"])), key)


def boundary_claim(study: str, model: str, s: dict) -> Verdict | None:
    """Holds when skipping the blocks beside the boundaries costs more than skipping other interior blocks
    (placement permutation test); the boundaries given with --boundaries, else this run's change points, else the
    thirds."""
    sets = s.get("boundaries") or {}
    name = next((n for n in ("given", "change_points", "thirds") if n in sets), None)
    if name is None:
        return None
    b = sets[name]
    states = ", ".join(map(str, b.get("states", [])))
    claim = f"skipping the blocks beside {BOUNDARY_SETS.get(name, name)} ({states}) costs more than other blocks"
    if b.get("effect") is None or "holds" not in b:
        return Verdict(study, model, claim, NOT_ASSESSABLE, f"{len(b.get('blocks', []))} boundary block(s) of "
                                                            f"{s['n_layers']}: no placement to test")
    return Verdict(study, model, claim, status_of(bool(b["holds"])),
                   f"effect = {signed(bits(b['effect']))} bits/token, permutation p = {number(b.get('p'))}")
