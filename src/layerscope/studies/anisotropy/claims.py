"""The anisotropy study's rows of a run's summary table: per model, whether the top-1 share profile is a bell curve
around L* (its two slopes with their q) and where L* is (fragile when a token set or the final norm moves it).

    claims(result)   # [Verdict("anisotropy", "smollm2-135m", "bell curve of the top-1 share around L* = 12", ...)]
"""

from __future__ import annotations

from ...report.markdown import number
from ...study.result import StudyResult
from ...study.verdicts import NOT_ASSESSABLE, Verdict, each_model, flipped, seed_claim, status_of
from .analysis import slope_text
from .summary import AnisotropyModel, Bell, headline_set


def claims(result: StudyResult) -> list[Verdict]:
    """Two verdicts per model: the bell curve and L*; notebooks mode (or a result written before the default rules):
    both "not assessable", the notebook's labels kept in the claims."""
    return each_model(result, "bell_verdict", model_claims, untested_claims)


def model_claims(study: str, model: str, s: AnisotropyModel) -> list[Verdict]:
    t = headline_set(s)
    bell, star = t["bell"], t["l_star"]
    checks = s.get("checks")
    bell_flips, moves = flipped(checks, "bell_flips"), flipped(checks, "l_star_moves")
    assessable = bool(bell.get("assessable"))
    significant = bool(bell["is_bell_curve"]) if assessable else None
    driver = f" (driver: {s['driver']['label']})" if s.get("driver") else ""
    stage = ", before the final norm" if s.get("l_star_stage") else ""
    bell_claim = f"bell curve of the top-1 share around L* = {star}"
    return [Verdict(study, model, bell_claim, status_of(significant, bell_flips),
                    slopes_text(bell) if assessable else short_sides(bell), bell_flips if assessable else ()),
            Verdict(study, model, f"L* = {star} of {s['n_layers']}{stage}{driver}", status_of(True, moves),
                    star_text(star, s["n_layers"], bell), moves)]


def untested_claims(study: str, model: str, s: AnisotropyModel, seed: bool) -> list[Verdict]:
    t = headline_set(s)
    bell = "bell curve" if t["bell"]["is_bell_curve"] else "not a bell curve"
    return [Verdict(study, model, seed_claim("bell curve of the top-1 share around L*", bell, seed), NOT_ASSESSABLE,
                    f"slopes {slope_text(t['bell'].get('phase1_slope'))}, {slope_text(t['bell'].get('phase2_slope'))}"
                    " per layer"),
            Verdict(study, model, seed_claim("L*", f"layer {t['l_star']} of {s['n_layers']}", seed), NOT_ASSESSABLE,
                    star_text(t["l_star"], s["n_layers"], t["bell"]))]


def slopes_text(bell: Bell) -> str:
    """``"rise +0.0123 per layer (q = 0.004), fall -0.0201 (q = 0.002)"``."""
    return (f"rise {slope_text(bell.get('phase1_slope'))} per layer (q = {number(bell.get('phase1_q'))}), "
            f"fall {slope_text(bell.get('phase2_slope'))} (q = {number(bell.get('phase2_q'))})")


def short_sides(bell: Bell) -> str:
    """``"1 layer before L*, 29 from L* on (needs 3 each)"``: why the bell test is not assessable."""
    if "phase1_n" not in bell:
        return ""
    return (f"{bell['phase1_n']} layer(s) before L*, {bell['phase2_n']} from L* on (needs {bell.get('min_layers')} "
            "each)")


def star_text(star: int, n_layers: int, bell: Bell) -> str:
    """``"40% depth, top-1 share 0.996"``."""
    return f"{100 * star / n_layers:.0f}% depth, top-1 share {number(bell.get('max_value'))}"
