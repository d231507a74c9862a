"""The probe study's settings: its section of a config file and its ``layerscope run probe`` options.

    ProbeSettings(label_sets="side", alpha="0.1,0.5", steer_every=1)   # a ConfigError names the fix
    settings.alphas(), settings.test_alpha_value()                      # the steering grid and the tested alpha
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...study.settings import ConfigError, Settings, check_count, check_n_bootstrap, setting
from .labels import parse_sets

POOLINGS = ("mean_no_pos0", "mean", "mean_no_massive", "last", "first")
"""What ``--pooling`` accepts (the engine's poolings); the first is the default."""
ERASURES = ("projection", "leace")


@dataclass(frozen=True)
class ProbeSettings(Settings):
    dataset: str | None = setting("Statement-pair dataset file (.json, .jsonl, .csv): the side contrast per category "
                                  "and pooled, and the category; default: the bundled pairs.", file=True)
    labels: str | None = setting("Your own labels: a CSV or JSONL file of text,label[,group] (rows of one group "
                                 "are never split across folds); probed beside the label sets.", file=True)
    texts: str | None = setting("Languages file for the language label set (the ablation study's format); "
                                "default: the bundled one.", file=True)
    label_sets: str = setting("Which built-in label sets to probe: any of side, category, language, "
                              "comma-separated. side: the pair side per category (side:<category>, each one "
                              "contrast, probed and tested causally) and pooled over categories (a mixture, "
                              "probed only). category: the pair's category (7 classes: probed only, a few minutes "
                              "more on a 2-core CPU).", default="side")
    pooling: str = setting("Pooling of the vectors the probes read and the directions are made of: mean_no_pos0 "
                           "(every token but position 0, the attention sink), mean (position 0 kept unless it is a "
                           "BOS), mean_no_massive, last, first.", default="mean_no_pos0")
    folds: int = setting("Grouped cross-validation folds (a group is never split).", default=5)
    n_bootstrap: int = setting("Bootstrap resamples (over groups; over held-out pairs for the causal tests).",
                               default=1000)
    n_permutations: int = setting("Label permutations for each state's probe p.", default=100)
    control_seeds: int = setting("Seeds of the Hewitt & Liang control task (random labels keyed to a recurring "
                                 "unit), averaged.", default=10)
    steer: bool = setting("Test every two-class contrast causally: removal, interchange and steering per state "
                          "(needs the model again; --no-steer: probes only).", default=True)
    alpha: str = setting("Steering doses in units of the state's mean per-token residual norm r_s, "
                         "comma-separated: h + alpha * r_s * u at every position but position 0.",
                         default="0.1,0.25,0.5")
    test_alpha: float = setting("The dose at which steering is tested against the null directions (one of "
                                "--alpha).", default=0.25)
    n_random: int = setting("Null directions per state and contrast: means of the training pairs' differences with "
                            "random signs (random relabellings of groups), removed and pushed like the real one.",
                            default=3)
    steer_holdout: float = setting("Share of the pairs or groups of each contrast held out to measure removal and "
                                   "steering, both classes among them (0: fit and measure on every pair or group, "
                                   "in-sample, for checking by hand).", default=0.5)
    steer_pairs: int = setting("At most this many held-out pairs or groups per contrast (0: every one).", default=0)
    steer_every: int = setting("Test causally at states 0, k, 2k, ... and the last (1: every state; the default "
                               "keeps the study to minutes on a CPU; on a GPU use 1).", default=10)
    include_pos0: bool = setting("Removal and steering change position 0 too (default: left alone; it holds the "
                                 "attention sink, and editing a state of norm 20,000 there makes a new model).",
                                 default=False)
    erasure: str = setting("How a direction is removed: projection (h - (h.u)u) or leace (the least-squares "
                           "concept eraser of Belrose et al. 2023, from the concept-erasure package).",
                           default="projection")
    prefix_reuse: bool = setting("Start each edited pass at the state edited, from the residual stream the intact "
                                 "pass kept there (same numbers, less compute).", default=True)

    def __post_init__(self):
        super().__post_init__()
        parse_sets(self.label_sets)
        if self.pooling not in POOLINGS:
            raise ConfigError(f"unknown pooling {self.pooling!r} for the probes; use one of {', '.join(POOLINGS)}")
        if self.erasure not in ERASURES:
            raise ConfigError(f"unknown erasure {self.erasure!r}; use projection or leace")
        check_count(self.folds, "--folds", 2, 20, "grouped cross-validation needs at least two folds")
        check_n_bootstrap(self.n_bootstrap)
        check_count(self.n_permutations, "--n-permutations", 20, 100_000, "a permutation p needs 20 or more")
        check_count(self.control_seeds, "--control-seeds", 1, 1000, "each seed refits the control probe")
        check_count(self.n_random, "--n-random", 2, 10_000, "the null's mean effect needs two directions or more")
        check_count(self.steer_pairs, "--steer-pairs", 0, 1_000_000, "0 measures every held-out pair or group")
        check_count(self.steer_every, "--steer-every", 1, 4096, "1 tests at every state")
        if not 0 <= self.steer_holdout < 1:
            raise ConfigError(f"--steer-holdout {self.steer_holdout} must lie in [0, 1): the share of pairs or "
                              "groups held out (0: in-sample)")
        self.test_alpha_value()

    def alphas(self) -> tuple[float, ...]:
        try:
            values = tuple(float(a) for a in str(self.alpha).split(",") if a.strip())
        except ValueError:
            values = ()
        if not values or not all(np.isfinite(values)) or any(a <= 0 for a in values):
            raise ConfigError(f"--alpha {self.alpha!r} must be positive finite numbers, comma-separated (e.g. "
                              "0.05,0.25,0.5, in units of the mean residual norm); -alpha is always measured too")
        if len(set(values)) < len(values):
            raise ConfigError(f"--alpha {self.alpha!r} names a dose twice; give each once")
        return tuple(sorted(values))

    def test_alpha_value(self) -> float:
        alphas = self.alphas()
        if not any(np.isclose(self.test_alpha, a) for a in alphas):
            raise ConfigError(f"--test-alpha {self.test_alpha} is not one of --alpha {self.alpha}; pick one of "
                              f"{', '.join(f'{a:g}' for a in alphas)} or add it to --alpha")
        return float(alphas[int(np.argmin(np.abs(np.array(alphas) - self.test_alpha)))])
