"""Anisotropy study (seed 003): covariance-spectrum metrics of token states per layer, L*,
the bell-curve test, outlier dimensions, and the same without position 0.

Default mode: the final layer is the last block's output before the final norm (the post-norm state is a
sensitivity row), the token sets are all tokens, without position 0 and without the massive-activation tokens,
the bell label needs two significant slopes, and L* comes with what drives it. ``--compat seed``: the notebook's
profile, token set and labels.

``anisotropy_results.zip`` (written by :meth:`Anisotropy.finish`) holds the data files only: result.json,
table.csv and report.md (the figures are beside it, and index.html embeds them); with ``--compat seed`` also
the figures, as the notebook's ZIP. It never holds index.html, config.yaml or itself.
"""

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
from .analysis import TOKEN_SETS, analyse_model
from .figures import figures as draw_figures
from .report import report as write_report


class Anisotropy(Study):
    name = "anisotropy"
    title = "Anisotropy"
    question = ("Per layer, how anisotropic are token representations (covariance spectrum), where is the "
                "peak L*, and is the profile a bell curve?")

    def run(self, config: StudyConfig) -> StudyResult:
        prompts = load_prompts(config.prompts)
        seed = config.compat == "seed"
        token_sets = (["all", "excl_pos0"] if config.exclude_bos else ["all"]) if seed else list(TOKEN_SETS)
        primary = "excl_pos0" if config.exclude_bos else "all"
        timings: dict[str, float] = {}
        summaries, rows, models, warnings = {}, [], [], []
        for spec in config.models:
            start = time.perf_counter()
            lm = load_model(spec, dtype=config.dtype, device=config.device, device_map=config.device_map)
            loaded = time.perf_counter()
            states = token_states(lm, prompts.texts, batch_size=config.batch_size, max_length=config.max_length)
            extracted = time.perf_counter()
            info, tokenizer = lm.info, lm.tokenizer
            del lm
            free_memory()
            summary, model_rows = analyse_model(info.name, info.n_layers, states, token_sets, primary,
                                                config.reference_lstar, config.compat, config.ci_level,
                                                decode=lambda i, tok=tokenizer: tok.decode([i]))
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
        if "stage" in at:  # the profile's final layer is the pre-norm one; post-norm is a sensitivity row
            at = at[at["stage"].ne("post_norm").to_numpy(dtype=bool)]
        return {"l_star": t["l_star"], "l_star_depth_pct": 100 * t["l_star"] / s["n_layers"],
                "top1_ratio_at_l_star": float(at["value"].iloc[0]) if len(at) else float("nan")}

    def headline(self, result: StudyResult) -> list[str]:
        """One line per model: L* and (default mode) which final state it uses and what drives it, the bell verdict
        with the layers it rests on, the reference match, and the caveats (few layers, not robust)."""
        lines = []
        for model, s in result.summary["models"].items():
            t = s["token_sets"][s["primary"]]
            reference = (f"; {t['reference']['verdict']} with reference L* {t['reference']['reference_l_star']}"
                         if t["reference"] else "")
            if "bell_verdict" not in s:  # seed compat (or a result written before the default rules)
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
        """``anisotropy_results.zip``: result.json, table.csv and report.md; with ``--compat seed`` also the
        figures (the notebook's ZIP). Never index.html, config.yaml or the ZIP itself."""
        names = ["result.json", "table.csv", "report.md"]
        if result.config.get("compat") == "seed":
            names += sorted(p.name for p in folder.glob("*.png"))
        with zipfile.ZipFile(folder / "anisotropy_results.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name in names:
                if (folder / name).is_file():
                    archive.write(folder / name, arcname=name)
