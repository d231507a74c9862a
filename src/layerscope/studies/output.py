"""Write a :class:`StudyResult` as a run folder.

    out/result.json   schema version, study, config, manifest (with timings), summary
    out/table.csv     the tidy long table
    out/<name>.png    the study's figures
    out/report.md     tables and verdicts in words
    out/config.yaml   every setting, resolved: `layerscope run --config out/config.yaml` reruns it
    out/index.html    all of the above on one self-contained page
    out/.layerscope.json   the marker: layerscope wrote this folder, so force=True may replace it

Every file but index.html is rendered in memory first, so a full disk is reported with the bytes
the folder needs.

    input_paths(config)   # the local files and folders a config reads: never replaced by an output folder
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..io import staged_dir
from ..paths import safe_name
from ..report.markdown import no_raw_html
from .config_file import dump_configs
from .pages import write_index
from .registry import get_study, study_class
from .result import StudyResult
from .settings import file_fields, is_file_setting


def input_paths(config: Mapping[str, Any]) -> list[str]:
    """The local inputs of a study config (a ``StudyConfig.to_dict()`` or a result's config): the files its
    study's settings name (``setting(..., file=True)``) and the models that are existing local folders or files."""
    named = []
    if "study" in config:
        settings = study_class(config["study"]).Settings
        named = [config.get(f.name) for f in file_fields(settings) if is_file_setting(settings, f.name,
                                                                                       config.get(f.name))]
    named += [m for m in config.get("models") or () if isinstance(m, str) and os.path.exists(m)]
    return [str(p) for p in named if isinstance(p, (str, os.PathLike)) and p]


def write_result(result: StudyResult, out: Path, force: bool = False) -> Path:
    study = get_study(result.study)
    start = time.perf_counter()
    files = {f"{safe_name(name, f'figure name of study {result.study}')}.png": _png(fig)  # a plugin's keys too
             for name, fig in study.figures(result).items()}
    files["report.md"] = no_raw_html(study.report(result)).encode()  # a plugin's too: no raw HTML in any report.md
    files["table.csv"] = result.table.to_csv(index=False).encode()
    timings = result.manifest.setdefault("timings", {})
    timings["write_s"] = round(time.perf_counter() - start, 3)
    if "analysis_s" in timings:
        timings["after_extraction_s"] = round(timings["analysis_s"] + timings["write_s"], 3)
    files["result.json"] = (json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n").encode()
    files["config.yaml"] = dump_configs({result.study: result.config}).encode()
    with staged_dir(out, force=force, kind="run", inputs=input_paths(result.config), size=_size(files)) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        write_index(tmp, name=out.name)
        study.finish(tmp, result)
    return out


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150, bbox_inches="tight")
    return buffer.getvalue()


def _size(files: dict[str, bytes]) -> int:
    """The bytes of ``files`` and of an index.html that embeds them (figures in base64, a third larger)."""
    pngs = sum(len(data) for name, data in files.items() if name.endswith(".png"))
    return 2 * sum(len(data) for data in files.values()) + pngs // 3
