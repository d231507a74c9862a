"""Ablation report: per-configuration table, H5, sensitivity, synergy, scheme comparison, per-layer quantization
error, sweep, and how the forward passes ran (prefix reuse)."""

from __future__ import annotations

from ...modes import NOTEBOOKS
from ...quant import RECIPES
from ...report.markdown import bits, md_table, md_text, number
from ...study.result import StudyResult
from ..shared.caveats import warning_lines
from .analysis import BROKEN_PPL_RATIO, H5_THRESHOLD
from .summary import AblationSummary, ConfigRow, VariantSummary, Verdicts

LARGE = 1e4
"""Numbers at least this large print in scientific notation (9.633e+05, not 963273.7000)."""


def readable(x, digits: int = 4) -> str:
    """``number(x, digits)``, or scientific notation with 4 significant digits from ``LARGE`` on."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) >= LARGE:
        return f"{x:.3e}"
    return number(x, digits)


def _ci(ci: list[float] | None, digits: int = 3) -> str:
    return "n/a" if ci is None else f"[{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]"


def _ratio(x) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def report(result: StudyResult) -> str:
    """``text = report(result)``: the markdown report of an ablation result."""
    s: AblationSummary = result.summary
    seed = result.config.get("compat") == NOTEBOOKS
    out = ["# Ablation: which layers matter most when quantized, per language?", "",
           (f"Each configuration fake-quantizes a set of decoder layers to {s['bits']} bits (symmetric, round to "
           "nearest); every text's perplexity is compared with the unquantized baseline. Degradation = "
           "(ppl - baseline) / baseline, clipped at 0 as in the notebook; delta NLL = mean NLL - baseline "
           "(stays readable when perplexity explodes). Disparity = mean low-resource degradation / mean "
           "high-resource degradation. H5: protecting the first and last layers cuts the disparity by > 30%."), "",
           _method(result.config), "", *warning_lines(s)]
    for model, m in s["models"].items():
        out += [f"## {md_text(model)} ({m['n_layers']} decoder layers)", ""] + _passes(m.get("prefix_reuse"))
        for label, v in m["variants"].items():
            rows = [c for c in v["per_config"] if not c["config"].startswith("only_L")]
            out += [f"### {md_text(label)}", "", _recipe_line(v), ""] + _blowup(v.get("all_quantized_ppl_ratio"), seed)
            out += _config_table(rows, seed)
            notes = {c["disparity_note"] for c in rows if c["disparity_note"] and not c.get("broken")}
            out += [""] + [f"- disparity undefined where {md_text(note)}" for note in sorted(notes)] + [""]
            out += _seed_verdicts(v["verdicts"]) if seed else _verdicts(v["verdicts"])
            out += ["", "Mean degradation per language (columns) and configuration:", "",
                    _per_language(result.table, model, v, [c["config"] for c in rows])]
            out += _layer_errors(v)
            if "sweep" in v:
                out += ["", "Most sensitive single layer per language (largest NLL increase): "
                        + ", ".join(f"{md_text(lang)} L{layer}" for lang, layer in v["most_sensitive_layer"].items())
                        + "."]
            out.append("")
    return "\n".join(out)


def _recipe_line(v: VariantSummary) -> str:
    """Which recipe produced this variant's numbers, and where it comes from."""
    recipe = RECIPES.get(v.get("recipe", "custom"))
    how = f"{md_text(v['scheme'])} scale, {'linear-layer weights' if v['targets'] == 'linear' else 'every weight'}"
    if recipe is None:
        return f"Recipe: custom ({how}, {v.get('bits', '?')}-bit)."
    return f"Recipe: **{recipe.name}** ({how}, {v.get('bits', '?')}-bit): {recipe.source}."


