"""Atlas report: where the measures put the phase boundaries, with bootstrap intervals, one vote per family of
measures, the checks that move them, the distances to the phases study's thirds and to the anisotropy L*, the
conventions each number follows, the landmarks of each measure, and the cross-model CKA.

    text = report(result)
    headline_line("smollm2-135m", result.summary["models"]["smollm2-135m"])
"""

from __future__ import annotations

import pandas as pd

from ...report.markdown import bits, md_table, md_text, number
from ...study.result import StudyResult
from ...study.validated import note
from .boundaries import FAMILIES, VARIANTS
from .summary import AtlasModel, AtlasSummary, Boundaries

NAMES = {"lens_kl": "logit-lens KL", "lens_top1_agree": "logit-lens top-1 agreement",
         "block_influence": "block influence", "angular_distance": "angular distance",
         "cka_next": "debiased CKA with the next layer", "twonn_id": "TwoNN dimension",
         "prompt_entropy": "prompt entropy",
         "dataset_entropy": "dataset entropy", "massive_ratio": "massive ratio (log)", "norm": "norm (log)",
         "top1_ratio": "covariance top-1 share", "tuned_lens_kl": "tuned-lens KL",
         "tuned_lens_top1_agree": "tuned-lens top-1 agreement"}

IN_NATS = {"lens_ce", "lens_kl", "tuned_lens_ce", "tuned_lens_kl"}
"""Landmarks the table holds in nats per token; the report shows them in bits per token."""

LANDMARKS = ["lens_ce", "lens_kl", "lens_top1_agree", "tuned_lens_ce", "tuned_lens_kl", "tuned_lens_top1_agree",
             "block_influence", "angular_distance", "twonn_id",
             "prompt_entropy_normalised", "dataset_entropy_normalised", "massive_ratio", "norm", "top1_ratio"]


def _span(b: dict) -> str:
    return f"{b['value']} [{b['ci_lo']}-{b['ci_hi']}]"


def _layers(values: list[int] | None) -> str:
    return ", ".join(map(str, values)) if values else "none"


def headline_line(model: str, s: AtlasModel) -> str:
    b = s["boundaries"]
    if b["consensus"] is None:
        return f"{model}: no family of measures had enough finite layers for phase boundaries"
    if "seen_by" not in b:
        return _two_break_headline(model, s)
    if not b["consensus"]:
        return (f"{model} ({s['n_layers']} layers): no profile changes course beyond its resamples' noise (penalty "
                f"calibrated to {b['alpha']:.0%} false alarms); L* = {b['l_star']}")
    spans = {x["index"]: x for x in b["intervals"] if x["family"] == "consensus"}
    shared = [f"{_span(spans[k + 1])}{' (fragile)' if b['fragile'][k] else ''}"
              for k, seen in enumerate(b["seen_by"]) if len(seen) >= 2]
    alone = [c for c, seen in zip(b["consensus"], b["seen_by"], strict=True) if len(seen) < 2]
    star = (f"L* = {b['l_star']}, {b['l_star_distance']} layer(s) from the nearest "
            f"{'+'.join(b['l_star_families'])} change point") if b["l_star_consensus"] else f"L* = {b['l_star']}"
    shared_words = (f"phase boundaries seen by two or more families at layers {', '.join(shared)}" if shared else
                    "no change point seen by two or more families")
    alone_words = f"; one family alone at {_layers(alone)}" if alone else ""
    return (f"{model} ({s['n_layers']} layers): {shared_words}{alone_words} (95 % bootstrap intervals, "
            f"{b['n_resamples']} resamples; number chosen by a penalty calibrated to {b['alpha']:.0%} false alarms); "
            f"thirds at {b['thirds'][0]}, {b['thirds'][1]} ({b['thirds_distance'][0]} and "
            f"{b['thirds_distance'][1]} layers from the nearest); {star}")


