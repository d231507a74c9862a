"""Divergence (seed 002): per layer and pooling, does the uniformity asymmetry of a category's
A vs B statements track the model's preference between them?

    ua = category_ua(run.a("mean"), run.b("mean"), cats, n_cat, layers)   # (n_cat, len(layers)), from ..categories
    pref = category_pref(run.pref, cats, n_cat)                              # (n_cat,)
    r, p = pearson(ua[:, j], pref)                                           # metric r_ua_pref at layer layers[j]
    summary, rows = analyse_model(run, run.layers, drop_category="numeric_vs_named")   # summary: DivergenceModel
    summary, rows = analyse_run(run, config)     # the same with the settings of a StudyConfig (Divergence.run)

By default the analysis runs on ``run.at_stage("pre_norm")`` (layer n_layers is the last block's output before the
final norm) and only on the tested layers; the headline is the last tested layer. Every r gets a permutation p, a
Fisher-z interval, a Benjamini-Hochberg q over the tested layers, a Spearman rho and an r with the summed-NLL
preference (length control). A label (ALIGNED, ...) is printed only where q < 1 - level; a category with leverage
replaces the Fisher-z interval by the leave-one-out range; sign changes are divergence points only where the two r
differ significantly; and the headline is recomputed under the sensitivity checks (:mod:`.checks`).
``compat="notebooks"`` writes r and p only, post-norm, with the notebook's labels and final layer, as the notebook does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...engine.forward.pooling import POOLINGS
from ...modes import NOTEBOOKS
from ...report.markdown import number, signed
from ...stats import dependent_r_test, pearson, sign_changes
from ...study.finite import check_rows, check_values, defined
from ...study.result import layer_row
from ...study.sensitivity import sign_flips
from ..shared.categories import category_pref, category_tests, category_ua
from ..shared.correlation import Significance, add_q, pearson_tests, spearman_tests
from ..shared.inputs import PairRun
from ..shared.length import length_control
from ..shared.subsets import in_subset, subset_name, with_stage
from .summary import DivergenceModel, PoolingTest, PoolingVerdict, SignChange, headline_entry
from .verdicts import interpret, verdict

if TYPE_CHECKING:
    from ...study.config import StudyConfig

VERDICT_METRICS = ("pref", "ua")
"""Table metrics every r, and so every verdict, is computed from. An r itself may be undefined (NaN in the table,
None in the summary, n/a in the report) where UA is the same in every category, e.g. at layer 0 with last-token
pooling when every statement ends in the same token; the verdicts skip such layers."""
SHARED_FIRST = "n/a: A and B share their first token"
SHARED_FIRST_WHY = ("every pair's A and B statements share their first token, so in a causal model their first-token "
                    "states are identical and UA is 0 by construction")


def sign_summary(layers: list[int], rs: list[float]) -> tuple[list[SignChange], str | None]:
    """Every sign change between consecutive tested layers, or which sign holds throughout; layers where r is
    undefined (NaN) are left out, so a change across one is between the defined layers either side."""
    kept = [i for i, r in enumerate(rs) if np.isfinite(r)]
    layers, rs = [layers[i] for i in kept], [rs[i] for i in kept]
    if not rs:
        return [], "undefined"
    points = [{"layer_before": layers[i], "layer_after": layers[i + 1], "r_before": rs[i], "r_after": rs[i + 1]}
              for i in sign_changes(rs)]
    if points:
        return points, None
    if all(r < 0 for r in rs):
        return points, "negative"
    if all(r > 0 for r in rs):
        return points, "positive"
    return points, "unclear"


def pooling_effect(r_mean: float | None, r_last: float | None) -> str:
    """The notebook's rule (notebooks mode): last vs mean pooling differ when their r differ by more than 0.2."""
    if r_mean is None or r_last is None:
        return "Undefined: the final-layer r of mean or last pooling is undefined."
    if r_last > r_mean + 0.2:
        return "Last-token embeddings correlate MORE with output than mean-pooled."
    if r_last < r_mean - 0.2:
        return "Last-token embeddings correlate LESS with output than mean-pooled."
    return "Pooling strategy has minimal effect on correlation."


