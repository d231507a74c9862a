"""Atlas study: the field's standard per-layer measures on any causal LM, from one streamed pass.

Per layer: the logit lens (cross-entropy, entropy, KL to the final layer, top-1 agreement; with ``tuned_lens``,
the same through a tuned lens, whose profile then votes in the lens family), block influence and
angular distance, linear CKA between layers (and between models), TwoNN intrinsic dimension, prompt and dataset
matrix entropy, massive activations, the residual norm and the covariance top-1 share (anisotropy); then the
change points of each profile over depth, beside the phases study's thirds and the anisotropy L*.

    result = Atlas().run(StudyConfig(study="atlas", max_tokens=20_000))     # tuned_lens="auto" or a lens folder
    s: AtlasModel = result.summary["models"]["smollm2-135m"]
    s["boundaries"]["consensus"], s["boundaries"]["thirds"], s["l_star"]
    result.table.query("metric == 'lens_kl'")
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ...data.texts import MIN_TEXTS, load_texts
from ...engine.atlas.stream import atlas_pass
from ...engine.atlas.sums import CONVENTIONS
from ...engine.lenses.tuned_cache import resolve_lens
from ...errors import short
from ...measures.intrinsic import ESTIMATORS
from ...modes import NOTEBOOKS
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import add_timings, manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import (
    LAYERS_HELP,
    ConfigError,
    Settings,
    by_compat,
    check_count,
    layers_setting,
    select_layers,
    setting,
)
from .analysis import VERDICT_METRICS, analyse_pass, cross_model_rows
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .report import headline_line
from .report import report as write_report
from .summary import AtlasModel, AtlasSummary

MIN_RESAMPLES, MAX_RESAMPLES = 20, 10_000
"""Bounds of ``--boundary-resamples``: fewer cannot give a 95 % interval; more multiplies the analysis time."""
MAX_TOKENS = 10**9
"""Bound of ``--max-tokens`` (the pass streams, so only time grows with it)."""


@dataclass(frozen=True)
class AtlasSettings(Settings):
    texts: str | None = setting("Texts to measure: a text file, one per line (blank lines and '# ' lines skipped), "
                                "or a languages .json file (every language's texts); default: the bundled pair "
                                "statements and prompts.", file=True)
    layers: str | list[int] | None = setting(f"{LAYERS_HELP} Default: all (notebooks with --compat notebooks).")
    max_tokens: int | None = setting("Measure only the first texts that fit in this many tokens together "
                                     "(default: every text).")
    boundary_resamples: int = setting("Bootstrap resamples of the texts behind each phase boundary's interval and "
                                      f"support (at least {MIN_RESAMPLES}, at most {MAX_RESAMPLES}).", default=200)
    entropy_convention: str = setting("Matrix entropy convention: 'skean' (the authors' released code: tokens "
                                      "centred, rows unit length, Gram clamped at 0) or 'raw' (the formula on the "
                                      "raw states).", default="skean")
    twonn_estimator: str = setting("TwoNN estimator: 'mle' (maximum likelihood) or 'facco' (Facco et al.'s "
                                   "regression, the largest 10 % of ratios discarded).", default="mle")
    tuned_lens: str | None = setting("Also read every layer through a tuned lens: its folder (config.json and "
                                     "params.pt, from 'layerscope train-lens' or published for the tuned-lens "
                                     "package) or 'auto' (the lens cached for the model with train-lens's "
                                     "defaults, trained now when there is none). Its profile then votes in the "
                                     "lens family; the logit lens's stays as a check.", file=True,
                                     keywords=("auto",))

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "layers", layers_setting(self.layers))
        if self.tuned_lens is not None and self.tuned_lens != "auto" and not Path(self.tuned_lens).is_dir():
            raise ConfigError(f"--tuned-lens {short(str(self.tuned_lens))} is not a folder; give a tuned lens's "
                              "folder (config.json and params.pt) or 'auto'")
        if self.max_tokens is not None:
            check_count(self.max_tokens, "--max-tokens", 2, MAX_TOKENS, "a covariance needs 2 token states; leave "
                        "it out to measure every text")
        check_count(self.boundary_resamples, "--boundary-resamples", MIN_RESAMPLES, MAX_RESAMPLES,
                    "each resample refits every measure's boundaries; 200 is the default")
        for option, value, allowed in (("--entropy-convention", self.entropy_convention, CONVENTIONS),
                                       ("--twonn-estimator", self.twonn_estimator, ESTIMATORS)):
            if value not in allowed:
                raise ConfigError(f"{option} {short(str(value))} is not one of {', '.join(allowed)}")

    @by_compat
    def layer_spec(self, compat: str | None) -> str:
        return self.layers or (NOTEBOOKS if compat == NOTEBOOKS else "all")


@register_study
class Atlas(Study):
    name = "atlas"
    title = "Layer atlas"
    question = ("Per layer, what do the field's standard measures say (logit lens, block influence, CKA, intrinsic "
                "dimension, matrix entropy, massive activations, norm), and where do they put the phase boundaries?")
    Settings = AtlasSettings
    order = 60
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        load_texts(config.texts)

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "tokens": "all"}  # block influence over every token, massive ones included

    def run(self, config: StudyConfig) -> StudyResult:
        texts = load_texts(config.texts)
        timings: dict[str, float] = {}
        summaries, rows, models, pooled = {}, [], [], {}
        for run in each_model(config, timings):
            layers = select_layers(config.layer_spec, run.info.n_layers, run.info.name)
            tuned, lens_info = None, None
            if config.tuned_lens is not None:
                tuned, _, lens_info = resolve_lens(config.tuned_lens, run.lm, train_missing=True)
                run.mark("tuned_lens_s")
            measured = atlas_pass(run.lm, texts.texts, layers=layers, batch_size=config.batch_size,
                                  max_length=config.max_length, max_tokens=config.max_tokens,
                                  convention=config.entropy_convention,
                                  tuned=tuned.translate if tuned is not None else None)
            run.mark("pass_s")
            if measured.n_texts < MIN_TEXTS:
                raise ConfigError(f"--max-tokens {config.max_tokens} keeps {measured.n_texts} text(s) of "
                                  f"{run.info.name}; the atlas needs at least {MIN_TEXTS} (TwoNN needs a first and "
                                  "a second neighbour): raise --max-tokens")
            add_timings(timings, **{f"pass_{key}": seconds for key, seconds in measured.seconds.items()})
            info = run.release()
            summary, model_rows = analyse_pass(info.name, measured, seed=config.seed,
                                               n_resamples=config.boundary_resamples, twonn=config.twonn_estimator,
                                               tuned_lens=lens_info)
            summaries[info.name] = summary
            rows += model_rows
            pooled[info.name] = (info.n_layers, measured.layers, measured.pooled)
            models.append({**model_entry(info), **({"tuned_lens": lens_info} if lens_info else {})})
            run.mark("analysis_s")
        start = time.perf_counter()
        cross = cross_model_rows(pooled, seed=config.seed)
        rows += cross
        timings["cross_model_s"] = round(time.perf_counter() - start, 3)
        dataset = {"kind": "texts", "source": texts.source, "hash": texts.hash, "n_texts": len(texts.texts),
                   "max_tokens": config.max_tokens}
        study_summary: AtlasSummary = {"models": summaries, "cross_model": sorted({r["model"] for r in cross}),
                                       "warnings": []}
        record = manifest(config, models, dataset, timings)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record, summary=study_summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """How many consensus change points, and how many of them two or more families see; the first two of those
        (% depth) and their interval widths (layers); the anisotropy L*, the layer of peak TwoNN dimension and the
        logit lens's KL half-way layer (% depth)."""
        s: AtlasModel = result.summary["models"][model]
        n, b = s["n_layers"], s["boundaries"]
        nan = float("nan")
        spans = [x for x in b["intervals"] if x["family"] == "consensus" and len(x.get("families", [])) >= 2]
        first, second = (spans + [None, None])[:2]
        return {"n_boundaries": float(len(b["consensus"] or [])), "n_shared_boundaries": float(len(spans)),
                "boundary_1_depth_pct": 100 * first["value"] / n if first else nan,
                "boundary_2_depth_pct": 100 * second["value"] / n if second else nan,
                "boundary_1_ci_width": first["ci_hi"] - first["ci_lo"] if first else nan,
                "boundary_2_ci_width": second["ci_hi"] - second["ci_lo"] if second else nan,
                "l_star": s["l_star"], "twonn_peak_layer": s["twonn_peak_layer"],
                "lens_kl_half_depth_pct": 100 * s["lens_kl_half_layer"] / n}

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model: the phase boundaries two or more families see, with their intervals and which are
        fragile, the change points one family sees alone, and the distances to the thirds and to L*."""
        summary: AtlasSummary = result.summary
        return [headline_line(model, s) for model, s in summary["models"].items()]
