"""The causal tests' passes: per state, every contrast's directions removed, swapped and pushed on its held-out texts.

    contrasts = [Contrast(task, X, chosen_c, checks={...}), ...]
    out = run_causal(lm, contrasts, options)      # {contrast name: {"records": [...], "split": ..., "checks": ...}}

One :class:`~layerscope.engine.interventions.edit_scores.Interventions` object holds every contrast's held-out texts,
and each edit gives every text its own contrast's vector, so one pass tests all contrasts at once. Per state s (0, k,
2k, ... and L; ``every``) the passes are: removal of u (or the LEACE eraser), removal of each null direction, the
interchange, steering along u and along the logistic direction at +-alpha * r_s for every alpha, steering along
each null direction at +-test_alpha * r_s, and (s >= 1) block s - 1 skipped. r_s is the mean per-token residual
norm at state s over the contrast's training texts (position 0 left out unless ``include_pos0``). Every edit
leaves position 0 alone unless ``include_pos0``. The removal pass also keeps the pooled held-out states at every
later state tested, so the drop of the logistic probe's accuracy there is measured (the information gone, or made
again downstream). Then, at each contrast's state with the smallest removal p and at its smallest steering p, the
removal and the steering at the tested alpha are run again as the checks of :data:`CHECKS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from ...engine.interventions.edit_scores import Interventions, add, oblique, project_out, set_component, token_norms
from ...progress import steps
from .causal_design import Directions, Split, leace_eraser, null_labels, split_contrast, state_directions
from .causal_record import LEVEL, Texts, finish_q, rec, skip_records, state_records, tested
from .causal_stats import unit_ci
from .labels import LabelTask

CHECKS = {"with position 0": ("mean", True), "without massive-activation tokens": ("mean_no_massive", False)}
"""{check: (pooling of the direction, position 0 edited too)}: beside every causal verdict."""
CHECK_NULLS = 2
"""Null directions the position-0 check measures anew (its edits touch position 0, so the main run's null does not
serve); the other check reuses the main run's."""


@dataclass(frozen=True)
class CausalOptions:
    alphas: tuple[float, ...]
    test_alpha: float
    n_null: int
    holdout: float
    max_units: int
    n_bootstrap: int
    ci_level: float
    seed: int
    every: int = 10
    batch_size: int | None = None
    max_length: int | None = None
    prefix_reuse: bool = True
    include_pos0: bool = False
    erasure: str = "projection"
    probe_drop: bool = True
    """Keep the pooled states under each removal and measure the probes' drop downstream (the probes must read
    ``mean_no_pos0``, the pooling the engine keeps)."""
    timings: dict[str, float] | None = field(default=None, compare=False, repr=False)


@dataclass
class Contrast:
    """One two-class task with its pooled states: ``X`` (n, S, d) the probes' pooling, ``chosen_c`` (S,) the
    logistic probe's C per state, ``checks`` {pooling: (n, S, d)} the poolings :data:`CHECKS` read."""

    task: LabelTask
    X: np.ndarray
    chosen_c: np.ndarray
    checks: dict[str, np.ndarray] = field(default_factory=dict)


def causal_states(n_states: int, every: int) -> list[int]:
    """States 0, every, 2 * every, ... and the last."""
    return sorted({*range(0, n_states, every), n_states - 1})


