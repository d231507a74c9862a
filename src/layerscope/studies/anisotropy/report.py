"""Anisotropy report: L*, what drives it, the bell-curve test, the sensitivity checks, the reference match, and the
outlier check.

    text = report(result)   # notebooks mode: the notebook's sections; default: driver, sink, massive tokens, checks
"""

from __future__ import annotations

import pandas as pd

from ...report.markdown import md_table, md_text, method_line, number
from ...study.result import StudyResult
from ..shared.caveats import MIN_N, warning_lines
from .analysis import METRICS, MIN_SEGMENT, TOKEN_SETS
from .drivers import DRIVER_SHARE, bell_label
from .summary import AnisotropyModel, AnisotropySummary, LStarCheck, TokenSet, headline_set

STAGES = {"": "", "pre_norm": " (pre-norm)", "post_norm": " (post-norm)"}


def report(result: StudyResult) -> str:
    """The markdown report of an anisotropy result (notebooks mode or default)."""
    out = ["# Anisotropy: how concentrated are token representations, layer by layer?", "",
           "Per layer, over every token state of every prompt: eigenvalues of the covariance (from the "
           "N x N Gram matrix; zero eigenvalues clipped at 1e-10 as in the notebook), their variance, "
           "the top-1 share λ1/Σλ, the effective rank exp(H), the mean cosine to the mean state, and the "
           "variance in the top 10 and 50 components. L* = argmax of λ1/Σλ.", "", method_line(result.config), "",
           *warning_lines(result.summary)]
    summary: AnisotropySummary = result.summary
    for model, s in summary["models"].items():
        out += [f"## {md_text(model)} ({s['n_layers']} layers, d = {s['hidden_dim']})", ""]
        out += seed_sections(result, model, s) if "bell_verdict" not in s else default_sections(result, model, s)
        if s["outlier_verdict"]:
            out += ["### Is the top-1 share an outlier-dimension effect?", "", s["outlier_verdict"], ""]
    return "\n".join(out)


def seed_sections(result: StudyResult, model: str, s: AnisotropyModel) -> list[str]:
    """The notebook's sections per token set: L*, its bell test and the metric table."""
    out = []
    for tokens, t in s["token_sets"].items():
        label = "all tokens" if tokens == "all" else "without position 0"
        primary = " (headline)" if tokens == s["primary"] else ""
        bell = t["bell"]
        out += [f"### {label}{primary}: {t['n_tokens']} token states", "",
                f"**L* = {t['l_star']}** (λ1/Σλ = {bell['max_value']:.3f}).", "",
                f"Bell-curve test: before L* slope {bell['phase1_slope']:+.6f} (r = {bell['phase1_r']:+.3f}, "
                f"p = {number(bell['phase1_p'])}); from L* on slope {bell['phase2_slope']:+.6f} "
                f"(r = {bell['phase2_r']:+.3f}, p = {number(bell['phase2_p'])}) -> "
                + ("**bell curve: rising, then falling.**" if bell["is_bell_curve"]
                   else "**not a bell curve.**"), ""]
        out += reference_lines(t)
        out += [metric_table(result.table, model, tokens), ""]
    return out


def default_sections(result: StudyResult, model: str, s: AnisotropyModel) -> list[str]:
    """Headline L*, its driver, the sink, the massive tokens, the bell verdict, the checks, then each token set."""
    n = s["n_layers"]
    head = headline_set(s)
    out = [f"The final layer (layer {n}) is the last decoder block's output **before** the model's final norm; "
           f"transformers' last hidden state (after the norm) is kept as a sensitivity row (table rows at layer {n} "
           "carry `stage` = pre_norm / post_norm). The headline uses the pre-norm state.", "",
           f"**Headline ({TOKEN_SETS[s['primary']]}): L* = {s['l_star']}**"
           + (" (the pre-norm final state)" if s["l_star_stage"] else "")
           + f", λ1/Σλ = {number(head['bell']['max_value'])}.", ""]
    out += driver_lines(s) + sink_lines(s) + massive_lines(s)
    out += ["### Bell-curve test", "",
            f"Rule: a bell curve needs a rise before L* and a fall from L* on, each a least-squares slope of the right "
            f"sign with q < {number(1 - head['bell']['level'])} (Benjamini-Hochberg over the two slopes), each on "
            f">= {MIN_SEGMENT} layers. Adjacent layers are not independent observations, so these p are "
            "optimistic; a segment of fewer than "
            f"{MIN_N} layers gets a warning.", "", f"**Verdict:** {s['bell_verdict']}.", ""]
    out += reference_lines(head)
    out += ["### Sensitivity checks", "",
            md_table(["profile", "L*", "bell label", "changes the headline"],
                     [[f"headline ({TOKEN_SETS[s['primary']]})", s["l_star"], bell_label(head['bell']), "-"]]
                     + [[md_text(c["check"]), c["value"], c["label"], _flip(c)] for c in s["checks"]]), "",
            f"**Robustness of L* and the bell label:** {md_text(s['robustness'])}.", ""]
    for tokens, t in s["token_sets"].items():
        primary = " (headline)" if tokens == s["primary"] else ""
        post = t["post_norm"]
        out += [f"### {TOKEN_SETS[tokens]}{primary}: {t['n_tokens']} token states", "",
                f"L* = {t['l_star']}; {t['bell']['verdict']}.", "",
                f"After the final norm (post-norm layer {n} in place of the pre-norm one): L* = {post['l_star']}, "
                f"{bell_label(post['bell'])}; λ1/Σλ at layer {n} is "
                f"{number(post['top1_ratio_final_pre_norm'])} before the norm "
                f"and {number(post['top1_ratio_final'])} after it.", "",
                metric_table(result.table, model, tokens), ""]
    for tokens, why in s["skipped_token_sets"].items():
        out += [f"### {TOKEN_SETS[tokens]}: not computed ({why})", ""]
    return out


