"""Probe study: per hidden state, is a contrast linearly decodable (probes with a control task), and does pushing
the residual stream along it move the output (steering with random directions as the null)?

    result = Probe().run(StudyConfig(study="probe", label_sets="side,category"))
    s = result.summary["models"]["smollm2-135m"]["label_sets"]["side"]
    s["probes"]["logreg"]["decodable_from"], s["steering"]["used_states"], s["contrast"]
    result.table.query("label_set == 'side' and method == 'steer' and alpha == 1.0")
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...data import load_pairs
from ...engine import extract
from ...engine.probing import state_vectors
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import dataset_entry, manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import ConfigError, Settings, check_count, check_n_bootstrap, setting
from .analysis import ProbeOptions, analyse_model
from .claims import claims as study_claims
from .companions import COMPANIONS
from .companions import join as join_companions
from .figures import figures as draw_figures
from .labels import LabelTask, label_tasks, parse_sets
from .report import headline_line
from .report import report as write_report
from .steering import SteerOptions


@dataclass(frozen=True)
class ProbeSettings(Settings):
    dataset: str | None = setting("Statement-pair dataset file (.json, .jsonl, .csv): the side and category "
                                  "contrasts; default: the bundled pairs.", file=True)
    labels: str | None = setting("Your own labels: a CSV or JSONL file of text,label[,group] (rows of one group "
                                 "are never split across folds); probed beside the label sets.", file=True)
    texts: str | None = setting("Languages file for the language label set (the ablation study's format); "
                                "default: the bundled one.", file=True)
    label_sets: str = setting("Which built-in contrasts to probe: any of side, category, language, "
                              "comma-separated (language: the languages file's texts, extracted too).",
                              default="side,category")
    pooling: str = setting("Pooling of the vectors the probes read and the steering direction is made of: mean, "
                           "last, first.", default="mean")
    folds: int = setting("Grouped cross-validation folds (a group is never split).", default=5)
    n_bootstrap: int = setting("Bootstrap resamples (over groups; over held-out pairs or groups for steering).",
                               default=1000)
    n_permutations: int = setting("Label permutations for each state's probe p.", default=100)
    steer: bool = setting("Steer along every two-class contrast per state (the pair side; a labels file, "
                          "category or language set with two classes; needs the model again; --no-steer: probes "
                          "only).", default=True)
    alpha: str = setting("Steering coefficients, comma-separated (1.0: the full difference of means).",
                         default="1.0")
    n_random: int = setting("Random directions of the same norm per state: the steering null.", default=20)
    steer_holdout: float = setting("Share of pairs or groups held out to measure steering, both classes among them "
                                   "(0: fit and measure on every pair or group, in-sample, for checking by hand).",
                                   default=0.5)
    steer_pairs: int = setting("At most this many held-out pairs or groups are steered (each state costs 2 x "
                               "alphas + n-random passes over their texts).", default=8)
    steer_every: int = setting("Steer at states 0, k, 2k, ... and the last (1: every state; the default 3 keeps "
                               "the study within about 5 minutes on a 2-core CPU).", default=3)
    prefix_reuse: bool = setting("Start each steered pass at the state steered, from the residual stream the intact "
                                 "pass kept there (same numbers, less compute).", default=True)

    def __post_init__(self):
        super().__post_init__()
        parse_sets(self.label_sets)
        if self.pooling not in ("mean", "last", "first"):
            raise ConfigError(f"unknown pooling {self.pooling!r} for the probes; use mean, last or first")
        check_count(self.folds, "--folds", 2, 20, "grouped cross-validation needs at least two folds")
        check_n_bootstrap(self.n_bootstrap)
        check_count(self.n_permutations, "--n-permutations", 20, 100_000, "a permutation p needs 20 or more")
        check_count(self.n_random, "--n-random", 20, 10_000, "the random band needs at least 20 directions")
        check_count(self.steer_pairs, "--steer-pairs", 2, 1_000_000, "an interval over pairs or groups needs two")
        check_count(self.steer_every, "--steer-every", 1, 4096, "1 steers at every state")
        if not 0 <= self.steer_holdout < 1:
            raise ConfigError(f"--steer-holdout {self.steer_holdout} must lie in [0, 1): the share of pairs or "
                              "groups held out (0: in-sample)")
        self.alphas()

    def alphas(self) -> tuple[float, ...]:
        try:
            values = tuple(float(a) for a in str(self.alpha).split(",") if a.strip())
        except ValueError:
            values = ()
        if not values or not all(np.isfinite(values)) or any(a <= 0 for a in values):
            raise ConfigError(f"--alpha {self.alpha!r} must be positive numbers, comma-separated (e.g. 1.0 or "
                              "0.5,1,2); the sign flip -alpha is always measured too")
        return values


@register_study
class Probe(Study):
    name = "probe"
    title = "Probe and steer"
    question = ("Per hidden state, is a contrast linearly decodable (beyond a control task), and does adding its "
                "direction to the residual stream move the model's preference (beyond random directions)?")
    Settings = ProbeSettings
    order = 80
    verdict_metrics = ("accuracy", "effect")

    def check_inputs(self, config: StudyConfig) -> None:
        label_tasks(parse_sets(config.label_sets), load_pairs(config.dataset), config.texts, config.labels,
                    config.folds)

    def main_view(self, config: StudyConfig) -> dict:
        return {"label_set": "side", "method": "logreg"}

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = load_pairs(config.dataset)
        tasks = label_tasks(parse_sets(config.label_sets), pairs, config.texts, config.labels, config.folds)
        timings: dict[str, float] = {}
        steer = SteerOptions(config.settings.alphas(), config.n_random, config.steer_holdout, config.steer_pairs,
                             config.n_bootstrap, config.ci_level, config.seed, config.steer_every,
                             config.batch_size, config.max_length, prefix_reuse=config.prefix_reuse,
                             timings=timings) if config.steer else None
        options = ProbeOptions(config.folds, config.n_bootstrap, config.n_permutations, config.seed,
                               config.ci_level, steer)
        summaries, rows, models = {}, [], []
        for run in each_model(config, timings):
            n = run.info.n_layers
            cached: dict[tuple[str, ...], object] = {}

            def states_of(task: LabelTask, run=run, n=n, cached=cached) -> np.ndarray:
                if task.texts not in cached:
                    cached[task.texts] = extract(run.lm, list(task.texts), layers=list(range(n + 1)),
                                                 compat=config.compat, batch_size=config.batch_size,
                                                 max_length=config.max_length, store_dtype=config.store_dtype,
                                                 cache=config.cache)
                acts = cached[task.texts]
                return state_vectors(acts, config.pooling)

            summaries[run.info.name], model_rows = analyse_model(run.info.name, n, run.lm, tasks, states_of,
                                                                 options)
            rows += model_rows
            models.append(model_entry(run.info, next(iter(cached.values()), None)))
            run.mark("analysis_s")
        warnings = [f"{model}: label set {name} was not probed: {why}" for model, s in summaries.items()
                    for name, why in s.pop("skipped", {}).items()]
        summary = {"models": summaries, "warnings": warnings}
        return StudyResult(study=self.name, config=config.to_dict(),
                           manifest=manifest(config, models, dataset_entry(pairs), timings), summary=summary,
                           table=make_table(rows))

    companions = COMPANIONS
    join = staticmethod(join_companions)
    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def headline(self, result: StudyResult) -> list[str]:
        return [line for model, s in result.summary["models"].items() for line in headline_line(model, s)]

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        s = result.summary["models"][model]["label_sets"]
        out = {}
        for name, entry in s.items():
            probe = entry["probes"]["logreg"]
            out[f"{name}_best_accuracy"] = probe["best_accuracy"]
            if probe["decodable_from"] is not None:
                out[f"{name}_decodable_from"] = float(probe["decodable_from"])
        return out
