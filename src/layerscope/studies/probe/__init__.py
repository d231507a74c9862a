"""Probe study: per hidden state, is a contrast linearly decodable beyond what a shallow reader gets, does the model
need it (removing its direction), and does pushing along it move the model's preference (steering)?

    result = Probe().run(StudyConfig(study="probe", label_sets="side,category"))
    s = result.summary["models"]["smollm2-135m"]["label_sets"]["side:numeric_vs_named"]
    s["probes"]["logreg"]["decodable_from"], s["causal"]["needed_states"], s["causal"]["steerable_states"]
    result.table.query("label_set == 'side:numeric_vs_named' and method == 'remove' and metric == 'damage'")
"""

from __future__ import annotations

from ...data import load_pairs
from ...engine import extract
from ...engine.forward.probing import state_vectors
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import dataset_entry, manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from .analysis import ProbeOptions, analyse_model
from .causal_run import CausalOptions
from .claims import claims as study_claims
from .companions import COMPANIONS
from .companions import join as join_companions
from .decoding import DecodeOptions
from .figures import figures as draw_figures
from .labels import LabelTask, label_tasks, parse_sets
from .report import headline_line
from .report import report as write_report
from .settings import ProbeSettings


@register_study
class Probe(Study):
    name = "probe"
    title = "Probe: decodable, and used?"
    question = ("Per hidden state, is a contrast linearly decodable beyond a shallow reader, does the model need it "
                "(removal), and does pushing along it move the model's preference (steering), beyond null "
                "directions from the residual stream's own distribution?")
    Settings = ProbeSettings
    order = 80
    verdict_metrics = ("accuracy", "gain_over_surface", "damage", "sign_effect")

    def check_inputs(self, config: StudyConfig) -> None:
        label_tasks(parse_sets(config.label_sets), load_pairs(config.dataset), config.texts, config.labels,
                    config.folds)

    def main_view(self, config: StudyConfig) -> dict:
        return {"label_set": "side", "method": "logreg"}

    def run(self, config: StudyConfig) -> StudyResult:
        pairs = load_pairs(config.dataset)
        tasks, skipped = label_tasks(parse_sets(config.label_sets), pairs, config.texts, config.labels,
                                     config.folds)
        timings: dict[str, float] = {}
        causal = CausalOptions(config.settings.alphas(), config.settings.test_alpha_value(), config.n_random,
                               config.steer_holdout, config.steer_pairs, config.n_bootstrap, config.ci_level,
                               config.seed, config.steer_every, config.batch_size, config.max_length,
                               prefix_reuse=config.prefix_reuse, include_pos0=config.include_pos0,
                               erasure=config.erasure, probe_drop=config.pooling == "mean_no_pos0",
                               timings=timings) if config.steer else None
        options = ProbeOptions(DecodeOptions(config.folds, config.n_bootstrap, config.n_permutations, config.seed,
                                             config.ci_level, config.control_seeds), causal, config.pooling)
        summaries, rows, models = {}, [], []
        for run in each_model(config, timings):
            n = run.info.n_layers
            acts: dict[tuple[str, ...], object] = {}
            pooled: dict[tuple[tuple[str, ...], str], object] = {}

            def vectors_of(task: LabelTask, pooling: str, run=run, n=n, acts=acts, pooled=pooled):
                """(n, L + 1, d) the task's pooled states; every pair task reads one extraction of the pairs."""
                texts = tuple(pairs.texts()) if task.pair_rows is not None else task.texts
                if texts not in acts:
                    acts[texts] = extract(run.lm, list(texts), layers=list(range(n + 1)), compat=config.compat,
                                          batch_size=config.batch_size, max_length=config.max_length,
                                          store_dtype=config.store_dtype, cache=config.cache)
                if (texts, pooling) not in pooled:
                    pooled[texts, pooling] = state_vectors(acts[texts], pooling)
                X = pooled[texts, pooling]
                return X[task.pair_rows] if task.pair_rows is not None else X

            summaries[run.info.name], model_rows = analyse_model(run.info.name, n, run.lm, tasks, vectors_of,
                                                                 options)
            rows += model_rows
            models.append(model_entry(run.info, next(iter(acts.values()), None)))
            run.mark("analysis_s")
        warnings = [f"label set {name} was not probed: {why}" for name, why in skipped.items()]
        warnings += [f"{model}: label set {name} was not probed: {why}" for model, s in summaries.items()
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
            out[f"{name}_best_gain"] = probe["best_gain"]
            if probe["decodable_from"] is not None:
                out[f"{name}_decodable_from"] = float(probe["decodable_from"])
            causal = entry.get("causal")
            if causal:
                out[f"{name}_needed_states"] = float(len(causal["needed_states"]))
                out[f"{name}_steerable_states"] = float(len(causal["steerable_states"]))
        return out