def driver_lines(s: AnisotropyModel) -> list[str]:
    """What the report's own decomposition at L* says drives it, and each token set's L* with its driver."""
    d = s["driver"]
    rows = [[TOKEN_SETS[s["primary"]], number(d["top1_ratio"]), "100%"]]
    rows += [[f"without {w['left_out']}", number(w["top1_ratio"]),
              "n/a" if w["share_left"] is None else f"{w['share_left']:.0%}"] for w in d["without"]]
    return [f"### What drives L* = {d['layer']}", "",
            md_table([f"tokens / dimensions at layer {d['layer']}", "λ1/Σλ", "share left"], rows), "",
            f"**Driver:** {d['label']}. Rule: the exclusion (position 0, the mid-sentence "
            f"massive-activation tokens, the outlier dimensions) that leaves the least of the top-1 share at L*, if "
            f"it leaves less than "
            f"{DRIVER_SHARE:.0%}; else position 0 and the massive tokens together; else none of these.", "",
            "Each token set's L* and its driver (the same decomposition within that set): "
            + "; ".join(f"{TOKEN_SETS[k]}: L* = {t['l_star']}, {t['driver']['label']}"
                        for k, t in s["token_sets"].items()) + ".", ""]


def sink_lines(s: AnisotropyModel) -> list[str]:
    """The sink onset: the first layer where position 0's norm exceeds SINK_RATIO x its text's median token norm."""
    sink = s["sink"]
    rule = (f"the first layer where the position-0 token's norm exceeds {number(sink['rule'], 0)}x the median token "
            "norm of its text, median over the texts")
    onset = "none" if sink["onset_layer"] is None else f"layer {sink['onset_layer']}"
    at = "" if sink["at_l_star"] is None else f"; at L* the ratio is {number(sink['at_l_star'])}"
    return [f"Sink onset: **{onset}** ({rule}){at}.", ""]


def massive_lines(s: AnisotropyModel) -> list[str]:
    """The massive-activation tokens: counts and the mid-sentence ones."""
    m = s["massive"]
    out = [f"Massive-activation tokens (largest |activation| > {number(m['ratio'], 0)}x the median |activation| of "
           f"their text, at a block output 1..{s['n_layers'] - 1} or the pre-norm final state): {m['n_tokens']} "
           f"tokens, {m['n_position_0']} at position 0 and {m['n_mid_sentence']} mid-sentence"
           + (f" (layers {', '.join(map(str, m['layers']))})." if m["layers"] else "."), ""]
    if m["mid_sentence"]:
        out += [md_table(["text", "position", "token", "token id", "massive at layers"],
                         [[md_text(t["text"]), t["position"],
                           "n/a" if t["token"] is None else md_text(repr(t["token"])), t["token_id"],
                           ", ".join(map(str, t["layers"]))] for t in m["mid_sentence"]]), ""]
    return out


def reference_lines(t: TokenSet) -> list[str]:
    if not t["reference"]:
        return []
    ref = t["reference"]
    return [f"Reference L* = {ref['reference_l_star']}: {ref['distance']} layer(s) away -> **{ref['verdict']}**.", ""]


def metric_table(table: pd.DataFrame, model: str, tokens: str) -> str:
    """One token set's metrics per layer; with a ``stage`` column the final layer's pre- and post-norm rows stay
    apart (never averaged)."""
    rows = table[(table["model"] == model) & (table["tokens"] == tokens)]
    rows = rows[rows["metric"].isin((*METRICS, "n_outlier_dims", "pos0_norm_ratio"))].copy()
    rows["stage"] = rows["stage"].fillna("") if "stage" in rows else ""
    wide = rows.pivot_table(index=["layer", "stage"], columns="metric", values="value", aggfunc="first")
    ratio = "pos0_norm_ratio" in wide and tokens == "all" and wide["pos0_norm_ratio"].notna().any()
    order = sorted(wide.index, key=lambda k: (k[0], list(STAGES).index(k[1])))
    return md_table(["layer", *METRICS, "outlier dims", *(["pos0 norm ratio"] if ratio else [])],
                    [[f"{int(layer)}{STAGES[stage]}", *(number(wide.loc[(layer, stage), m], 4) for m in METRICS),
                      int(wide.loc[(layer, stage), "n_outlier_dims"]),
                      *([number(wide.loc[(layer, stage), "pos0_norm_ratio"], 2)] if ratio else [])]
                     for layer, stage in order])


def _flip(check: LStarCheck) -> str:
    parts = (["L* moves"] if check["l_star_moves"] else []) + (["bell label flips"] if check["bell_flips"] else [])
    return ", ".join(parts) or "no"
