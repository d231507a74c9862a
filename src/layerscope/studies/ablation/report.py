"""Ablation report: per-configuration table, H5, sensitivity, synergy, scheme comparison, sweep."""

from __future__ import annotations

from ...report.markdown import md_table, method_line, number
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
           method_line(result.config), "",
           "The notebook quantizes every parameter named 'weight' in a layer (norm weights included) with one "
           "scale per tensor; layerscope's default quantizes only linear-layer weights, one scale per output "
           "channel, which is how weight-only quantization is deployed. Both are shown below when they differ.", ""]
    for model, m in s["models"].items():
        out += [f"## {model} ({m['n_layers']} decoder layers)", ""]
        for label, v in m["variants"].items():
            rows = [c for c in v["per_config"] if not c["config"].startswith("only_L")]
            out += [f"### {label}", ""]
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
            if "sweep" in v:
                out += ["", "Most sensitive single layer per language (largest NLL increase): "
                        + ", ".join(f"{lang} L{layer}" for lang, layer in v["most_sensitive_layer"].items()) + "."]
            out.append("")
    return "\n".join(out)
