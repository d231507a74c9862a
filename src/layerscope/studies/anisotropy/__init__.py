"""Anisotropy study (seed 003): covariance-spectrum metrics of token states per layer, L*,
the bell-curve test, outlier dimensions, and the same without position 0."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

from ...data.prompts import load_prompts
from ...engine.tokens import token_states
from ...models import load_model
from ..base import Study
from ..config import StudyConfig
from ..controls import bell_warnings
from ..inputs import free_memory
from ..manifest import add_timings, manifest, model_entry
from ..result import StudyResult, make_table
from .analysis import analyse_model
from .figures import figures as draw_figures
from .report import report as write_report


class Anisotropy(Study):
    name = "anisotropy"
    title = "Anisotropy"
    question = ("Per layer, how anisotropic are token representations (covariance spectrum), where is the "
                "peak L*, and is the profile a bell curve?")

    def run(self, config: StudyConfig) -> StudyResult:
        prompts = load_prompts(config.prompts)
        token_sets = ["all"] if config.compat == "seed" and not config.exclude_bos else ["all", "excl_pos0"]
        primary = "excl_pos0" if config.exclude_bos else "all"
        timings: dict[str, float] = {}
        summaries, rows, models, warnings = {}, [], [], []
        for spec in config.models:
            start = time.perf_counter()
            lm = load_model(spec, dtype=config.dtype, device=config.device, device_map=config.device_map)
            loaded = time.perf_counter()
            states = token_states(lm, prompts.texts, batch_size=config.batch_size, max_length=config.max_length)
            extracted = time.perf_counter()
            info = lm.info
            del lm
            free_memory()
            summary, model_rows = analyse_model(info.name, info.n_layers, states, token_sets, primary,
                                                config.reference_lstar)
            summaries[info.name] = {"n_prompts": len(prompts.texts), **summary}
            warnings += bell_warnings(info.name, summary["l_star"], info.n_layers)
            rows += model_rows
            models.append(model_entry(info))
            add_timings(timings, load_s=loaded - start, extract_s=extracted - loaded,
                        analysis_s=time.perf_counter() - extracted)
        dataset = {"kind": "prompts", "source": prompts.source, "hash": prompts.hash, "n_prompts": len(prompts.texts)}
        return StudyResult(study=self.name, config=config.to_dict(), manifest=manifest(config, models, dataset, timings),
                           summary={"models": summaries, "warnings": warnings}, table=make_table(rows))

    figures = staticmethod(draw_figures)
    report = staticmethod(write_report)

    def numbers(self, result: StudyResult, model: str) -> dict[str, float]:
        """L*, its depth (% of the layers) and the top-1 eigenvalue share there, for the headline tokens."""
        s = result.summary["models"][model]
        t = s["token_sets"][s["primary"]]
        table = result.table
        at = table[(table["model"] == model) & (table["metric"] == "top1_ratio") & (table["layer"] == t["l_star"])
                   & (table["tokens"] == s["primary"])]
        return {"l_star": t["l_star"], "l_star_depth_pct": 100 * t["l_star"] / s["n_layers"],
                "top1_ratio_at_l_star": float(at["value"].iloc[0]) if len(at) else float("nan")}

    def headline(self, result: StudyResult) -> list[str]:
        lines = []
        for model, s in result.summary["models"].items():
            t = s["token_sets"][s["primary"]]
            lines.append(f"{model}: L* = {t['l_star']} of {s['n_layers']}; "
                         + ("bell curve" if t["bell"]["is_bell_curve"] else "not a bell curve")
                         + (f"; {t['reference']['verdict']} with reference L* {t['reference']['reference_l_star']}"
                            if t["reference"] else ""))
        return lines

    def finish(self, folder: Path, result: StudyResult) -> None:
        """A ZIP of the run folder's files, as the notebook makes."""
        files = sorted(p for p in folder.iterdir() if p.is_file())
        with zipfile.ZipFile(folder / "anisotropy_results.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, arcname=path.name)
