"""Time the surgery study with prefix reuse against whole passes.

    .venv/bin/python benchmarks/surgery_reuse.py [--model smollm2-135m] [--keep DIR] [-- extra run options]

Runs the whole default ``layerscope run surgery --model M`` (bundled texts, the default subset) twice, each in
its own process: with prefix reuse (the default) and with ``--no-prefix-reuse``. Prints both wall times, the
time of the passes alone (the manifest's ``passes_s``), their ratios (target >= 1.5x), the largest relative
difference of any number in table.csv (target <= 1e-5), and the compute bound: the cost of every pass whole over
the cost of the planned passes, a decoder block counted as its weights and the unembedding as vocab x hidden
(the comparison's softmaxes, the embedding lookup and attention scores left out, so the measured ratio lands
below it).
"""

from __future__ import annotations

import argparse

from reuse_runs import largest_relative_difference, run_both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--keep", default=None, help="write both run folders here (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more `layerscope run surgery` options, after --")
    args = parser.parse_args()
    runs = run_both("surgery", args.model, [*args.extra], args.keep)
    t_on, t_off, results, tables = runs.seconds["on"], runs.seconds["off"], runs.results, runs.tables
    passes = {name: r["manifest"]["timings"]["passes_s"] for name, r in results.items()}
    summary = next(iter(results["on"]["summary"]["models"].values()))
    print(f"model {args.model}: {summary['n_texts']} texts, {summary['passes_per_batch']} passes per batch")
    print(f"whole run:  reuse {t_on:7.1f} s   no reuse {t_off:7.1f} s   ratio {t_off / t_on:.2f}x")
    print(f"passes:     reuse {passes['on']:7.1f} s   no reuse {passes['off']:7.1f} s   ratio "
          f"{passes['off'] / passes['on']:.2f}x   (target >= 1.5x)")
    print(f"compute bound (blocks and unembedding by weight count): {summary['compute_bound']:.2f}x")
    print(f"largest relative difference in table.csv: {largest_relative_difference(tables['on'], tables['off']):.1e}"
          "   (target <= 1e-5)")


if __name__ == "__main__":
    main()
