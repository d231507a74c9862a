"""The atlas's phase boundaries tested where the answer is known: planted changes, a plant that keeps the model's
function, profiles with no change, and the unplanted model's own boundaries.

    base = unplanted(lm, texts, n_resamples=100, seed=42)         # one atlas pass of the model, its boundaries
    rows = identity_rows(base, rng, instances=20)                 # k blocks that write nothing, at random places
    rows += scaled_rows(lm, base, texts, rng, instances=20)       # every write scaled from a random block on
    rows += null_rows(base, rng, instances=100)                   # straight lines plus the resamples' noise
    rows += recurrence_rows(base)                                 # each boundary of the full data, in the resamples
    rows += derived_check_rows(lm, base, texts, at=15, k=4)       # the derived planted pass against a real one

Every row is one instance of one check: ``check``, ``verdict`` ("atlas boundary"), ``metric`` (what the row
counts: ``power``, ``coverage``, ``kept``, ``false_alarm``, ``recurrence``, ``boundary_error``, ``derived_diff``),
``success`` (bool; for a numeric metric whether it meets its target) and ``value``, with the plant's parameters
(``zero_width``: a boundary's interval is a single layer only when no resample moved it).

**Where a planted change is.** k blocks that write nothing, inserted before block ``at``, make hidden states at ..
at + k one state: the transitions between them have block influence and angular distance exactly 0 and CKA 1, and
the band starts at layer ``at`` and ends at layer ``at + k`` (the first transition that writes again). A family on
hidden states may put the same change one layer later (the plateau's last state belongs to either segment), so a
planted change is found when a consensus boundary lies within one layer of it. A change between hidden states t and
t + 1 is placed at t (a family on transitions, or a fit that gives state t to the new segment) or at t + 1 (one that
gives it to the old): its interval covers it when the interval of the consensus boundary nearest to t or t + 1
(within the tolerance) holds t or t + 1. Every block from ``start`` on writing ``scale`` times its write changes the
similarity profile at transition ``start``.

**Reuse.** The inserted blocks write nothing, so every hidden state of the planted model is one of the unplanted
model's, and so is every per-text sum the atlas makes of it: the planted profiles are the unplanted ones with state
``at`` repeated k times and k identity transitions inserted (:func:`identity_profiles`); no forward pass per
instance. :func:`derived_check_rows` runs one real pass of a planted copy and records how far the derived profiles
are from it. Scaled writes change the model's output, and with it every layer's logit-lens KL to the final layer,
so each of those instances runs its own pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..engine.atlas.stream import AtlasPass, atlas_pass
from ..measures.boundaries import CONSENSUS, BoundaryFit, bootstrap_boundaries
from ..models.load import LoadedModel
from ..plant import inserted_identity, scaled_writes
from ..studies.atlas.boundaries import families_of, tolerance
from ..studies.atlas.resample import draw_weights, resampled_profiles

VERDICT = "atlas boundary"
FOUND_WITHIN = 1
"""Layers within which a consensus boundary finds a planted change (the state and transition families' offset)."""
IDENTITY_STEP = {"block_influence": 0.0, "angular_distance": 0.0, "cka_next": 1.0}
"""Each transition measure's value between two equal hidden states."""
BAND_SIZES = (2, 3, 4)
"""Inserted bands drawn: a band of one block is one identity transition, shorter than a segment of 2."""
SCALES = (0.5, 2.0)
"""Write scales drawn for the scaled-writes plant."""
SUPPORTED = 0.9
"""A boundary of the full data recurs when at least this share of resamples has it within the tolerance."""


@dataclass
class Base:
    """The unplanted model's pass, its resampled profiles and its boundaries."""

    p: AtlasPass
    profiles: dict[str, tuple[list[int], np.ndarray]]
    fit: BoundaryFit
    n_resamples: int
    seed: int

    @property
    def n_layers(self) -> int:
        return self.p.n_layers


def fit_profiles(profiles: dict, p: AtlasPass, n_layers: int) -> BoundaryFit:
    """The atlas's default boundary fit (no checks) of ``profiles`` on a model of ``n_layers`` blocks."""
    return bootstrap_boundaries(profiles, families_of(p), tolerance(n_layers), 2, per_measure=False)


def unplanted(lm: LoadedModel, texts: Sequence[str], n_resamples: int, seed: int) -> Base:
    p = atlas_pass(lm, list(texts), progress=False)
    profiles = resampled_profiles(p, draw_weights(p.n_texts, n_resamples, seed), 0, "mle", seed)
    return Base(p, profiles, fit_profiles(profiles, p, p.n_layers), n_resamples, seed)


def identity_profiles(profiles: dict[str, tuple[list[int], np.ndarray]], at: int,
                      k: int) -> dict[str, tuple[list[int], np.ndarray]]:
    """The profiles of the model with ``k`` blocks that write nothing inserted before block ``at``, from the
    unplanted model's (every layer's measure of the planted model is one of the unplanted model's): hidden-state
    measures repeat state ``at`` k times, transition measures get k identity transitions (:data:`IDENTITY_STEP`)
    at transition ``at``. ``profiles``: {measure: (layers 0.., values (R + 1, len(layers)))} with every layer."""
    out = {}
    n_states = max(len(layers) for layers, _ in profiles.values())
    for name, (layers, values) in profiles.items():
        values = np.asarray(values)
        if list(layers) != list(range(len(layers))):
            raise ValueError(f"{name}: the derivation needs every layer from 0, got {list(layers)[:5]}...")
        if len(layers) == n_states:
            new = np.concatenate([values[:, : at + 1], np.repeat(values[:, at : at + 1], k, axis=1),
                                  values[:, at + 1 :]], axis=1)
        elif name in IDENTITY_STEP:
            step = np.full((len(values), k), IDENTITY_STEP[name])
            new = np.concatenate([values[:, :at], step, values[:, at:]], axis=1)
        else:
            raise ValueError(f"{name} is measured on {len(layers)} of {n_states} layers; only the transition "
                             f"measures {', '.join(IDENTITY_STEP)} may be")
        out[name] = (list(range(new.shape[1])), new)
    return out


def _consensus(fit: BoundaryFit) -> list[dict]:
    return [b.__dict__ for b in fit.intervals if b.family == CONSENSUS]


def planted_rows(check: str, fit: BoundaryFit, truths: dict[str, int], tol: int, **extra) -> list[dict]:
    """Per planted change (``truths``: {name: t}, the change between hidden states t and t + 1, which a fit may
    place at layer t or t + 1): a consensus boundary within :data:`FOUND_WITHIN` of t (power); the boundary
    nearest to the change, i.e. to t or t + 1 (the lower on a tie), within ``tol``: its interval holds t or t + 1
    (coverage), its width, and how far it lies from t or t + 1 (boundary_error, when the change is found).

    The boundary scored is the one nearest to where a fit may place the change, t or t + 1, not to t alone: a
    fit that cuts a change into a two-layer segment puts boundaries at t - 1 and t + 1, and t + 1 is the one that
    places it (scoring t - 1, the lower of two equally near t, counted such changes uncovered)."""
    spans = _consensus(fit)
    rows = []
    for name, truth in truths.items():
        nearest = min((abs(s["value"] - truth) for s in spans), default=None)
        near = min(spans, key=lambda s, t=truth: (min(abs(s["value"] - t), abs(s["value"] - t - 1)), s["value"]),
                   default=None)
        off = None if near is None else min(abs(near["value"] - truth), abs(near["value"] - truth - 1))
        covered = near is not None and off <= tol and near["ci_lo"] <= truth + 1 and near["ci_hi"] >= truth
        found = nearest is not None and nearest <= FOUND_WITHIN
        common = {"check": check, "verdict": VERDICT, "change": name, "truth": truth, **extra}
        rows += [{**common, "metric": "power", "success": found, "value": nearest},
                 {**common, "metric": "coverage", "success": bool(covered),
                  "value": None if near is None else f"{near['ci_lo']}-{near['ci_hi']}"}]
        if found:
            rows += [{**common, "metric": "boundary_error", "success": True, "value": float(off)},
                     {**common, "metric": "interval_width", "success": True,
                      "value": float(near["ci_hi"] - near["ci_lo"])}]
    return rows


def identity_rows(base: Base, rng: np.random.Generator, instances: int) -> list[dict]:
    """Inserted bands at random places: both ends found and covered, and the unplanted model's own boundaries kept
    (each, mapped through the plant, within :data:`FOUND_WITHIN` of a consensus boundary)."""
    n = base.n_layers
    own = base.fit.consensus or []
    rows = []
    for i in range(instances):
        k = int(rng.choice(BAND_SIZES))
        at = int(rng.integers(2, n - 1))
        fit = fit_profiles(identity_profiles(base.profiles, at, k), base.p, n + k)
        extra = {"instance": i, "plant": "inserted_identity", "at": at, "k": k}
        rows += planted_rows("inserted identity blocks", fit, {"band start": at, "band end": at + k},
                             tolerance(n + k), **extra)
        found = fit.consensus or []
        for b in own:
            mapped = b if b <= at else b + k
            hit = any(abs(c - mapped) <= FOUND_WITHIN for c in found)
            rows.append({"check": "inserted identity blocks keep the model's own boundaries", "verdict": VERDICT,
                         "metric": "kept", "success": hit, "value": mapped, "own": b, **extra})
        planted = {at, at + k} | {b if b <= at else b + k for b in own}
        rows.append({"check": "inserted identity blocks add no other boundary", "verdict": VERDICT,
                     "metric": "extra", "success": not [c for c in found if min(abs(c - t) for t in planted) > 1],
                     "value": len([c for c in found if min(abs(c - t) for t in planted) > 1]), **extra})
    return rows


def scaled_rows(lm: LoadedModel, base: Base, texts: Sequence[str], rng: np.random.Generator,
                instances: int) -> list[dict]:
    """Every write scaled from a random block on, a real pass each: the onset found and covered."""
    n = base.n_layers
    rows = []
    for i in range(instances):
        start = int(rng.integers(3, n - 2))
        scale = float(rng.choice(SCALES))
        planted = scaled_writes(lm, start, scale)
        p = atlas_pass(planted, list(texts), progress=False)
        profiles = resampled_profiles(p, draw_weights(p.n_texts, base.n_resamples, base.seed), 0, "mle", base.seed)
        fit = fit_profiles(profiles, p, n)
        rows += planted_rows("scaled writes", fit, {"onset": start}, tolerance(n), instance=i,
                             plant="scaled_writes", at=start, scale=scale)
    return rows


def null_profiles(profiles: dict[str, tuple[list[int], np.ndarray]],
                  rng: np.random.Generator) -> dict[str, tuple[list[int], np.ndarray]]:
    """Profiles with no change: each measure's straight-line fit to the full data plus Gaussian noise with the
    resamples' covariance (jointly over layers and measures: every row is the resamples' deviations from their
    mean, weighted by one standard normal draw per resample over sqrt(R)), for the full data and each resample."""
    deviations = {m: v[1:] - v[1:].mean(axis=0) for m, (_, v) in profiles.items()}
    n_res = len(next(iter(deviations.values())))
    weights = rng.normal(size=(n_res + 1, n_res)) / np.sqrt(n_res)  # one draw per synthetic row, shared by measures
    out = {}
    for name, (layers, values) in profiles.items():
        full = values[0]
        x = np.arange(len(full), dtype=np.float64)
        slope, intercept = np.polyfit(x, full, 1)
        out[name] = (layers, intercept + slope * x + weights @ deviations[name])
    return out


def null_rows(base: Base, rng: np.random.Generator, instances: int) -> list[dict]:
    """Profiles with no change at the resamples' noise: a break anywhere is a false alarm."""
    rows = []
    usable = {m: v for m, v in base.profiles.items() if np.isfinite(v[1]).all()}
    for i in range(instances):
        fit = fit_profiles(null_profiles(usable, rng), base.p, base.n_layers)
        found = fit.consensus or []
        rows.append({"check": "profiles with no change", "verdict": VERDICT, "metric": "false_alarm",
                     "success": not found, "value": len(found), "instance": i})
    return rows


def recurrence_rows(base: Base) -> list[dict]:
    """Each consensus boundary of the unplanted model's full data: its support among the resamples (recurrence),
    and whether its interval is a single layer only when no resample moved it (zero_width)."""
    rows = []
    for b in _consensus(base.fit):
        common = {"verdict": VERDICT, "boundary": b["value"], "moved": b["moved"], "support": b["support"]}
        rows += [{**common, "check": "the unplanted model's boundaries recur in the resamples", "metric": "recurrence",
                  "success": b["support"] >= SUPPORTED, "value": b["support"]},
                 {**common, "check": "a zero-width interval only where no resample moved the boundary",
                  "metric": "zero_width", "success": not (b["ci_lo"] == b["ci_hi"] and b["moved"] > 0),
                  "value": f"{b['ci_lo']}-{b['ci_hi']}"}]
    return rows


def derived_check_rows(lm: LoadedModel, base: Base, texts: Sequence[str], at: int, k: int) -> list[dict]:
    """One real pass of a copy with ``k`` identity blocks before block ``at``: the largest difference between its
    resampled profiles and the derived ones (per measure), and its logit lens equal across the inserted blocks."""
    planted = inserted_identity(lm, at, k)
    p = atlas_pass(planted, list(texts), progress=False)
    real = resampled_profiles(p, draw_weights(p.n_texts, base.n_resamples, base.seed), 0, "mle", base.seed)
    derived = identity_profiles(base.profiles, at, k)
    rows = []
    for name, (_, values) in real.items():
        diff = float(np.nanmax(np.abs(values - derived[name][1])))
        rows.append({"check": "derived planted profiles equal a real pass", "verdict": VERDICT,
                     "metric": "derived_diff", "measure": name, "value": diff, "success": diff < 1e-3,
                     "at": at, "k": k})
    for name, values in p.lens.items():
        band = np.asarray(values)[at : at + k + 1]
        diff = float(np.max(np.abs(band - band[0])))
        rows.append({"check": "the logit lens is identical across inserted blocks", "verdict": "lens",
                     "metric": "lens_identical", "measure": name, "value": diff, "success": diff <= 1e-5,
                     "at": at, "k": k})
    return rows
