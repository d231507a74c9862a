"""Ablation report: per-configuration table, H5, sensitivity, synergy, scheme comparison, sweep."""

from __future__ import annotations

from ...report.markdown import md_table, number
from ..controls import warning_lines
from ..result import StudyResult


def _ratio(x) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def report(result: StudyResult) -> str:
    s = result.summary
    out = ["# Ablation: which layers matter most when quantized, per language?", "",
           f"Each configuration fake-quantizes a set of decoder layers to {s['bits']} bits (symmetric, round to "
           "nearest); every text's perplexity is compared with the unquantized baseline. Degradation = "
           "(ppl - baseline) / baseline, clipped at 0 as in the notebook; delta NLL = mean NLL - baseline "
           "(stays readable when perplexity explodes). Disparity = mean low-resource degradation / mean "
           "high-resource degradation. H5: protecting the first and last layers cuts the disparity by > 30%.", "",
           _method(result.config), "", *warning_lines(s)]
    for model, m in s["models"].items():
        out += [f"## {model} ({m['n_layers']} decoder layers)", ""]
        for label, v in m["variants"].items():
            rows = [c for c in v["per_config"] if not c["config"].startswith("only_L")]
            out += [f"### {label}", ""] + _blowup(v.get("all_quantized_ppl_ratio"))
            out.append(md_table(
                ["config", "layers quantized", "mean ppl", "mean degradation", "D_HR", "D_LR", "disparity",
                 "reduction vs all", "delta NLL HR", "delta NLL LR"],
                [[c["config"], c["n_quantized"], number(c["mean_ppl"], 4), number(c["mean_degradation"], 4),
                  number(c["d_hr"], 4), number(c["d_lr"], 4), _ratio(c["disparity_ratio"]),
                  "n/a" if c["reduction_pct"] is None else f"{c['reduction_pct']:+.1f}%",
                  number(c["delta_nll_hr"], 3), number(c["delta_nll_lr"], 3)] for c in rows]))
            notes = {c["disparity_note"] for c in rows if c["disparity_note"]}
            out += [""] + [f"- disparity undefined where {note}" for note in sorted(notes)] + [""]
            verdict = v["verdicts"]
            h5 = verdict["h5"]
            out.append(f"**H5: {h5['result']}**" + (f" ({h5['reduction_pct']:.1f}% reduction with gateway layers "
                                                     "protected; threshold 30%)." if h5.get("reduction_pct") is not None
                                                     else f" ({h5.get('reason')})."))
            if "halves" in verdict:
                h = verdict["halves"]
                out.append(f"- First half protected: disparity {_ratio(h['first_half_protected_ratio'])}, degradation "
                           f"{number(h['first_half_protected_degradation'], 4)}; second half protected: disparity "
                           f"{_ratio(h['second_half_protected_ratio'])}, degradation "
                           f"{number(h['second_half_protected_degradation'], 4)}. More critical for disparity: "
                           f"{h['more_critical_for_disparity'] or 'undetermined'} layers; for degradation: "
                           f"{h['more_critical_for_degradation']} layers.")
            if "synergy" in verdict:
                syn = verdict["synergy"]
                out.append("- Synergy: " + (f"undetermined ({syn['reason']})" if syn["synergistic"] is None else
                                            f"expected (additive) {syn['expected_additive']:.3f}, gateway "
                                            f"{syn['gateway']:.3f} -> "
                                            + ("synergistic" if syn["synergistic"] else "no synergy")))
            out += ["", "Mean degradation per language (columns) and configuration:", "",
                    _per_language(result.table, model, v, [c["config"] for c in rows])]
            if "sweep" in v:
                out += ["", "Most sensitive single layer per language (largest NLL increase): "
                        + ", ".join(f"{lang} L{layer}" for lang, layer in v["most_sensitive_layer"].items()) + "."]
            out.append("")
    return "\n".join(out)


def _method(config: dict) -> str:
    if config.get("compat") == "seed":
        return ("Method: **seed compat**: the notebook's quantization (one scale per tensor, every parameter "
                "named 'weight' in a layer, norm weights included) and its truncation at 256 tokens.")
    return ("Method: the notebook quantizes every parameter named 'weight' in a layer (norm weights included) "
            "with one scale per tensor; layerscope's default quantizes only linear-layer weights with one scale "
            "per output channel, which is how weight-only quantization is deployed. When the chosen scheme is "
            "not the notebook's, the notebook's is run as well and shown after it, for comparison.")


def _blowup(ratio: float | None) -> list[str]:
    if ratio is None:
        return []
    line = f"Quantizing every layer multiplies the median text's perplexity by {ratio:.3g}."
    if ratio > 100:
        line += (" The model no longer works at that scale: degradations are huge "
                 "and the disparity ratio divides one broken model's numbers by another's, so its H5 verdict "
                 "means nothing. Read the delta NLL columns, or a scheme that keeps the model usable.")
    return [line, ""]


def _per_language(table, model: str, v: dict, configs: list[str]) -> str:
    rows = table[(table["model"] == model) & (table["metric"] == "degradation") & (table["scheme"] == v["scheme"])
                 & (table["targets"] == v["targets"]) & table["config"].isin(configs)]
    means = rows.groupby(["config", "lang"], sort=False)["value"].mean().unstack()
    langs = list(dict.fromkeys(rows["lang"]))
    return md_table(["config", *langs], [[c, *(number(means.loc[c, lang], 3) for lang in langs)] for c in configs])
