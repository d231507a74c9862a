"""The probe study's report.md and headline lines, from the result alone.

    report(result) -> str;  headline_line(model, summary) -> [str, ...]
"""

from __future__ import annotations

from ...report.markdown import md_text, number, signed
from ...study.result import StudyResult
from .analysis import LEVEL

CONVENTIONS = f"""\
## Conventions

- **States.** State 0 is the embeddings' output (the stream entering block 0); state s is block s-1's output;
  state L is the last block's output before the final norm (not transformers' last hidden state, which is after
  it). Probes and steering read the same states.
- **Vectors.** Each text's pooled vector at each state (`--pooling`, default `mean`: every real token, a leading
  BOS left out), from the activation cache: no new forward pass when an earlier study extracted the same texts.
- **Folds.** Grouped k-fold cross-validation: rows of one group (a statement pair; a text of a languages file;
  a labels file's `group`) are never split across folds; every state uses the same folds.
- **Probes.** `logreg`: standardised features (fitted on the training fold), L2 logistic regression, its C chosen
  by an inner grouped cross-validation on the training fold only. `mass_mean`: the difference of the class means,
  threshold at the midpoint (several classes: the nearest class mean), in the raw space.
- **Numbers.** Accuracy and AUROC (macro one-vs-rest for several classes) of the out-of-fold predictions, with
  percentile bootstrap intervals over groups; a permutation p per state (labels permuted across groups, or
  within a group whose rows hold several labels, as a pair's two sides) and BH q over states.
- **Control task** (Hewitt & Liang 2019): each group gets a random label with the task's class frequencies (a
  pair: its sides swapped at random); selectivity = accuracy - control accuracy, with a paired bootstrap interval.
- **Decodable from state s**: the first state from which the accuracy stays at or above the lower end of the
  best state's interval; its interval from the bootstrap.
- **Steering** (every label set with two classes: a pair dataset's side, a category, language or labels file with
  two). Class A is the first of the sorted classes (the side's A), class B the other. v_s = the mean of the training
  groups' class-A rows minus the mean of their class-B rows at state s (pairs: the mean over the training pairs of
  h_A - h_B); alpha * v_s is added at every position of state s of the held-out groups' texts. The preference is
  the mean NLL of the held-out class-B texts minus that of the class-A texts (each the mean NLL per scored token;
  pairs: the mean over pairs of NLL(B) - NLL(A)); the effect is preference(steered) - preference(intact), with a
  bootstrap interval over held-out groups. A direction the model uses moves the preference towards A (positive)
  and -alpha moves it the other way. A pass steered at s starts at block s from the intact stream kept there
  (prefix reuse; the same numbers as whole passes).
- **Steering null.** Random Gaussian directions with the norm of v_s (seeded; `--n-random`): their effects' band,
  and p from a prediction t-test of the effect against their effects (t = (effect - mean) / (sd * sqrt(1 + 1/n)),
  n - 1 degrees of freedom), BH over the states steered; the table's `p_rank` is the rank p
  (1 + #|random| >= |effect|) / (1 + n_random), which with 20 directions cannot go below 1/21.
- **Verdicts** hold at BH q < {LEVEL}; a probe verdict is fragile when its selectivity interval reaches 0 or the
  mass-mean probe is not significant at the best state; a steering verdict is fragile when -alpha does not flip the
  sign. Per two-class set, the states where it is decodable but steering is not significant, and the reverse.
- **Beside it** (in a suite that ran them): the figures' last panel shows divergence's UA per state (mean pooling,
  mean over categories) and surgery's cost of skipping block b, drawn at b + 0.5 (the block maps state b to b + 1).
"""


def states(values: list[int]) -> str:
    return ", ".join(map(str, values)) if values else "none"


def headline_line(model: str, s: dict) -> list[str]:
    lines = []
    for name, entry in s["label_sets"].items():
        p = entry["probes"]["logreg"]
        where = ("not decodable" if p["best_q"] >= LEVEL else
                 f"decodable from state {p['decodable_from']}" if p["decodable_from"] is not None else
                 "decodable at its best state but not stably from any state on")
        line = (f"{model}: {md_text(name)}: {where}; best accuracy {number(p['best_accuracy'])} at state "
                f"{p['best_state']} (q = {number(p['best_q'])}, selectivity {signed(p['best_selectivity'])})")
        if "steering" in entry:
            st = entry["steering"]
            line += (f"; steering moves the preference at states {states(st['used_states'])} (largest "
                     f"{signed(st['best_effect'])} at state {st['best_state']}, q = {number(st['best_q'])})")
        lines.append(line)
    return lines


def report(result: StudyResult) -> str:
    out = ["# Probe and steer", "", "Per hidden state: is the contrast linearly decodable, and does pushing the "
           "residual stream along it move the model's preference?", ""]
    for model, s in result.summary["models"].items():
        out += [f"## {md_text(model)}", ""]
        out += [f"- {line}" for line in headline_line(model, s)] + [""]
        out += ["| label set | method | best state | accuracy | interval | q | selectivity | decodable from |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, entry in s["label_sets"].items():
            for method, p in entry["probes"].items():
                out.append(f"| {md_text(name)} | {method} | {p['best_state']} | {number(p['best_accuracy'])} | "
                           f"[{number(p['best_ci'][0])}, {number(p['best_ci'][1])}] | {number(p['best_q'])} | "
                           f"{signed(p['best_selectivity'])} | {p['decodable_from']} |")
        out.append("")
        for name, entry in s["label_sets"].items():
            if "steering" not in entry:
                continue
            st, c = entry["steering"], entry["contrast"]
            unit = "pairs" if name == "side" else "groups"
            split = f"in-sample (fitted and measured on all {unit})" if st["in_sample"] else \
                f"{st['n_train_pairs']} training {unit}, {st['n_test_pairs']} held-out {unit}"
            out += [f"Steering along {md_text(name)} ({split}; alpha {', '.join(map(str, st['alphas']))}): "
                    f"used at states {states(st['used_states'])}; Spearman rho between the probe and steering "
                    f"profiles {signed(st['rho_probe_steer'])} (p = {number(st['rho_p'])}). Decodable but steering "
                    f"null at states {states(c['decodable_not_used'])}; steering moves it where it is not "
                    f"decodable at states {states(c['used_not_decodable'])}.", ""]
        if s.get("companions"):
            seen = "; ".join(md_text(entry["what"]) for entry in s["companions"].values())
            out += [f"The figures' last panel shows, from this run's other studies: {seen}. A block's skip cost is "
                    "drawn between the states it maps (block b: from state b to b + 1).", ""]
    return "\n".join(out) + "\n" + CONVENTIONS
