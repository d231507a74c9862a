"""Write the tuned lens's recorded numbers on SmolLM2 into the pages that quote them.

    .venv/bin/python tools/lens_findings.py            # rewrite the blocks from docs/results/tuned-lens-smollm2/
    .venv/bin/python tools/lens_findings.py --check    # exit 1 when a page differs (tests/test_lens_findings runs it)

Reads, from ``docs/results/tuned-lens-smollm2/``: ``config.json`` (the lens ``train-lens --model smollm2-135m``
made at its defaults, with its record: timing, budget, held-out and in-sample metrics), ``benchmark.json``
(``benchmarks/tuned_lens_train.py``: the default against 0.2's 250-step recipe on the same split),
``paper_budget_h200.json`` (``benchmarks/tuned_lens_paper_budget.py`` on a lent GPU) and ``made.json`` (the commit
and day of the runs, and ``make run``'s measured wall time on a fresh clone). It rewrites the blocks between
``<!-- NAME:start -->`` and ``<!-- NAME:end -->``:``lens-headline`` in README.md,
``lens-findings`` in docs/cli.md, and ``lens-grid`` in README.md from ``grid.txt`` (what ``layerscope lens "The
capital of France is" --tuned auto`` printed through that lens). Nothing in those blocks is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pages import write_blocks

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "results" / "tuned-lens-smollm2"
MODEL = "SmolLM2-135M-Instruct (Q4_1 GGUF, layerscope's `smollm2-135m`)"
SHOWN = (1, 15, 29)
"""The states the README quotes."""


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def load(name: str) -> dict:
    return json.loads((KEPT / name).read_text(encoding="utf-8"))


def lens_record() -> dict:
    return load("config.json")["layerscope"]


def comparison(bench: dict) -> tuple[list[bool], int]:
    meets = bench["meets_bar"][:-1]  # the last state is the model itself (KL 0 for both)
    return meets, sum(meets)


def headline(record: dict, bench: dict, made: dict) -> str:
    held, inside = record["heldout"], record["in_sample"]["metrics"]
    tokens = record["tokens"]
    pairs = "; ".join(f"state {s} {held['metrics']['tuned_kl'][s]:.2f} vs {held['metrics']['logit_kl'][s]:.1f}"
                      for s in SHOWN)
    gaps = ", ".join(f"{inside['tuned_kl'][s]:.2f}" for s in SHOWN)
    old = bench["runs"]["0.2 recipe"]
    new = bench["runs"]["default"]
    old_kl = old["record"]["heldout"]["metrics"]["tuned_kl"]
    meets, n_meet = comparison(bench)
    return "\n".join([
        f"On {MODEL}, `train-lens` at its defaults took **{minutes(record['seconds']['wall'])}** on this 2-core "
        f"CPU, from the command's start to the saved lens ({made['lens']['day']}, in `make run` on a fresh clone"
        + (f", {made['lens']['machine']}" if "machine" in made["lens"] else "") + "; "
        f"model load, the model's samples, one pass, the least-squares start, {record['steps']} KL steps and the "
        f"evaluation). Its budget: {record['steps']} steps x "
        f"{record['tokens_per_step']} tokens = {tokens['token_draws']:,} token-draws over {tokens['train_rows']:,} "
        f"training tokens ({tokens['distinct_train_rows']:,} distinct prefixes); Belrose et al. take "
        f"{tokens['paper_tokens_per_step']:,} tokens per step, {tokens['paper_token_draws']:,} token-draws in all.",
        "",
        f"Held out ({held['tokens']:,} tokens of {held['texts']} texts: a pair's statements and each sample's "
        "source on one side of the split, and only positions whose prefix no training text starts with), the "
        f"tuned lens's KL to the final distribution against the logit lens's, bits/token: {pairs}. In sample "
        f"(512 training tokens) the tuned lens scores {gaps} at those states. Against layerscope 0.2's recipe "
        f"(250 SGD steps of 8 texts from the logit lens) on the same split, in one run of "
        f"`benchmarks/tuned_lens_train.py` ({made['benchmark']['machine']}): the default's training and "
        f"evaluation took {new['seconds']:.0f} s, that recipe's {old['seconds']:.0f} s "
        f"({old['seconds'] / new['seconds']:.0f}x), and the default's held-out KL is inside "
        f"its 95 % interval or at most 0.1 bits/token worse at {n_meet} of {len(meets)} states (state 15: "
        f"{new['record']['heldout']['metrics']['tuned_kl'][15]:.2f} vs {old_kl[15]:.2f}).",
    ])


def findings(record: dict, bench: dict, gpu: dict, made: dict) -> str:
    held, inside = record["heldout"]["metrics"], record["in_sample"]["metrics"]
    ci = record["heldout"]["intervals"]["tuned_kl"]
    old = bench["runs"]["0.2 recipe"]["record"]["heldout"]
    meets, n_meet = comparison(bench)
    lines = [
        f"From one run of `layerscope train-lens --model smollm2-135m` on {MODEL} ({made['lens']['day']}, commit "
        f"{made['lens']['commit']}; kept in `docs/results/tuned-lens-smollm2/config.json`): "
        f"{minutes(record['seconds']['wall'])} on a 2-core CPU, "
        + ", ".join(f"{k} {v:.0f} s" for k, v in record["seconds"].items() if k != "wall") + ". "
        f"Settings: init {record['init']} (ridge {record['ridge']:g}), {record['optimizer_description']}, "
        f"{record['schedule']}, {record['steps']} steps of {record['tokens_per_step']} tokens, the normaliser read "
        f"on a {record['normaliser']}, head products in {record['head_dtype']} (loss and evaluation float32).",
        "",
        f"Every state in bits per token: held out ({record['heldout']['tokens']:,} tokens of "
        f"{record['heldout']['texts']} texts), in sample (512 training tokens), and the held-out KL of 0.2's "
        f"250-step recipe trained on the same split (`benchmarks/tuned_lens_train.py`; the default meets "
        f"\"inside its interval or at most 0.1 worse\" at {n_meet} of {len(meets)} states). State 30 is the "
        "model's output.",
        "",
        "| state | KL logit lens, held out | KL tuned lens, held out [95 %] | KL tuned lens, in sample "
        "| CE logit lens | CE tuned lens | KL 0.2 recipe, held out [95 %] |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    o_kl, o_ci = old["metrics"]["tuned_kl"], old["intervals"]["tuned_kl"]
    for s in range(len(held["tuned_kl"])):
        lines.append(f"| {s} | {held['logit_kl'][s]:.3f} | {held['tuned_kl'][s]:.3f} [{ci[s][0]:.2f}, {ci[s][1]:.2f}] "
                     f"| {inside['tuned_kl'][s]:.3f} | {held['logit_ce'][s]:.3f} | {held['tuned_ce'][s]:.3f} "
                     f"| {o_kl[s]:.3f} [{o_ci[s][0]:.2f}, {o_ci[s][1]:.2f}] |")
    last = o_kl[-1]
    if last != 0:  # the benchmark ran before the last state's KL was set to exactly 0
        lines += ["", f"The benchmark ran on the tree just before commit {made['benchmark']['before']}, whose only "
                  f"difference in these numbers is state {len(o_kl) - 1}: there it recorded KL {last:.3f} "
                  "(float32 rounding of a KL that is 0 by definition, the model against itself); the lens above "
                  "records exactly 0."]
    g = gpu["runs"]
    big = g["paper budget"]["record"]
    small = g["default"]["record"]
    lines += [
        "",
        f"On a lent {gpu['device']} (`benchmarks/tuned_lens_paper_budget.py`, {gpu['dtype']} model, "
        f"{made['gpu']['day']}): the defaults took {g['default']['seconds']:.1f} s after sampling; "
        f"{big['steps']} steps of {big['tokens_per_step']:,} tokens (the paper's tokens per step, "
        f"{big['tokens']['token_draws']:,} token-draws of the same {big['tokens']['train_rows']:,} rows) took "
        f"{g['paper budget']['seconds']:.1f} s, {big['seconds']['steps'] / big['steps']:.1f} s a step, so the "
        f"paper's 250 steps would take about {250 * big['seconds']['steps'] / big['steps'] / 60:.0f} min there "
        f"(not run: one command may run 10 min). Those {big['steps']} steps end at held-out KL "
        + ", ".join(f"{big['heldout']['metrics']['tuned_kl'][s]:.2f}" for s in SHOWN)
        + f" at states {', '.join(map(str, SHOWN))}, against the defaults' "
        + ", ".join(f"{small['heldout']['metrics']['tuned_kl'][s]:.2f}" for s in SHOWN)
        + ": with Adam a step's size does not grow with its tokens, and this corpus has far fewer distinct tokens "
        "than one such step draws.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs; write nothing")
    args = parser.parse_args()
    record, bench, gpu, made = lens_record(), load("benchmark.json"), load("paper_budget_h200.json"), load("made.json")
    grid = "```text\n" + (KEPT / "grid.txt").read_text(encoding="utf-8").rstrip("\n") + "\n```"
    blocks = {"README.md": {"lens-headline": headline(record, bench, made), "lens-grid": grid},
              "docs/cli.md": {"lens-findings": findings(record, bench, gpu, made)}}
    stale = write_blocks(ROOT, blocks, args.check)
    if args.check and stale:
        print(f"not what {KEPT} gives: {', '.join(stale)}; run tools/lens_findings.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
