"""Write a :class:`StudyResult` as a run folder.

    out/result.json   schema version, study, config, manifest (with timings), summary
    out/table.csv     the tidy long table
    out/<name>.png    the study's figures
    out/report.md     tables and verdicts in words
    out/config.yaml   every setting, resolved: `layerscope run --config out/config.yaml` reruns it
    out/index.html    all of the above on one self-contained page
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..io import staged_dir
from ..report.html import write_index
from .config_file import dump_configs
from .registry import get_study
from .result import StudyResult


def write_result(result: StudyResult, out: Path, force: bool = False) -> Path:
    study = get_study(result.study)
    start = time.perf_counter()
    with staged_dir(out, force=force) as tmp:
        for name, fig in study.figures(result).items():
            fig.savefig(tmp / f"{name}.png", dpi=150, bbox_inches="tight")
        (tmp / "report.md").write_text(study.report(result), encoding="utf-8")
        result.table.to_csv(tmp / "table.csv", index=False)
        timings = result.manifest.setdefault("timings", {})
        timings["write_s"] = round(time.perf_counter() - start, 3)
        if "analysis_s" in timings:
            timings["after_extraction_s"] = round(timings["analysis_s"] + timings["write_s"], 3)
        (tmp / "result.json").write_text(json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n")
        (tmp / "config.yaml").write_text(dump_configs({result.study: result.config}), encoding="utf-8")
        write_index(tmp, name=out.name)
        study.finish(tmp, result)
    return out
