"""The phases study's rows of a run's summary table: per model, the phase pattern (early/mid/late means with their
bootstrap intervals) and the late-layer inversion at the last tested layer (r with its interval and q), each with
the sensitivity checks that flip it.

    claims(result)   # [Verdict("phases", "smollm2-135m", "phase pattern: LATE_INVERSION ...", ...), ...]
"""

from __future__ import annotations

from ...study.result import StudyResult
from ...study.verdicts import NOT_ASSESSABLE, Verdict, each_model, flipped, key_text, seed_claim, status_of
from .summary import PhaseMean, PhasesModel

PHASES = ("early", "mid", "late")
NAMED = ("PYTHIA_PATTERN", "LATE_INVERSION", "DECOUPLED")
PATTERN_TESTED = {**dict.fromkeys(NAMED, True), "NO_PATTERN": False}
"""What each default-mode pattern label says of the claim "a pattern" (any other label: not assessable)."""
LATE_TESTED = {"CONFIRMED": True, "NOT_SIGNIFICANT": False, "NO_INVERSION": False}
"""What each late-layer label says of the claim "an inversion" (NOT_ASSESSABLE: not assessable)."""
PATTERN = "phase pattern (PYTHIA_PATTERN, LATE_INVERSION or DECOUPLED)"


def claims(result: StudyResult) -> list[Verdict]:
    """Two verdicts per model; notebooks mode (or a result written before the interval rule): both "not assessable",
    the notebook's labels kept in the claims."""
    return each_model(result, "late_label", model_claims, untested_claims)


def model_claims(study: str, model: str, s: PhasesModel) -> list[Verdict]:
    checks = s.get("checks")
    pattern_flips, late_flips = flipped(checks, "pattern_flips"), flipped(checks, "late_flips")
    named = s["pattern"] in NAMED
    pattern = f"phase pattern: {s['pattern']} ({s['pattern_text']})" if named else PATTERN
    means = "; ".join(key_text(phase, s["phases"][phase]["mean"], interval_of(s["phases"][phase]), digits=2)
                      for phase in PHASES)
    stage = ", before the final norm" if s.get("final_stage") == "pre_norm" else ""
    late = f"late-layer inversion (r < -0.1) at the last tested layer {s['final_layer']}{stage}"
    final = key_text("r", s.get("final_r"), s.get("final_ci"), q=s.get("final_q"))
    return [Verdict(study, model, pattern, status_of(PATTERN_TESTED.get(s["pattern"]), pattern_flips), means,
                    pattern_flips if s["pattern"] in PATTERN_TESTED else ()),
            Verdict(study, model, late, status_of(LATE_TESTED.get(s["late_label"]), late_flips), final,
                    late_flips if s["late_label"] in LATE_TESTED else ())]


def untested_claims(study: str, model: str, s: PhasesModel, seed: bool) -> list[Verdict]:
    means = "; ".join(key_text(phase, s["phases"][phase]["mean"], digits=2) for phase in PHASES)
    return [Verdict(study, model, seed_claim("phase pattern", s["pattern"], seed), NOT_ASSESSABLE, means),
            Verdict(study, model, seed_claim(f"late layer {s['final_layer']}", s["late_inversion"], seed),
                    NOT_ASSESSABLE, key_text("r", s.get("final_r")))]


def interval_of(p: PhaseMean) -> tuple[float | None, float | None]:
    return p.get("ci_lo"), p.get("ci_hi")