def _passes(reuse: dict | None) -> list[str]:
    """How the forward passes ran: with prefix reuse, how much of the decoder they computed."""
    if not reuse:
        return []
    if not reuse["on"]:
        return [f"Forward passes: {reuse['passes']}, every one whole (prefix reuse off).", ""]
    gib = 2**30
    return [f"Forward passes: {reuse['passes']}, {reuse['passes'] - reuse['whole_passes']} of them started past "
            f"layer 0 from a residual stream an earlier pass kept (prefix reuse): {reuse['layers_run']:,} of "
            f"{reuse['layers_whole']:,} decoder-layer computations run; at most {reuse['peak_streams']} streams "
            f"kept at once ({reuse['peak_bytes'] / gib:.3g} GiB of a {reuse['budget_bytes'] / gib:.3g} GiB budget)"
            + (f"; {reuse['whole_by_budget']} passes ran whole because their stream did not fit"
               if reuse["whole_by_budget"] else "") + ".", ""]


def _layer_errors(v: VariantSummary) -> list[str]:
    """Per layer: the weights' relative error and the SQNR of the layer's output on its full-precision input, with
    (--sweep) the delta NLL of quantizing that layer alone per language, and their Spearman correlation."""
    errors = v.get("layer_error") or []
    if not errors:
        return []
    sweep = {(r["layer"], r["lang"]): r["delta_nll"] for r in v.get("sweep", [])}
    langs = list(dict.fromkeys(lang for _, lang in sweep))
    out = ["", "Each quantized layer's own error: SQNR = 10 log10(sum ||y||^2 / sum ||y - y_q||^2) of the layer's "
           "output, full-precision y against quantized y_q on the same (full-precision) input, so damage passed on "
           "from the layers below does not enter it; the same in every configuration that quantizes the layer"
           + (". Beside it, the mean delta NLL per language of quantizing that layer alone (--sweep)." if langs
              else "."), "",
           md_table(["layer", "weight rel. error", "SQNR (dB)", "SQNR without first token (dB)",
                     *(f"delta NLL {md_text(lang)} (bits/token)" for lang in langs)],
                    [[e["layer"], number(e["weight_rel_err"], 4), number(e["sqnr_db"], 2),
                      number(e["sqnr_db_excl_pos0"], 2),
                      *(number(bits(sweep.get((e["layer"], lang))), 3) for lang in langs)]
                     for e in errors])]
    corr = v.get("sqnr_vs_sweep")
    if corr:
        def rho(r, p):
            return "undefined" if r is None else f"{r:+.2f} (p = {p:.2g})"
        out += ["", f"Spearman rho of SQNR with the mean delta NLL over layers (n = {corr['n_layers']}): "
                f"{rho(corr['rho'], corr['p'])}; first token left out: "
                f"{rho(corr['rho_excl_pos0'], corr['p_excl_pos0'])}"
                ". Negative: the layers with the least SQNR are the ones whose quantization hurts most."]
    return out


def _method(config: dict) -> str:
    if config.get("compat") == NOTEBOOKS:
        return ("Method: **notebooks mode**: the notebook's quantization (one scale per tensor, every parameter "
                "named 'weight' in a layer, norm weights included) and its truncation at 256 tokens.")
    return ("Method: the notebook quantizes every parameter named 'weight' in a layer (norm weights included) "
            "with one scale per tensor; layerscope's default quantizes only linear-layer weights with one scale "
            "per output channel, which is how weight-only quantization is deployed. When the chosen scheme is "
            "not the notebook's, the notebook's is run as well and shown after it, for comparison. Intervals: "
            f"percentile bootstrap over texts, resampled with replacement within each language "
            f"({config.get('n_bootstrap', 10_000):,} resamples, seed {config.get('seed', 42)}; every configuration "
            "on the same resamples). H5 is SUPPORTED only when the reduction's interval lies above 30%, "
            "NOT_SUPPORTED when below, INCONCLUSIVE otherwise, and NOT_APPLICABLE when low-resource languages do "
            "not degrade more than high-resource ones with every layer quantized (D_LR / D_HR <= 1); leaving out "
            "one language at a time shows whether a single language decides it. \"More critical\" and "
            "\"synergistic\" need an interval of the difference that excludes 0. A configuration that multiplies "
            f"the median text's perplexity by more than {BROKEN_PPL_RATIO:g} is \"model broken, undetermined\".")