@dataclass
class Layout:
    """Several contrasts' texts (held-out or training) side by side: what one Interventions object scores. A text's
    partner is scored with it (on their differing part) only when the two are a pair of the contrast's two
    classes (a side's A and B), not when they merely share a group (a pair's two texts of one category)."""

    texts: list[str]
    partners: np.ndarray
    contrast: np.ndarray
    """(n,) index into the contrasts."""
    rows: np.ndarray
    """(n,) the text's row in its task."""
    is_a: np.ndarray
    unit: np.ndarray
    """(n,) the unit within its contrast, 0..U-1."""

    @classmethod
    def of(cls, contrasts: list[Contrast], splits: list[Split], which: str = "test") -> Layout:
        texts, partners, contrast, rows, is_a, unit = [], [], [], [], [], []
        for c, (con, split) in enumerate(zip(contrasts, splits, strict=True)):
            chosen = getattr(split, which)
            where = {int(r): len(texts) + i for i, r in enumerate(chosen)}
            p = con.task.partners
            paired = [p is not None and p[r] >= 0 and split.is_a[r] != split.is_a[p[r]] for r in chosen]
            partners += [where.get(int(p[r]), -1) if both else -1 for r, both in zip(chosen, paired, strict=True)]
            texts += [con.task.texts[r] for r in chosen]
            contrast += [c] * len(chosen)
            rows += [int(r) for r in chosen]
            is_a += [bool(x) for x in split.is_a[chosen]]
            unit += list(np.unique(split.unit[chosen], return_inverse=True)[1])
        return cls(texts, np.array(partners, dtype=np.int64), np.array(contrast, dtype=np.int64),
                   np.array(rows, dtype=np.int64), np.array(is_a, dtype=bool), np.array(unit, dtype=np.int64))

    def texts_of(self, c: int, intact: np.ndarray) -> Texts:
        keep = self.contrast == c
        return Texts(self.is_a[keep], self.unit[keep], intact[keep])


def run_causal(lm, contrasts: list[Contrast], options: CausalOptions, model_name: str = "") -> dict[str, dict]:
    """Every contrast's removal, interchange, steering and skip records per state, and its checks."""
    start = time.perf_counter()
    splits = [split_contrast(c.task, options.holdout, options.max_units, options.seed) for c in contrasts]
    nulls = [null_labels(s, options.n_null, options.seed + 1 + i) for i, s in enumerate(splits)]
    states = causal_states(contrasts[0].X.shape[1], options.every)
    r = residual_norms(lm, contrasts, splits, options)                                   # (C, S)
    lay = Layout.of(contrasts, splits)
    iv = Interventions(lm, lay.texts, partners=lay.partners, include_pos0=options.include_pos0,
                       batch_size=options.batch_size, max_length=options.max_length)
    intact = iv.intact()
    rng = np.random.default_rng(options.seed + 7)
    records: list[list[dict]] = [[] for _ in contrasts]
    null_deltas: list[dict[int, dict]] = [{} for _ in contrasts]
    for s in steps(states, f"probe {model_name}: removal, interchange and steering per state", "state"):
        dirs = [state_directions(con.X[:, s], split, con.chosen_c[s], null)
                for con, split, null in zip(contrasts, splits, nulls, strict=True)]
        erasers = ([leace_eraser(con.X[:, s], split) for con, split in zip(contrasts, splits, strict=True)]
                   if options.erasure == "leace" else None)
        later = [t for t in states if t >= s] if options.probe_drop else []
        deltas, captured = measure_state(iv, lay, s, dirs, r[:, s], options, intact, erasers, capture=later)
        skipped = iv.skip(s - 1) - intact if s >= 1 else None
        for c in range(len(contrasts)):
            keep, texts = lay.contrast == c, lay.texts_of(c, intact)
            mine = {key: delta[keep] for key, delta in deltas.items()}
            null_deltas[c][s] = {key: delta for key, delta in mine.items() if key[0].endswith("_null")}
            records[c] += state_records(s, mine, texts, dirs[c], steer_plan(options), options.test_alpha,
                                        options.n_bootstrap, options.ci_level, rng, float(r[c, s]))
            records[c] += drop_records(s, contrasts[c], splits[c], lay.rows[keep], texts,
                                       {t: x[keep] for t, x in captured.items()}, options, rng)
            if skipped is not None:
                records[c] += skip_records(s, skipped[keep], texts, options.n_bootstrap, options.ci_level, rng)
    main_s = time.perf_counter() - start
    out = {}
    for c, con in enumerate(contrasts):
        finish_q(records[c])
        out[con.task.name] = {"records": records[c], "split": splits[c], "r": r[c],
                              "checks": run_checks(lm, con, splits[c], nulls[c], r[c], records[c], options, rng,
                                                   null_deltas[c])}
    if options.timings is not None:
        spent = time.perf_counter() - start
        for key, value in (("causal_s", spent), ("causal_checks_s", spent - main_s)):
            options.timings[key] = round(options.timings.get(key, 0.0) + value, 3)
        options.timings["causal_blocks_run"] = options.timings.get("causal_blocks_run", 0) + iv.blocks_run
    return out