def _two_break_headline(model: str, s: AtlasModel) -> str:
    """The headline of a result.json written before layerscope chose the number of breaks (always two, each the
    lower median over families), as it was printed then."""
    b = s["boundaries"]
    spans = {x["index"]: x for x in b["intervals"] if x["family"] == "consensus"}
    parts = [f"{_span(spans[k + 1])}{' (fragile)' if b['fragile'][k] else ''}" for k in range(2)]
    star = (f"L* = {b['l_star']}, {b['l_star_distance']} layer(s) from the {'+'.join(b['l_star_families'])} "
            f"boundaries {b['l_star_consensus'][0]}, {b['l_star_consensus'][1]}") if b["l_star_consensus"] else \
        f"L* = {b['l_star']}"
    return (f"{model} ({s['n_layers']} layers): phase boundaries at layers {parts[0]} and {parts[1]} (95 % "
            f"bootstrap intervals, {b['n_resamples']} resamples, one vote per family); thirds at "
            f"{b['thirds'][0]}, {b['thirds'][1]} ({b['thirds_distance'][0]} and {b['thirds_distance'][1]} layers "
            f"away); {star}")


def report(result: StudyResult) -> str:
    summary: AtlasSummary = result.summary
    out = ["# Layer atlas: the field's per-layer measures, and where they put the phase boundaries", "",
           "One streamed pass per model measures, per layer: the logit lens (nostalgebraist 2020), block influence "
           "(Men et al. 2024, ShortGPT), angular distance (Gromov et al. 2024), linear and debiased CKA (Kornblith "
           "et al. 2019; Song et al. 2012's unbiased HSIC as in Nguyen et al. 2021), TwoNN intrinsic dimension "
           "(Facco et al. 2017), prompt and dataset matrix entropy (Skean et al. 2025), massive activations (Sun "
           "et al. 2024), the residual norm and the covariance top-1 share (the anisotropy study's measure). Layer "
           "n_layers is the last block's output before the final norm for every measure but the lens, whose last "
           "layer is the model's own prediction. With a tuned lens (Belrose et al. 2023: one trained affine "
           "translator per layer before the final norm), the four lens measures are also read through it "
           "(tuned_lens_*), its KL and top-1 agreement form the lens family, and the logit lens's are a check "
           "(variant logit_lens).", "",
           "**Boundaries.** Measures driven by the same thing are cut together, as a family: "
           + "; ".join(f"{f}: {', '.join(NAMES[m] for m in ms)}" for f, ms in FAMILIES.items())
           + ". Each measure is divided by its noise level (the resamples' spread), and the family's profiles get "
           "one least-squares piecewise-linear fit with breaks at the same layers, as many as a penalty per break "
           "allows. The penalty is calibrated on the resamples' own noise: a straight line plus one resample's "
           "deviation is a profile with no change, and the families' penalties are set so that such a profile gets "
           "a break in any family 5 % of the time. The consensus is every family's change points, merged across "
           "families within one layer, each with the families that see it (a change three families see counts "
           "once). Each boundary's interval is the 95 % percentile interval over resamples of the texts (drawn with "
           "replacement, every measure recomputed, seeded) of the nearest break within the tolerance, widened to "
           "their range when some resample moved it, so a zero-width interval means no resample did; its support "
           "is the fraction of resamples with such a break. A boundary with no boundary of one of the checks "
           "(without position 0 and the massive tokens, without layer 0, segments of at least 3 layers) within the "
           "tolerance is called fragile. The comparisons with the thirds and L* are descriptive.", ""]
    for model, s in summary["models"].items():
        out += model_section(result.table, model, s)
    if summary["cross_model"]:
        out += cross_section(result.table)
    seconds = result.manifest.get("timings", {})
    out += ["## Timings", "", ", ".join(f"{md_text(k)} {v:.1f} s" for k, v in seconds.items()), ""]
    return "\n".join(out)