def pooling_test(ua_mean: np.ndarray, ua_last: np.ndarray, pref: np.ndarray, mean: PoolingVerdict,
                 last: PoolingVerdict, level: float) -> tuple[PoolingTest, str]:
    """``test, text = pooling_test(ua_mean, ua_last, pref, verdicts["mean"], verdicts["last"], 0.95)``: do
    r(UA_last, pref) and r(UA_mean, pref) differ at the headline layer? Williams' t (the two r share pref;
    r_xz = r(UA_mean, UA_last) over categories). ua_mean, ua_last, pref: (n_cat,); mean, last: their
    :func:`verdict` entries.

    Returns the test and the sentence that says what it shows: MORE/LESS only when p < 1 - level."""
    r_xz = defined(pearson(ua_mean, ua_last)[0])
    t, p = dependent_r_test(last["r"], mean["r"], r_xz, len(pref)) if None not in (mean["r"], last["r"], r_xz) \
        else (np.nan, np.nan)
    test: PoolingTest = {"layer": mean["layer"], "r_mean": mean["r"], "r_last": last["r"], "r_xz": r_xz,
                         "t": defined(t), "p": defined(p)}
    where = f"at layer {mean['layer']}"
    if test["p"] is None:
        return test, f"Undefined: r of mean or last pooling {where} is undefined, so the poolings cannot be compared."
    if test["p"] < 1 - level:
        more = "MORE" if last["r"] > mean["r"] else "LESS"
        return test, (f"Last-token embeddings correlate {more} with output than mean-pooled {where} "
                      f"(r {signed(last['r'])} vs {signed(mean['r'])}, Williams t = {t:+.2f}, p = {number(p)}).")
    return test, (f"No difference between poolings can be claimed {where} (r {signed(last['r'])} last vs "
                  f"{signed(mean['r'])} mean, Williams p = {number(p)}). Mean: {interval_text(mean, level)}. "
                  f"Last: {interval_text(last, level)}.")


def interval_text(entry: PoolingVerdict, level: float) -> str:
    """The headline interval of a :func:`verdict` entry: ``"95% CI [-0.170, +0.950]"``, or the leave-one-out range
    with the Fisher-z interval marked not valid when a category has leverage."""
    if entry.get("interval") == "leave-one-out range":
        return (f"leave-one-out r [{signed(entry['ci_lo'])}, {signed(entry['ci_hi'])}], Fisher-z CI "
                f"{fisher_z_note(entry)}")
    return f"{level:.0%} CI [{signed(entry.get('ci_lo'))}, {signed(entry.get('ci_hi'))}]"


def fisher_z_note(entry: PoolingVerdict) -> str:
    """``"not valid (leverage: numeric_vs_named)"`` for a :func:`verdict` entry whose categories have leverage."""
    return f"not valid (leverage: {', '.join(entry['leverage'])})"


def analyse_run(run: PairRun, config: StudyConfig) -> tuple[DivergenceModel, list[dict]]:
    """``summary, rows = analyse_run(run, config)``: :func:`analyse_model` on the run's tested layers with the
    compat, ci_level, seed, n_permutations and drop_category of ``config`` (what ``Divergence.run`` computes per
    model; :mod:`layerscope.validation.nulls` calls it on relabelled runs)."""
    return analyse_model(run, run.layers, compat=config.compat, level=config.ci_level, seed=config.seed,
                         n_permutations=config.n_permutations, drop_category=config.drop_category)


def tested_run(run: PairRun, compat: str | None) -> PairRun:
    """The run :func:`analyse_model` tests: the last block's output before the final norm at layer n_layers,
    except in the notebooks' mode (after it, as the notebook)."""
    return run if compat == NOTEBOOKS else run.at_stage("pre_norm")