def residual_norms(lm, contrasts: list[Contrast], splits: list[Split], options: CausalOptions) -> np.ndarray:
    """(C, S) r_s per contrast: the mean per-token residual norm at each state over its training texts."""
    train = Layout.of(contrasts, splits, "train")
    sums, counts = token_norms(lm, train.texts, include_pos0=options.include_pos0, batch_size=options.batch_size,
                               max_length=options.max_length)
    return np.stack([sums[train.contrast == c].sum(axis=0) / counts[train.contrast == c].sum()
                     for c in range(len(contrasts))])


def per_text(values, contrast: np.ndarray) -> np.ndarray:
    """Per-contrast values (C, ...) as per-text rows (n, ...)."""
    return np.asarray(values)[contrast]


def measure_state(iv: Interventions, lay: Layout, s: int, dirs: list[Directions], r: np.ndarray,
                  options: CausalOptions, intact: np.ndarray, erasers=None, capture=(), steer=None,
                  nulls: bool = True, interchange: bool = True) -> tuple[dict, dict]:
    """Every pass at state s: ({edit key: (n,) NLL change per text}, {later state: (n, d) pooled states under the
    removal}). ``steer`` {direction: alphas} (default :func:`steer_plan`); ``nulls`` False leaves the null
    directions out (a check that reuses the main run's)."""
    u = per_text([d.u for d in dirs], lay.contrast)
    vectors = {"mass_mean": u, "logistic": per_text([d.w for d in dirs], lay.contrast)}
    scale = np.asarray(r)[lay.contrast][:, None]
    if erasers is None:
        remove = project_out(u)
    else:
        remove = oblique(*(per_text([e[i] for e in erasers], lay.contrast) for i in range(3)))
    keys, edits = [], []
    for k in range(len(dirs[0].nulls) if nulls else 0):
        null = per_text([d.nulls[k] for d in dirs], lay.contrast)
        keys.append(("remove_null", k))
        edits.append(project_out(null))
        for sign in (1, -1):
            keys.append(("steer_null", k, sign * options.test_alpha))
            edits.append(add(sign * options.test_alpha * scale * null))
    if interchange:
        targets = np.where(lay.is_a, per_text([d.target_b for d in dirs], lay.contrast),
                           per_text([d.target_a for d in dirs], lay.contrast))
        keys.append(("interchange",))
        edits.append(set_component(u, targets))
    for name, alphas in (steer or steer_plan(options)).items():
        for alpha in alphas:
            for sign in (1, -1):
                keys.append(("steer", name, sign * alpha))
                edits.append(add(sign * alpha * scale * vectors[name]))
    captured = {}
    if capture:
        nll, pooled = iv.run(s, [remove], capture=tuple(capture), prefix_reuse=options.prefix_reuse)
        captured = {t: pooled[0, i] for i, t in enumerate(capture)}
    else:
        nll = iv.run(s, [remove], prefix_reuse=options.prefix_reuse)
    deltas = {("remove",): nll[0] - intact}
    for key, row in zip(keys, iv.run(s, edits, prefix_reuse=options.prefix_reuse), strict=True):
        deltas[key] = row - intact
    return deltas, captured


def steer_plan(options: CausalOptions) -> dict[str, tuple[float, ...]]:
    """{direction: the alphas it is pushed at}: the mass-mean direction over the whole grid (the dose-response),
    the logistic direction at the tested alpha."""
    return {"mass_mean": tuple(options.alphas), "logistic": (options.test_alpha,)}