def model_section(table: pd.DataFrame, model: str, s: AtlasModel) -> list[str]:
    b = s["boundaries"]
    out = [f"## {md_text(model)} ({s['n_layers']} layers; {s['n_texts']} texts, {s['n_tokens']} tokens, "
           f"{s['n_scored']} scored)", ""]
    if b["consensus"] is None:
        return [*out, "No family of measures had enough finite layers for phase boundaries.", ""]
    out += [f"**Phase boundaries.** {boundary_sentence(b)}", "", validation_line(model, "seen_by" in b), "",
            lens_line(s), "", conventions_line(s), ""]
    rows = [[x["family"], x["index"], _span(x), number(x["support"], 2), f"{x.get('moved', 0)} of {x['n']}",
             ", ".join(x.get("families", []))] for x in b["intervals"]]
    out += [md_table(["family", "boundary", "layer [95 % interval]", "support", "moved", "seen by"], rows), ""]
    out += ["**Sensitivity.** The consensus boundaries under each check, and the shift from each default boundary to "
            "the nearest boundary of the check:", ""]
    sens = [["default", VARIANTS["default"], _layers(b["consensus"]), ""]]
    for v, variant in b["variants"].items():
        c = variant["consensus"]
        shifts = ", ".join("-" if m[v] is None else f"{m[v]:+d}" for m in b["moved"])
        sens.append([v, VARIANTS[v], "not fitted" if c is None else _layers(c), shifts])
    out += [md_table(["variant", "what changes", "boundaries", "shift of each default boundary"], sens), ""]
    out += [fragility_sentence(b), ""]
    family_of = {m: f for f, ms in b["families"].items() for m in ms}
    rows = [[NAMES[m], family_of.get(m, ""), _layers(b["per_metric"].get(m)), md_text(b["skipped"].get(m, ""))]
            for m in NAMES if m in b["per_metric"] or m in b["skipped"]]
    out += [md_table(["measure", "family", "its own change points (alone, at its calibrated penalty)", "note"],
                     rows), ""]
    onset = s["massive_onset_layer"]
    threshold = s["conventions"]["massive_threshold"]
    tuned_half = s.get("tuned_lens_kl_half_layer")
    tuned_words = f" (the tuned lens's at layer {tuned_half})" if tuned_half is not None else ""
    out += [f"**Landmarks.** The logit lens's KL to the final layer falls below half its layer-0 value at layer "
            f"{s['lens_kl_half_layer']}{tuned_words}; the TwoNN dimension peaks at layer {s['twonn_peak_layer']}; "
            f"the most influential blocks are {', '.join(map(str, s['most_influential']))}; massive activations "
            f"(median top/median ratio > {threshold:g}) " + (f"start at layer {onset}" if onset is not None else
                                                      "never appear") + ".", ""]
    rows = table[(table["model"] == model) & table["metric"].isin(LANDMARKS)]
    if "tokens" in rows:
        rows = rows[rows["tokens"].isna() | (rows["tokens"] == "all")]
    wide = rows.pivot_table(index="layer", columns="metric", values="value", aggfunc="first")
    wide = wide.reindex(columns=[m for m in LANDMARKS if m in wide.columns])
    for metric in IN_NATS & set(wide.columns):  # the table's nats, shown in bits per token
        wide[metric] = bits(wide[metric])
    headers = [f"{m} (bits/token)" if m in IN_NATS else m for m in wide.columns]
    out += [md_table(["layer", *headers], [[layer, *(number(v) for v in values)]
                                                for layer, values in zip(wide.index, wide.to_numpy(), strict=True)]),
            ""]
    return out


def boundary_sentence(b: Boundaries) -> str:
    spans = [x for x in b["intervals"] if x["family"] == "consensus"]
    listed = "; ".join(f"layer {_span(x)} (support {number(x['support'], 2)}; {', '.join(x.get('families', []))})"
                       for x in spans) or "none: no profile changes course beyond its resamples' noise"
    penalties = ", ".join(f"{f} {number(p)}" for f, p in b.get("penalties", {}).items()) or "not recorded"
    star = ("" if not b["l_star_consensus"] else
            f" The anisotropy L* = {b['l_star']} is compared only with the families that do not contain the "
            f"covariance top-1 share it is made from ({' and '.join(b['l_star_families'])}, change points at layers "
            f"{_layers(b['l_star_consensus'])}): {b['l_star_distance']} layer(s) from the nearest.")
    thirds = (f" The phases study's thirds start at layers {b['thirds'][0]} and {b['thirds'][1]}: "
              f"{b['thirds_distance'][0]} and {b['thirds_distance'][1]} layers from the nearest boundary."
              if b["thirds_distance"] else "")
    return (f"The consensus change points: {listed}; from {b['n_resamples']} resamples, tolerance {b['tolerance']} "
            f"layer(s), penalties per break (noise units) {penalties}.{thirds}{star}")


