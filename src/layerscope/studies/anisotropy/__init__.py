"""Anisotropy study (seed 003): covariance-spectrum metrics of token states per layer, L*,
the bell-curve test, outlier dimensions, and the same without position 0.

Default mode: the final layer is the last block's output before the final norm (the post-norm state is a
sensitivity row), the token sets are all tokens, without position 0, without the massive-activation tokens and
without both, the bell label needs two significant slopes, and L* comes with what drives it. ``--compat notebooks``:
the notebook's profile, token set and labels.

``anisotropy_results.zip`` (written by :meth:`Anisotropy.finish`) holds the data files only: result.json,
table.csv and report.md (the figures are beside it, and index.html embeds them); with ``--compat notebooks`` also
the figures, as the notebook's ZIP. It never holds index.html, config.yaml or itself.

    result = Anisotropy().run(StudyConfig(study="anisotropy", exclude_bos=True))
    s: AnisotropyModel = result.summary["models"]["smollm2-135m"]     # what each key holds: .summary
    Anisotropy().headline(result)   # per model: L*, its driver, the sink onset, the bell verdict and the caveats
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...data.prompts import load_prompts
from ...engine.forward.tokens import token_states
from ...modes import NOTEBOOKS
from ...study.base import Study
from ...study.config import StudyConfig
from ...study.manifests import manifest, model_entry
from ...study.per_model import each_model
from ...study.registry import register_study
from ...study.result import StudyResult, make_table
from ...study.settings import MAX_LAYER, Settings, check_count, setting
from ..shared.caveats import bell_warnings
from .analysis import TOKEN_SETS, VERDICT_METRICS, analyse_states, headline_tokens
from .claims import claims as study_claims
from .figures import figures as draw_figures
from .report import report as write_report
from .summary import AnisotropyModel, AnisotropySummary, headline_set


@dataclass(frozen=True)
class AnisotropySettings(Settings):
    prompts: str | None = setting("A text file, one prompt per line (blank lines and '# kind' lines skipped); "
                                  "default: the bundled prompts.", file=True)
    exclude_bos: bool = setting("Headline metrics without position 0 (the BOS token, or the first word of a model "
                                "without BOS).", default=False)
    reference_lstar: int | None = setting("A reference L* to compare with (match within 3 layers: excellent, "
                                          "within 5: good).")

    def __post_init__(self):
        super().__post_init__()
        if self.reference_lstar is not None:
            check_count(self.reference_lstar, "--reference-lstar", 0, MAX_LAYER, "it is a layer number")


@register_study
class Anisotropy(Study):
    name = "anisotropy"
    title = "Anisotropy"
    question = ("Per layer, how anisotropic are token representations (covariance spectrum), where is the "
                "peak L*, and is the profile a bell curve?")
    Settings = AnisotropySettings
    order = 40
    compat_notes = (("every token state, position 0 included, headline only",
                     "the same headline plus the profile without position 0 and with outlier dimensions removed"),)
    verdict_metrics = VERDICT_METRICS

    def check_inputs(self, config: StudyConfig) -> None:
        load_prompts(config.prompts)

    def main_view(self, config: StudyConfig) -> dict:
        return {"subset": "all", "tokens": headline_tokens(config)}

    def run(self, config: StudyConfig) -> StudyResult:
        prompts = load_prompts(config.prompts)
        timings: dict[str, float] = {}
        summaries, rows, models, warnings = {}, [], [], []
        for run in each_model(config, timings):
            states = token_states(run.lm, prompts.texts, batch_size=config.batch_size, max_length=config.max_length)
            run.mark("extract_s")
            tokenizer = run.lm.tokenizer
            info = run.release()
            summary, model_rows = analyse_states(info.name, info.n_layers, states, config,
                                                 decode=lambda i, tok=tokenizer: tok.decode([i]))
            summaries[info.name] = {"n_prompts": len(prompts.texts), **summary}
            warnings += bell_warnings(info.name, summary["l_star"], info.n_layers)
            rows += model_rows
            models.append(model_entry(info))
            run.mark("analysis_s")
        dataset = {"kind": "prompts", "source": prompts.source, "hash": prompts.hash, "n_prompts": len(prompts.texts)}
        study_summary: AnisotropySummary = {"models": summaries, "warnings": warnings}
        record = manifest(config, models, dataset, timings)
        return StudyResult(study=self.name, config=config.to_dict(), manifest=record, summary=study_summary,
                           table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)
    verdicts = staticmethod(study_claims)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """L*, its depth (% of the layers) and the top-1 eigenvalue share there, for the headline tokens."""
        s: AnisotropyModel = result.summary["models"][model]
        t = headline_set(s)
        table = result.table
        at = table[(table["model"] == model) & (table["metric"] == "top1_ratio") & (table["layer"] == t["l_star"])
                   & (table["tokens"] == s["primary"])]
        if "stage" in at:  # the profile's final layer is the pre-norm one; post-norm is a sensitivity row
            at = at[at["stage"].ne("post_norm").to_numpy(dtype=bool)]
        # the filters leave the one row of the headline tokens' top1_ratio at L* (none: NaN)
        return {"l_star": t["l_star"], "l_star_depth_pct": 100 * t["l_star"] / s["n_layers"],
                "top1_ratio_at_l_star": float(at["value"].iloc[0]) if len(at) else float("nan")}

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model: L* and (default mode) which final state it uses and what drives it, the bell verdict
        with the layers it rests on, the reference match, and the caveats (few layers, not robust)."""
        lines = []
        summary: AnisotropySummary = result.summary
        for model, s in summary["models"].items():
            t = headline_set(s)
            reference = (f"; {t['reference']['verdict']} with reference L* {t['reference']['reference_l_star']}"
                         if t["reference"] else "")
            if "bell_verdict" not in s:  # notebooks mode (or a result written before the default rules)
                lines.append(f"{model}: L* = {t['l_star']} of {s['n_layers']}; "
                             + ("bell curve" if t["bell"]["is_bell_curve"] else "not a bell curve") + reference)
                continue
            star = f"L* = {s['l_star']} of {s['n_layers']}" + (" (before the final norm)" if s["l_star_stage"] else "")
            driver = f" (driver: {s['driver']['label']})" if s["driver"] else ""
            onset = s["sink"]["onset_layer"]
            sink = f"; sink onset at layer {onset}" if onset is not None else "; no sink onset"
            caveats = f" [caveats: {'; '.join(s['caveats'])}]" if s["caveats"] else ""
            lines.append(f"{model} ({TOKEN_SETS[s['primary']]}, final layer before the final norm): {star}{driver}"
                         f"{sink}; {s['bell_verdict']}{reference}{caveats}")
        return lines

    def finish(self, folder: Path, result: StudyResult) -> None:
        """``anisotropy_results.zip``: result.json, table.csv and report.md; with ``--compat notebooks`` also the
        figures (the notebook's ZIP). Never index.html, config.yaml or the ZIP itself."""
        names = ["result.json", "table.csv", "report.md"]
        if result.config.get("compat") == NOTEBOOKS:
            names += sorted(p.name for p in folder.glob("*.png"))
        with zipfile.ZipFile(folder / "anisotropy_results.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name in names:
                if (folder / name).is_file():
                    archive.write(folder / name, arcname=name)