def analyse_model(run: PairRun, layers: list[int], compat: str | None = None, level: float = 0.95, seed: int = 42,
                  n_permutations: int = 10_000, drop_category: str | None = None
                  ) -> tuple[DivergenceModel, list[dict]]:
    """Summary and rows of one model: the analysis on all pairs (``subset`` "all") and, with
    ``drop_category``, again without that category (``subset`` "without NAME"); by default on the pre-norm
    final layer, with the sensitivity checks (``summary["checks"]``, ``summary["robustness"]``). ``compat``,
    ``level``, ``seed`` and ``n_permutations``: how each r is tested (:class:`~..correlation.Significance`)."""
    from .checks import add_checks

    sig = Significance(compat, level, seed, n_permutations)
    seed_mode = compat == NOTEBOOKS
    run = tested_run(run, compat)
    summary, rows, arrays = analyse_subset(run, layers, sig)
    rows = in_subset(rows, subset_name(None))
    if not seed_mode:
        summary["length_control"] = length_control(run)
    without = None
    if drop_category is not None:
        without, without_rows, _ = analyse_subset(run.without(drop_category), layers, sig)
        rows += in_subset(without_rows, subset_name(drop_category))
        summary["without_category"] = {
            "category": drop_category, "n_categories": without["n_categories"],
            "final_r": {c["pooling"]: c["r"] for c in without["pooling_comparison"]},
            "divergence_points": without["divergence_points"]["mean"],
            "sign_throughout": without["sign_throughout"]["mean"]}
        if not seed_mode:
            summary["without_category"].update(layer=without["headline_layer"],
                                               label=headline_entry(without)["label"],
                                               sign_flips_within_noise=without["sign_flips_within_noise"]["mean"])
    if not seed_mode:
        rows += add_checks(summary, run, layers, arrays, sig, drop_category, without)
    return summary, rows