def fragility_sentence(b: Boundaries) -> str:
    words = []
    fragile = [f"{c} ({', '.join(f'{v} {m:+d}' if m is not None else f'{v}: none' for v, m in shifts.items())})"
               for c, shifts, bad in zip(b["consensus"] or [], b["moved"], b["fragile"], strict=True) if bad]
    if fragile:
        words.append("Fragile (a check has no boundary within the tolerance of it; read it as a property of these "
                     "settings, not as a phase): " + "; ".join(fragile) + ".")
    elif b["consensus"]:
        words.append(f"Every boundary has a boundary within {b['tolerance']} layer(s) under every check that could "
                     "run.")
    unfit = {v: x["why"] for v, x in b["variants"].items() if x["consensus"] is None}
    if unfit:
        words.append("Could not be checked: " + "; ".join(f"{v} ({md_text(why)})" for v, why in unfit.items()) + ".")
    massive = b["massive_driven"]
    words.append(f"Families with a boundary that has no counterpart within the tolerance without position 0 and the "
                 f"massive tokens (dominated by them): {', '.join(massive)}." if massive else
                 "Every family's boundaries have a counterpart within the tolerance without position 0 and the "
                 "massive tokens.")
    return " ".join(words)


def validation_line(model: str, current: bool = True) -> str:
    """What the recorded validation card measured of these boundaries on this model, or where to get it
    (``current``: the result was made by the method the card measured)."""
    card = note("atlas boundary", model, ("power", "coverage", "kept", "false_alarm", "recurrence")) if current else ""
    if card:
        return (f"**Validation.** How often this method finds a planted change and how often it finds one where "
                f"there is none, on this model (docs/validation.md): {card}.")
    return ("**Validation.** No validation card of this model is recorded; `layerscope validate --model "
            f"{md_text(model)}` measures how often these boundaries find a planted change and how often one where "
            "there is none.")


def lens_line(s: AtlasModel) -> str:
    """Which lens the lens family used, and where the tuned lens came from."""
    tuned = (s.get("lens") or {}).get("tuned_lens")
    if not tuned:
        return ("**Lens.** The lens family is the logit lens (no tuned lens was given: --tuned-lens FOLDER or "
                "auto reads the layers through one too).")
    steps = f"{tuned.get('steps')} steps of {tuned.get('batch_size')} texts, seed {tuned.get('seed')}"
    return (f"**Lens.** The lens family is the tuned lens (tuned_lens_kl, tuned_lens_top1_agree); the logit lens's "
            f"boundaries are the logit_lens check. The tuned lens: {md_text(str(tuned.get('folder')))} (params.pt "
            f"sha256 {md_text(str(tuned.get('params_sha256'))[:16])}, trained on weights "
            f"{md_text(str(tuned.get('weights_hash'))[:16])}, {md_text(steps)}, corpus: "
            f"{md_text(str(tuned.get('corpus')))}" + ("; trained for this run" if tuned.get("trained_now") else "")
            + ").")


def conventions_line(s: AtlasModel) -> str:
    c = s["conventions"]
    entropy = ("the authors' convention (Skean et al. 2025's released code: each prompt's tokens centred, rows "
               "scaled to unit length, negative Gram entries clamped to 0)" if c["entropy"] == "skean" else
               "the raw convention (the formula on the raw token states; not comparable with the paper's figures)")
    twonn = ("maximum likelihood (N / sum log mu)" if c["twonn"] == "mle" else
             "Facco et al.'s regression with the largest 10 % of ratios discarded")
    n = min(s["n_texts"], 1000)
    return (f"**Conventions.** The boundaries use the debiased CKA (unbiased HSIC): two independent random "
            f"clouds of {n} points in this model's width score {number(c['random_cka_linear'])} by linear CKA and "
            f"{number(c['random_cka_debiased'])} debiased, so linear CKA values near the former say nothing. "
            f"Matrix entropy: {entropy}. TwoNN estimator: {twonn}. Massive activations: a layer's threshold is "
            f"{c['massive_threshold']:g}x the median |activation| of the text (Sun et al. 2024 use about 1000x). "
            "The resampled covariance top-1 share is a Rayleigh-Ritz value on the 16 leading directions (a lower "
            "bound); the full-data value is exact.")


def cross_section(table: pd.DataFrame) -> list[str]:
    """For each pair of models: each layer of the first and the layer of the second it is most similar to."""
    out = ["## Across models (linear CKA on the same texts; the table has the debiased values too)", ""]
    cross = table[(table["metric"] == "cka") & table["model_b"].notna()]
    for (a, b), rows in cross.groupby(["model", "model_b"], sort=False):
        best = rows.loc[rows.groupby("layer")["value"].idxmax()]
        out += [f"### {md_text(a)} vs {md_text(b)}", "", md_table([f"{md_text(a)} layer",
                                                                   f"most similar {md_text(b)} layer", "CKA"],
                                                [[int(r.layer), int(r.layer_b), number(r.value)]
                                                 for r in best.itertuples()]), ""]
    return out