def drop_records(s: int, con: Contrast, split: Split, rows: np.ndarray, texts: Texts, captured: dict,
                 options: CausalOptions, rng) -> list[dict]:
    """For each later state t: the held-out accuracy of the logistic probe fitted at t on the intact training rows,
    intact (from the probes' pooled states) less under the removal at s (the pooled states the pass kept). Only
    when the probes read ``mean_no_pos0``, the pooling the engine keeps."""
    out = []
    for t, removed in captured.items():
        xt = np.asarray(con.X[split.train, t], dtype=np.float64)
        scaler = StandardScaler().fit(xt)
        model = LogisticRegression(C=float(con.chosen_c[t]), max_iter=1000)
        model.fit(scaler.transform(xt), split.is_a[split.train])
        hit_intact = model.predict(scaler.transform(np.asarray(con.X[rows, t], np.float64))) == texts.is_a
        hit_removed = model.predict(scaler.transform(np.asarray(removed, np.float64))) == texts.is_a
        drop = hit_intact.astype(float) - hit_removed.astype(float)
        per_unit = np.array([drop[texts.unit == g].mean() for g in range(int(texts.unit.max()) + 1)])
        out.append(rec(s, "remove", "probe_drop", float(drop.mean()),
                       unit_ci(per_unit, options.n_bootstrap, options.ci_level, rng), n=len(per_unit), at_state=t,
                       intact=float(hit_intact.mean()), removed=float(hit_removed.mean())))
    return out


def run_checks(lm, con: Contrast, split: Split, nulls: np.ndarray, r: np.ndarray, records: list[dict],
               options: CausalOptions, rng, main_nulls: dict[int, dict]) -> list[dict]:
    """For each test that holds (at some state, q < 0.05), at its state of the smallest q: the removal and the
    mass-mean steering at the tested alpha again, with the direction of each check of :data:`CHECKS`. With
    position 0 edited, the null directions are edited there too and measured anew; the check without massive
    tokens edits the same positions as the main run and reuses its null. A test that holds nowhere prints no
    label, so no check can flip one. One record per (check, test): {"check", "test", "state", "p", "value",
    "excess", "records"}."""
    picks = {}
    for method in ("remove", "steer"):
        rows = [row for row in tested(records, method, None if method == "remove" else "mass_mean")
                if row["q"] < LEVEL and row["excess"] > 0]
        if rows:
            picks[method] = min(rows, key=lambda row: (row["q"], row["p"], row["state"]))["state"]
    out = []
    if not picks:
        return out
    lay = Layout.of([con], [split])
    for check, (pooling, pos0) in CHECKS.items():
        X = con.checks.get(pooling)
        if X is None:
            continue
        iv = Interventions(lm, lay.texts, partners=lay.partners, include_pos0=pos0 or options.include_pos0,
                           batch_size=options.batch_size, max_length=options.max_length)
        intact = iv.intact()
        texts = lay.texts_of(0, intact)
        for s in sorted(set(picks.values())):
            d = state_directions(X[:, s], split, con.chosen_c[s], nulls[:CHECK_NULLS] if pos0 else nulls)
            deltas, _ = measure_state(iv, lay, s, [d], r[s:s + 1], options, intact, interchange=False,
                                      steer={"mass_mean": (options.test_alpha,)}, nulls=pos0)
            if not pos0:
                deltas.update(main_nulls[s])
            recs = state_records(s, deltas, texts, d, {"mass_mean": (options.test_alpha,)}, options.test_alpha,
                                 options.n_bootstrap, options.ci_level, rng, float(r[s]))
            for method, state in picks.items():
                if state != s:
                    continue
                row = next(x for x in recs if x["method"] == method and x["metric"] in ("damage", "sign_effect")
                           and x["p"] is not None)
                out.append({"check": check, "test": method, "state": s, "p": row["p"], "value": row["value"],
                            "excess": row["excess"], "records": [{**x, "check": check} for x in recs]})
    return out


__all__ = ["CHECKS", "CausalOptions", "Contrast", "causal_states", "rec", "run_causal"]