def analyse_subset(run: PairRun, layers: list[int], sig: Significance
                   ) -> tuple[DivergenceModel, list[dict], tuple[dict[str, np.ndarray], np.ndarray]]:
    """Summary, rows and ``({pooling: UA (n_cat, len(layers))}, pref (n_cat,))`` of one model on the pairs of
    ``run``: per pooling the r profile, its sign changes and the verdict at the headline layer (the last tested one;
    notebooks mode: the final layer, tested or not), and by default the controls (rho, summed preference)."""
    info, pairs, level = run.info, run.pairs, sig.level
    cats, n_cat, names = pairs.pair_categories(), len(pairs.categories), [c.name for c in pairs.categories]
    pref = category_pref(run.pref, cats, n_cat)
    final, seed_mode = info.n_layers, sig.compat == NOTEBOOKS
    columns, head = (sorted({*layers, final}), final) if seed_mode else (list(layers), max(layers))
    rows = [{"model": info.name, "metric": "pref", "value": pref[c], "n": int((cats == c).sum()),
             "category": cat.name} for c, cat in enumerate(pairs.categories)]
    verdicts: dict[str, PoolingVerdict] = {}
    profiles, points, throughout, noise, significant, uas = {}, {}, {}, {}, {}, {}
    for pooling in POOLINGS:
        ua = category_ua(run.a(pooling), run.b(pooling), cats, n_cat, columns)  # (n_cat, len(columns))
        at = {layer: ua[:, column] for column, layer in enumerate(columns)}  # layer -> its UA (n_cat,)
        uas[pooling] = np.stack([at[layer] for layer in layers], axis=1)
        stats = dict(zip(columns, category_tests(ua, pref, sig), strict=False))
        if not seed_mode:
            add_q([stats[layer] for layer in layers], "p_perm", level)
        for layer in layers:
            rows.append(layer_row(info.name, layer, final, "r_ua_pref", pooling=pooling, n=n_cat, **stats[layer]))
            rows += [layer_row(info.name, layer, final, "ua", at[layer][c], pooling=pooling,
                               n=int((cats == c).sum()), category=cat.name)
                     for c, cat in enumerate(pairs.categories)]
        check_rows("divergence", rows, VERDICT_METRICS)  # the inputs of every r, before any verdict
        where, checked = (f"layer {final}", at[final]) if seed_mode else (f"tested layers {layer_span(layers)}",
                                                                          uas[pooling])
        check_values("divergence", info.name, f"{where} category UA ({pooling} pooling)", checked)
        profiles[pooling] = [stats[layer]["value"] for layer in layers]
        points[pooling], throughout[pooling] = sign_summary(layers, profiles[pooling])
        if seed_mode:
            verdicts[pooling] = {"pooling": pooling, "layer": final, "r": defined(stats[final]["value"]),
                                 "p": defined(stats[final]["p"]), "label": interpret(stats[final]["value"])}
            continue
        points[pooling], noise[pooling] = sign_flips(layers, uas[pooling], pref, level, sig.n_permutations, sig.seed)
        shared = pooling == "first" and shared_first(run, layers)
        verdicts[pooling] = verdict(pooling, head, stats[head], at[head], pref, names, level,
                                    run.stage if head == final else None, SHARED_FIRST if shared else None)
        rows += control_rows(run, uas[pooling], layers, pooling, sig)
        significant[pooling] = [layer for layer in layers if stats[layer]["significant"]]
    summary: DivergenceModel = {
        "n_layers": final,
        "layers": layers,
        "n_categories": n_cat,
        "categories": names,
        "pooling_comparison": list(verdicts.values()),
        "divergence_points": points,
        "sign_throughout": throughout,
    }
    mean, last = verdicts["mean"], verdicts["last"]
    if seed_mode:
        summary["pooling_effect"] = pooling_effect(mean["r"], last["r"])
        return summary, rows, (uas, pref)
    test, effect = pooling_test(uas["mean"][:, -1], uas["last"][:, -1], pref, mean, last, level)
    summary.update(headline_layer=head, stage=run.stage, pooling_effect=effect, pooling_test=test,
                   sign_flips_within_noise=noise, significant_layers=significant,
                   not_applicable={pooling: SHARED_FIRST_WHY for pooling, v in verdicts.items()
                                   if v["label"] == SHARED_FIRST})
    return summary, with_stage(rows, final, run.stage), (uas, pref)


def shared_first(run: PairRun, layers: list[int]) -> bool:
    """Whether every pair's A and B first-token vectors are equal at each of ``layers``, read one layer at a time
    (stops at the first layer that differs)."""
    a, b = run.a("first"), run.b("first")
    return all(np.array_equal(a[:, layer], b[:, layer]) for layer in layers)


def control_rows(run: PairRun, ua: np.ndarray, layers: list[int], pooling: str, sig: Significance) -> list[dict]:
    """Spearman rho of UA with the preference (``rho_ua_pref``) and r with the category mean of the summed
    preference (``r_ua_pref_sum``) at the tested layers; ua: (n_cat, len(layers))."""
    cats, n_cat = run.pairs.pair_categories(), len(run.pairs.categories)
    rho = add_q(spearman_tests(ua, category_pref(run.pref, cats, n_cat)), "p", sig.level)
    pref_sum = category_pref(run.pref_sum, cats, n_cat)
    summed = add_q(pearson_tests(ua, pref_sum, sig.n_permutations, sig.seed, sig.level), "p_perm", sig.level)
    return [layer_row(run.info.name, layer, run.info.n_layers, metric, pooling=pooling, n=n_cat, **test)
            for metric, tests in (("rho_ua_pref", rho), ("r_ua_pref_sum", summed))
            for layer, test in zip(layers, tests, strict=False)]


def layer_span(layers: list[int]) -> str:
    """``"0-30"`` for consecutive layers, else ``"0, 4, 8"``."""
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ", ".join(map(str, layers))