def _blowup(ratio: float | None, seed: bool) -> list[str]:
    if ratio is None:
        return []
    line = f"Quantizing every layer multiplies the median text's perplexity by {ratio:.3g}."
    if ratio > BROKEN_PPL_RATIO and not seed:
        line += (f" Above {BROKEN_PPL_RATIO:g}x the model no longer works: such a configuration is \"model broken, "
                 "undetermined\", with no disparity ratio, no reduction and no H5 percentage (its degradations "
                 "measure the breakage). Read the delta NLL columns, or a scheme that keeps the model usable.")
    elif ratio > 100:
        line += (" The model no longer works at that scale: degradations are huge "
                 "and the disparity ratio divides one broken model's numbers by another's, so its H5 verdict "
                 "means nothing. Read the delta NLL columns, or a scheme that keeps the model usable.")
    return [line, ""]


def _per_language(table, model: str, v: VariantSummary, configs: list[str]) -> str:
    rows = table[(table["model"] == model) & (table["metric"] == "degradation") & (table["scheme"] == v["scheme"])
                 & (table["targets"] == v["targets"]) & table["config"].isin(configs)]
    means = rows.groupby(["config", "lang"], sort=False)["value"].mean().unstack()
    langs = list(dict.fromkeys(rows["lang"]))
    return md_table(["config", *map(md_text, langs)],
                    [[md_text(c), *(readable(means.loc[c, lang], 3) for lang in langs)] for c in configs])


def _config_table(rows: list[ConfigRow], seed: bool) -> list[str]:
    """The per-configuration table: the notebook's columns in notebooks mode; with the perplexity blow-up,
    the disparity's bootstrap interval and "broken (ppl x...)" in place of a ratio otherwise."""
    def broken(c: ConfigRow) -> str:
        return f"broken (ppl x{c['median_ppl_ratio']:.4g})"

    if seed:
        return [md_table(
            ["config", "layers quantized", "mean ppl", "mean degradation", "D_HR", "D_LR", "disparity",
             "reduction vs all", "delta NLL HR (bits/token)", "delta NLL LR (bits/token)"],
            [[md_text(c["config"]), c["n_quantized"], readable(c["mean_ppl"], 4), readable(c["mean_degradation"], 4),
              readable(c["d_hr"], 4), readable(c["d_lr"], 4), _ratio(c["disparity_ratio"]),
              "n/a" if c["reduction_pct"] is None else f"{c['reduction_pct']:+.1f}%",
              number(bits(c["delta_nll_hr"]), 3), number(bits(c["delta_nll_lr"]), 3)] for c in rows])]
    return [md_table(
        ["config", "layers quantized", "median ppl / baseline", "mean degradation", "D_HR", "D_LR", "disparity",
         "disparity CI", "reduction vs all", "delta NLL HR (bits/token)", "delta NLL LR (bits/token)"],
        [[md_text(c["config"]), c["n_quantized"], readable(c.get("median_ppl_ratio"), 3),
          readable(c["mean_degradation"], 4),
          readable(c["d_hr"], 4), readable(c["d_lr"], 4),
          broken(c) if c.get("broken") else _ratio(c["disparity_ratio"]),
          "" if c.get("broken") else _ci(c.get("disparity_ci")),
          broken(c) if c.get("broken") else "n/a" if c["reduction_pct"] is None else f"{c['reduction_pct']:+.1f}%",
          number(bits(c["delta_nll_hr"]), 3), number(bits(c["delta_nll_lr"]), 3)] for c in rows])]


