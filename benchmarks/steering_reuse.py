"""Time the probe study's causal passes (removal, interchange, steering, skip) with prefix reuse against whole passes.

    .venv/bin/python benchmarks/steering_reuse.py [--model smollm2-135m] [--keep DIR] [-- extra run options]

Runs ``layerscope run probe --label-sets side --model M --n-permutations 20 --n-bootstrap 200`` (the bundled
pairs, the default causal tests: every held-out pair of every category, every tenth state, the default doses and
null directions) twice, each in its own process: with prefix reuse (the default) and with ``--no-prefix-reuse``.
Prints both wall times, the time of the causal passes alone (the manifest's ``causal_s``), their ratios, and the
largest relative difference of any number in table.csv (target: float tolerance, <= 1e-5; the probes do not
depend on the switch, so the causal rows carry any difference). The activation cache is shared, so the first run
may extract the pairs and the second reads them: compare ``causal_s``, not the wall times, when the cache was
cold.
"""

from __future__ import annotations

import argparse

from reuse_runs import largest_relative_difference, run_both

SHORT = ["--label-sets", "side", "--n-permutations", "20", "--n-bootstrap", "200"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--keep", default=None, help="write both run folders here (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more `layerscope run probe` options, after --")
    args = parser.parse_args()
    runs = run_both("probe", args.model, [*SHORT, *args.extra], args.keep)
    t_on, t_off, results, tables = runs.seconds["on"], runs.seconds["off"], runs.results, runs.tables
    causal = {name: r["manifest"]["timings"]["causal_s"] for name, r in results.items()}
    summary = next(iter(results["on"]["summary"]["models"].values()))
    contrasts = {name: e["causal"] for name, e in summary["label_sets"].items() if "causal" in e}
    first = next(iter(contrasts.values()))
    print(f"model {args.model}: {summary['n_layers']} blocks; {len(contrasts)} contrasts tested at states "
          f"{first['states']}, {sum(c['n_test_units'] for c in contrasts.values())} held-out pairs in all")
    print(f"whole run:  reuse {t_on:7.1f} s   no reuse {t_off:7.1f} s   ratio {t_off / t_on:.2f}x")
    print(f"causal_s:   reuse {causal['on']:7.1f} s   no reuse {causal['off']:7.1f} s   ratio "
          f"{causal['off'] / causal['on']:.2f}x")
    print(f"largest relative difference in table.csv: {largest_relative_difference(tables['on'], tables['off']):.1e}"
          "   (target <= 1e-5)")


if __name__ == "__main__":
    main()
