"""A run's summary table, one row per claim: which study, which model, the claim, its status, its key number and
the sensitivity checks that flip it. ``Study.verdicts(result)`` returns these rows; ``layerscope.report.html.
verdict_table`` draws them at the top of a run's index.html.

    Verdict("phases", "smollm2-135m", "late-layer inversion at layer 30", status_of(True, ["after the final norm"]),
            key_text("r", -0.45, (-0.6, -0.3), q=0.004), ("after the final norm",))
    status_of(True)                    # "holds and robust": holds after the study's multiple-comparison control
    status_of(True, ["without c3"])    # "holds but fragile": a sensitivity check flips it
    status_of(False)                   # "not significant": the test ran and the claim does not hold
    status_of(None)                    # "not assessable": no test possible (too few items, a notebooks-mode label)
    key_text("r", 0.669, (0.31, 0.88), q=0.012)   # "r = +0.669 [+0.310, +0.880], q = 0.012"
    flipped(checks)                    # the names of the checks (dicts with "check", "flips") that flip it

A verdict's ``row()`` is plain values (str and a tuple of str), so the page renderer never imports a study.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import LayerscopeError, short
from ..modes import NOTEBOOKS
from ..report.markdown import number, signed

STATUSES = ("holds and robust", "holds but fragile", "not significant", "not assessable")
"""Every status a verdict can have, in that order (from the strongest claim to none)."""
HOLDS_ROBUST, HOLDS_FRAGILE, NOT_SIGNIFICANT, NOT_ASSESSABLE = STATUSES
SEED_RULE = "the notebook's rule, no test"
"""Added to the claim of a ``--compat notebooks`` label: it is shown, but not assessed."""
UNTESTED = "written before its test"
"""Added to the claim of a label in a result.json written before layerscope tested it."""


class VerdictError(LayerscopeError):
    """A verdict with a status layerscope does not know, or a study's ``verdicts`` returning something else."""


@dataclass(frozen=True)
class Verdict:
    """One claim of one study about one model (``model`` "" where it is about the run as a whole)."""

    study: str
    model: str
    claim: str
    status: str
    """One of :data:`STATUSES`."""
    key: str = ""
    """The key number with its interval and q (or p), e.g. ``"r = +0.669 [+0.310, +0.880], q = 0.012"``."""
    flips: tuple[str, ...] = ()
    """The sensitivity checks under which the claim's status differs (for a significant claim: it is fragile)."""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise VerdictError(f"verdict status {short(self.status)} of study {short(self.study)} is not one of "
                               f"{', '.join(repr(s) for s in STATUSES)}; give one of them (status_of() derives it)")
        if isinstance(self.flips, str) or not all(isinstance(f, str) for f in self.flips):
            raise VerdictError(f"verdict flips {short(self.flips)} of study {short(self.study)} must be check names, "
                               "a tuple of str (e.g. ('without position 0',))")
        object.__setattr__(self, "flips", tuple(self.flips))
        for name in ("study", "model", "claim", "key"):
            object.__setattr__(self, name, str(getattr(self, name)))

    def row(self) -> tuple[str, str, str, str, str, tuple[str, ...]]:
        """(study, model, claim, status, key, flips): what :func:`layerscope.report.html.verdict_table` draws."""
        return self.study, self.model, self.claim, self.status, self.key, self.flips


def status_of(significant: bool | None, flips: Iterable[str] = ()) -> str:
    """The status of a claim: None (no test possible) -> not assessable; False -> not significant; True -> holds,
    robust when no check in ``flips`` flips it, else fragile."""
    if significant is None:
        return NOT_ASSESSABLE
    if not significant:
        return NOT_SIGNIFICANT
    return HOLDS_FRAGILE if list(flips) else HOLDS_ROBUST


def flipped(checks: Iterable[dict] | None, key: str = "flips") -> tuple[str, ...]:
    """The names of the checks whose ``key`` ("flips", or e.g. "late_flips") is true; () for None."""
    return tuple(str(c.get("check")) for c in checks or () if c.get(key))


def key_text(name: str, value: float | None, ci: Sequence[float | None] | None = None, q: float | None = None,
             p: float | None = None, digits: int = 3, interval: str = "", sign: bool = True) -> str:
    """``key_text("r", 0.669, (0.31, 0.88), q=0.012)`` -> ``"r = +0.669 [+0.310, +0.880], q = 0.012"``; a missing
    interval end, q or p is left out; ``interval`` names the interval when it is not the usual one (``"LOO range"``);
    ``sign``: show the sign of the value and the interval (False for a count or a depth)."""
    fmt = (lambda x: signed(x, digits)) if sign else (lambda x: number(x, digits))
    text = f"{name} = {fmt(value)}"
    if ci is not None and len(ci) == 2 and None not in ci:
        text += f", {interval} [{fmt(ci[0])}, {fmt(ci[1])}]" if interval else f" [{fmt(ci[0])}, {fmt(ci[1])}]"
    if q is not None:
        text += f", q = {number(q)}"
    elif p is not None:
        text += f", p = {number(p)}"
    return text


def seed_claim(claim: str, label: str, seed: bool = True) -> str:
    """A label without a test behind it, kept in the claim: ``"late layer 30: Negative trend in late layer (the
    notebook's rule, no test)"``; ``seed`` False: a default-mode result written before the label had its test."""
    return f"{claim}: {label} ({SEED_RULE if seed else UNTESTED})"


def each_model(result, tested: str, tested_claims: Callable, untested_claims: Callable) -> list[Verdict]:
    """Every model's verdicts: ``tested_claims(study, model, s)`` where its summary ``s`` holds the key ``tested``
    (the default rules ran), else ``untested_claims(study, model, s, seed)`` (notebooks mode, or a result written
    before the rules): the notebook's labels, not assessed."""
    seed = result.config.get("compat") == NOTEBOOKS
    out: list[Verdict] = []
    for model, s in result.summary["models"].items():
        out += tested_claims(result.study, model, s) if tested in s and not seed else \
            untested_claims(result.study, model, s, seed)
    return out

