"""Time the probe study's steering with prefix reuse against whole passes.

    .venv/bin/python benchmarks/steering_reuse.py [--model smollm2-135m] [--keep DIR] [-- extra run options]

Runs ``layerscope run probe --label-sets side --model M --n-permutations 20 --n-bootstrap 200`` (the bundled
pairs, the default steering: 8 held-out pairs, every third state, alpha 1 and -1, 20 random directions) twice,
each in its own process: with prefix reuse (the default) and with ``--no-prefix-reuse``. Prints both wall times,
the time of the steering alone (the manifest's ``steering_s``), their ratios, and the largest relative difference
of any number in table.csv (target: float tolerance, <= 1e-5; the probes do not depend on the switch, so the
steering rows carry any difference). The activation cache is shared, so the first run may extract the pairs and
the second reads them: compare ``steering_s``, not the wall times, when the cache was cold.
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
    steering = {name: r["manifest"]["timings"]["steering_s"] for name, r in results.items()}
    summary = next(iter(results["on"]["summary"]["models"].values()))
    st = summary["label_sets"]["side"]["steering"]
    print(f"model {args.model}: {summary['n_layers']} blocks; steering at {len(st['states'])} states on "
          f"{st['n_test_pairs']} held-out pairs, alphas {st['alphas']} and their negatives")
    print(f"whole run:  reuse {t_on:7.1f} s   no reuse {t_off:7.1f} s   ratio {t_off / t_on:.2f}x")
    print(f"steering_s: reuse {steering['on']:7.1f} s   no reuse {steering['off']:7.1f} s   ratio "
          f"{steering['off'] / steering['on']:.2f}x")
    print(f"largest relative difference in table.csv: {largest_relative_difference(tables['on'], tables['off']):.1e}"
          "   (target <= 1e-5)")


if __name__ == "__main__":
    main()
