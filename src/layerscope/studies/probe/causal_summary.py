"""What a contrast's causal records say, for the verdicts, the report and the headline.

    entry = causal_summary(result, options)
    entry["needed_states"], entry["steerable_states"], entry["remove_best"], entry["steer_best"], entry["checks"]

``needed`` at a state: removing the direction there costs the held-out texts' own continuations more than removing
the null directions does (one-sided sign-flip test over units, BH over the states tested, q < 0.05).
``steerable`` at a state: the sign-reversing part of pushing along the mass-mean direction at the tested alpha beats
the null directions' (the same test). Where nothing is significant, the smallest effect the test could have found
at 80 % power is what the report prints, never "not used".
"""

from __future__ import annotations

import numpy as np

from .causal_record import LEVEL, tested


def _float(x):
    return None if x is None or not np.isfinite(x) else float(x)


def best_row(rows: list[dict]) -> dict | None:
    """The tested row with the smallest q (ties: the smaller p, then the earlier state)."""
    return min(rows, key=lambda r: (r["q"], r["p"], r["state"])) if rows else None


def at(records: list[dict], state: int, method: str, metric: str, **match) -> dict | None:
    return next((r for r in records if r["state"] == state and r["method"] == method and r["metric"] == metric
                 and all(r.get(k) == v for k, v in match.items())), None)


def significant(rows: list[dict]) -> list[int]:
    return [int(r["state"]) for r in rows if r["q"] < LEVEL and r.get("excess", 0) > 0]


def causal_summary(result: dict, options) -> dict:
    records, split = result["records"], result["split"]
    remove, steer = tested(records, "remove"), tested(records, "steer", "mass_mean")
    logistic = tested(records, "steer", "logistic")
    out = {"classes": list(split.classes), "n_test_units": split.n_test_units, "n_train_units": split.n_train_units,
           "in_sample": split.in_sample, "states": sorted({r["state"] for r in remove}),
           "alphas": list(options.alphas), "test_alpha": options.test_alpha, "n_null": options.n_null,
           "erasure": options.erasure, "include_pos0": options.include_pos0,
           "needed_states": significant(remove), "steerable_states": significant(steer),
           "steerable_logistic": significant(logistic)}
    mde = {}
    tested_steer = {"direction": "mass_mean", "alpha": options.test_alpha}
    for name, rows, method, extra in (("remove", remove, "remove", {}), ("steer", steer, "steer", tested_steer)):
        values = [at(records, r["state"], method, "min_detectable", **extra) for r in rows]
        values = [v["value"] for v in values if v is not None and v["value"] is not None]
        mde[name] = [_float(min(values)), _float(max(values))] if values else [None, None]
        b = best_row(rows)
        if b is None:
            out[f"{name}_best"] = None
            continue
        s = b["state"]
        entry = {"state": s, "value": b["value"], "ci": [b["ci_lo"], b["ci_hi"]], "excess": b["excess"],
                 "p": b["p"], "q": b["q"], "min_detectable": (at(records, s, method, "min_detectable", **extra)
                                                             or {}).get("value")}
        if name == "remove":
            effect = at(records, s, "remove", "effect")
            entry["effect"], entry["effect_ci"] = effect["value"], [effect["ci_lo"], effect["ci_hi"]]
            null = at(records, s, "remove_null", "damage")
            entry["null_damage"], entry["null_band"] = null["value"], [null["ci_lo"], null["ci_hi"]]
        else:
            for key, metric_name in (("damage", "damage"), ("wrong_way_share", "wrong_way_share")):
                r = at(records, s, "steer", metric_name, direction="mass_mean", alpha=options.test_alpha)
                entry[key] = r["value"] if r else None
            slope = at(records, s, "steer", "slope", direction="mass_mean") or {}  # none with a single alpha
            entry["slope"], entry["slope_ci"] = slope.get("value"), [slope.get("ci_lo"), slope.get("ci_hi")]
            lg = next((r for r in logistic if r["state"] == s), None)
            entry["logistic_q"] = lg["q"] if lg else None
        out[f"{name}_best"] = entry
    out["min_detectable"] = mde
    out["checks"] = causal_checks(out, result["checks"])
    return out


def causal_checks(summary: dict, checks: list[dict]) -> list[dict]:
    """Per test, the checks that can flip its verdict: the re-runs of :data:`.causal_run.CHECKS` at the best state;
    for steering also the logistic direction and the dose-response (the slope's interval above 0)."""
    out = []
    for c in checks:
        holds = bool(summary[f"{'needed' if c['test'] == 'remove' else 'steerable'}_states"])
        found = c["p"] < LEVEL and c["excess"] > 0
        out.append({"check": c["check"], "test": c["test"], "state": c["state"], "p": c["p"], "excess": c["excess"],
                    "flips": holds != found})
    best = summary.get("steer_best")
    if best is not None:
        holds = bool(summary["steerable_states"])
        q = best.get("logistic_q")
        out.append({"check": "with the logistic direction", "test": "steer", "state": best["state"], "q": q,
                    "flips": q is not None and holds != (q < LEVEL)})
        lo = best["slope_ci"][0]
        if best["slope"] is not None:
            out.append({"check": "dose-response (slope of S over alpha above 0)", "test": "steer",
                        "state": best["state"], "slope": best["slope"],
                        "flips": holds and not (lo is not None and lo > 0)})
    return out