def _seed_verdicts(verdict: Verdicts) -> list[str]:
    """The notebook's verdict lines, marked as its rule (point estimates, no intervals)."""
    h5, out = verdict["h5"], []
    out.append(f"**H5: {h5['result']}**" + (f" ({h5['reduction_pct']:.1f}% reduction with gateway layers "
                                             "protected; the notebook's rule: > 30%, no interval)."
                                             if h5.get("reduction_pct") is not None
                                             else f" ({md_text(h5.get('reason'))})."))
    if "halves" in verdict:
        h = verdict["halves"]
        out.append(f"- First half protected: disparity {_ratio(h['first_half_protected_ratio'])}, degradation "
                   f"{readable(h['first_half_protected_degradation'], 4)}; second half protected: disparity "
                   f"{_ratio(h['second_half_protected_ratio'])}, degradation "
                   f"{readable(h['second_half_protected_degradation'], 4)}. More critical for disparity: "
                   f"{h['more_critical_for_disparity'] or 'undetermined'} layers; for degradation: "
                   f"{h['more_critical_for_degradation']} layers (the notebook's rule: the smaller point estimate).")
    if "synergy" in verdict:
        syn = verdict["synergy"]
        out.append("- Synergy: " + (f"undetermined ({md_text(syn['reason'])})" if syn["synergistic"] is None else
                                    f"expected (additive) {syn['expected_additive']:.3f}, gateway "
                                    f"{syn['gateway']:.3f} -> "
                                    + ("synergistic" if syn["synergistic"] else "no synergy")
                                    + " (the notebook's rule)"))
    return out


def _verdicts(verdict: Verdicts) -> list[str]:
    """H5 with its bootstrap interval and leave-one-language-out range; the halves and synergy labelled only
    where the interval of their difference excludes 0."""
    h5 = verdict["h5"]
    if h5.get("ci") is None:
        out = [f"**H5: {h5['result']}** ({md_text(h5['reason'])})."]
    else:
        lo, hi = h5["ci"]
        lolo = h5["lolo_range"]
        out = [(f"**H5: {h5['result']}**: protecting the gateway layers changes the disparity ratio by "
               f"{h5['reduction_pct']:+.1f}% ({h5['level']:.0%} bootstrap CI over texts [{lo:+.1f}, {hi:+.1f}]%, "
               f"{h5['n_resamples']:,} resamples within each language; threshold {H5_THRESHOLD:g}%: SUPPORTED needs "
               "the whole interval above it, NOT_SUPPORTED below it, else INCONCLUSIVE)."),
               "- Leave one language out: " + (f"{lolo[0]:+.1f}% to {lolo[1]:+.1f}%" if lolo else "undefined")
               + " (" + ", ".join(f"without {md_text(lang)} {'n/a' if x is None else f'{x:+.1f}%'}"
                                  for lang, x in h5["without_language"].items())
               + f"): {md_text(h5['short_robustness'])}."]
        if h5.get("n_undefined"):
            out.append(f"- {h5['n_undefined']} resamples left out: a disparity ratio was undefined in them.")
    if "halves" in verdict:
        h = verdict["halves"]
        level = f"{h['level']:.0%} CI"
        out.append(f"- First half protected: disparity {_ratio(h['first_half_protected_ratio'])}, degradation "
                   f"{readable(h['first_half_protected_degradation'], 4)}; second half protected: disparity "
                   f"{_ratio(h['second_half_protected_ratio'])}, degradation "
                   f"{readable(h['second_half_protected_degradation'], 4)}. More critical for disparity: "
                   + _critical(h["more_critical_for_disparity"], h.get("disparity_diff"), h["disparity_diff_ci"], level,
                               h.get("disparity_reason"))
                   + "; for degradation: "
                   + _critical(h["more_critical_for_degradation"], h["degradation_diff"], h["degradation_diff_ci"],
                               level, h.get("degradation_reason")) + ".")
    if "synergy" in verdict:
        syn = verdict["synergy"]
        out.append("- Synergy: " + (f"undetermined ({md_text(syn['reason'])})" if "reason" in syn else
                                    f"expected (additive) {syn['expected_additive']:.3f}, gateway {syn['gateway']:.3f}"
                                    f", difference {syn['difference']:+.3f} ({syn['level']:.0%} CI "
                                    f"{_ci(syn['difference_ci'])}) -> {syn['label']}"))
    return out


def _critical(label: str | None, diff: float | None, ci: list[float] | None, level: str, why: str | None) -> str:
    """``"late layers (first - second half protected +0.31, 95% CI [+0.12, +0.50])"`` or ``"not significant
    (...)"``."""
    if label is None:
        return f"undetermined ({md_text(why)})"
    what = f"{label} layers" if label in ("early", "late") else label
    return f"{what} (first - second half protected {readable(diff, 3)}, {level} {_ci(ci)})"
