"""Write a :class:`StudyResult` as a run folder.

    out/result.json   schema version, study, config, manifest (with timings), summary
    out/table.csv     the tidy long table
    out/<name>.png    the study's figures, in each format of config["figure_format"] (.png, .svg, .pdf)
    out/report.md     tables and verdicts in words
    out/config.yaml   every setting, resolved: `layerscope run --config out/config.yaml` reruns it
    out/index.html    all of the above on one self-contained page
    out/.layerscope.json   the marker: layerscope wrote this folder, so force=True may replace it

Every file but index.html is rendered in memory first, so a full disk is reported with the bytes
the folder needs.

    input_paths(config)   # the local files and folders a config reads: never replaced by an output folder
    render_figures(result, ("svg",))         # {"phases.svg": bytes}: the figures, drawn in the house style
    rewrite_figures(Path("runs/X"), ("svg",))   # a finished run folder's figures again, from its saved files
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..io import atomic_file, staged_dir
from ..paths import safe_name
from ..progress import stage, steps
from ..report.html import check_page
from ..report.markdown import no_raw_html, with_models
from ..report.plotting import save_figure, styled
from ..study.config import figure_formats
from ..study.result import StudyResult
from ..study.settings import file_fields, is_file_setting
from .config_file import dump_configs
from .pages import finished_studies, load_result, write_index
from .registry import get_study, study_class


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
    files = render_figures(result, figure_formats(result.config.get("figure_format") or ("png",)))
    report = with_models(study.report(result), result.manifest)  # every report names its models exactly
    files["report.md"] = no_raw_html(report).encode()  # a plugin's too: no raw HTML in any report.md
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


def render_figures(result: StudyResult, formats: tuple[str, ...] = ("png",)) -> dict[str, bytes]:
    """``{"<name>.<format>": bytes}``: each figure of ``result``'s study in each of ``formats``, drawn and saved in
    the house style (:data:`~layerscope.report.plotting.STYLE`)."""
    study = get_study(result.study)
    with styled(), stage(f"{result.study}: drawing figures"):  # font sizes are read as the study draws
        figures = study.figures(result)
    saves = [(name, fig, fmt) for name, fig in figures.items() for fmt in formats]
    return {f"{safe_name(name, f'figure name of study {result.study}')}.{fmt}": save_figure(fig, fmt)  # a plugin's
            for name, fig, fmt in steps(saves, f"{result.study}: saving figures", "file")}           # keys too


def rewrite_figures(folder: Path, formats: tuple[str, ...]) -> list[Path]:
    """Draw the figures of every study in the finished run folder ``folder`` again, in ``formats``, from its
    result.json and table.csv (no model is loaded), and write them atomically beside the files there; the
    paths written. Only the study's own figure files (its figure names, in ``formats``) are replaced."""
    subs = finished_studies(folder)
    check_page(folder / "index.html")  # a page of the user's there: fail before writing anything
    files = {sub / name: data for sub in subs  # all drawn first: a damaged study folder stops it before any write
             for name, data in render_figures(load_result(sub), formats).items()}
    for path, data in files.items():
        with atomic_file(path, size=len(data)) as f:
            f.write(data)
    return list(files)


def _size(files: dict[str, bytes]) -> int:
    """The bytes of ``files`` and of an index.html that embeds them (png and svg figures in base64, a third
    larger; one per figure, but count both when a figure has both)."""
    embedded = sum(len(data) for name, data in files.items() if name.endswith((".png", ".svg")))
    return 2 * sum(len(data) for data in files.values()) + embedded // 3
