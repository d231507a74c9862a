"""Run a sweep into one folder, resumably.

    summary = run_sweep(plan, Path("runs/sweep"))
    summary["tasks"][0]["status"]           # "done", "reused" (finished in an earlier run) or "failed"

The folder holds ``config.yaml`` (the resolved plan), ``tasks/<model>/`` (each task's study run
folder, written whole or not at all), and, gathered from the finished tasks: ``table.csv``,
``sweep.json`` (every task's status, error, time, headline numbers; the manifest), one figure
per layer-wise metric, ``training_dynamics.png`` when revisions name training steps (each figure in every
format of ``figure_format``),
``report.md``, ``index.html`` and ``.layerscope.json`` (the marker, listing the figures: a rerun deletes
no other file). Running the same sweep again into the same folder skips the
finished tasks and retries the failed ones; models added to the list are run too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml
from tqdm.auto import tqdm

from ..errors import FORCE, OUT, OutputError
from ..io import (
    atomic_file,
    atomic_write_json,
    check_out_dir,
    may_replace,
    read_marker,
    remove_dir,
    resolve_out,
    worded_writes,
    write_marker,
)
from ..paths import name_problem, safe_slug
from ..provenance import library_versions
from ..report.plotting import FIGURE_FORMATS, save_figure, styled
from ..run import get_study
from ..run.output import input_paths
from ..run.suite import check_inputs
from ..study.config import StudyConfig
from ..study.result import jsonable
from .config_file import dump_plan
from .execute import execute
from .figures import dynamics_figure, metric_figures
from .gather import gather_table, profile_rows, task_rows
from .plan import SweepPlan
from .report import sweep_report, write_sweep_index

log = logging.getLogger(__name__)


def run_sweep(plan: SweepPlan, out: Path, force: bool = False, echo: Callable[[str], None] = print,
              inputs: Iterable[str | os.PathLike] = ()) -> dict:
    """Run every unfinished task of ``plan`` into ``out/tasks/``, then gather; returns the summary.
    ``inputs``: input files beyond the plan's own (the sweep file); ``out`` never replaces one. An ``out`` that
    is a symbolic link is written through: the folder it points to is the sweep folder, the link stays."""
    out = resolve_out(out)
    check_inputs(plan.study_config)  # a bad dataset or reference fails before any task starts
    with worded_writes(out):  # a full disk, a file-size limit, a read-only folder...: one error naming out
        prepare_out(plan, out, force, inputs)
    tasks = plan.tasks(out)
    todo = [t for t in tasks if not t.done()]
    outcomes = {t.spec: {"spec": t.spec, "status": "reused", "error": None, "seconds": None}
                for t in tasks if t.done()}
    if outcomes:
        echo(f"{len(outcomes)} of {len(tasks)} tasks finished in an earlier run; reusing them")
    start = time.perf_counter()
    with tqdm(total=len(todo), desc=f"sweep {plan.config.study}", unit="task", disable=not todo) as bar:
        for outcome in execute(plan, todo):
            outcomes[outcome["spec"]] = outcome
            bar.update()
            if outcome["status"] == "failed":
                bar.write(f"{outcome['spec']}: FAILED: {outcome['error']}")
            else:
                bar.write(f"{outcome['spec']}: done in {outcome['seconds']:.1f} s")
    with worded_writes(out):
        summary = gather(plan, out, outcomes, time.perf_counter() - start)
    return summary


def prepare_out(plan: SweepPlan, out: Path, force: bool, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Make ``out`` ready: a new folder, or the folder of an earlier run of the same sweep settings
    (resumed). Another sweep's folder needs ``force``; a folder layerscope did not write, or one that
    holds an input (``inputs``, the plan's files and local models), is never replaced."""
    out = resolve_out(out)
    inputs = [*inputs, *input_paths(plan.study_config.to_dict())]
    saved = out / "config.yaml"
    if (out / "tasks").is_dir() and saved.is_file() and (read_marker(out) or {}).get("kind") == "sweep":
        differs = settings_difference(saved, plan.config)
        if differs is None:
            _write_config(plan, out)
            return
        if not force:
            fix = f", or pass {FORCE} to replace it" if may_replace(out, inputs) else ""
            raise OutputError(f"{out} holds a sweep with other settings ({differs}); choose another {OUT}{fix}")
    check_out_dir(out, force, inputs)
    if out.is_dir() and any(out.iterdir()):  # check_out_dir let force replace it: a sweep folder
        remove_dir(out)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    write_marker(out, "sweep", figures=[])
    _write_config(plan, out)


def written_figures(out: Path) -> set[str]:
    """The figures an earlier gather wrote into ``out`` (from its marker): the only files a rerun deletes."""
    names = (read_marker(out) or {}).get("figures")
    suffixes = tuple(f".{fmt}" for fmt in FIGURE_FORMATS)
    return {n for n in names if isinstance(n, str) and n.endswith(suffixes) and name_problem(n) is None} \
        if isinstance(names, list) else set()


def settings_difference(saved: Path, config: StudyConfig) -> str | None:
    """None when the sweep saved in ``saved`` has the study and settings of ``config`` (models may differ),
    else the first setting that differs, as ``key: old -> new``."""
    try:
        old = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return "its config.yaml cannot be read"
    new = config.to_dict()
    for key, value in new.items():
        if key not in ("models", "figure_format") and old.get(key) != value:  # figures: redrawn by a gather
            return f"{key}: {old.get(key)!r} -> {value!r}"
    return None


def _write_config(plan: SweepPlan, out: Path) -> None:
    with atomic_file(out / "config.yaml", "w") as f:
        f.write(dump_plan(plan, str(out / "config.yaml")))


def gather(plan: SweepPlan, out: Path, outcomes: dict[str, dict], seconds: float) -> dict:
    """Write table.csv, the figures, sweep.json, report.md and index.html from the finished task folders."""
    tasks = plan.tasks(out)
    table = gather_table(tasks)
    rows = task_rows(tasks, outcomes)
    with atomic_file(out / "table.csv", "w") as f:
        table.to_csv(f, index=False)
    with styled():  # the house style, as the figures are drawn
        figures = {safe_slug(metric, "metric"): fig for metric, fig in  # a plugin's metric names become file names
                   metric_figures(profile_rows(table, plan.config)).items()}
        dynamics = dynamics_figure(rows, f"{plan.config.study}: headline numbers over training")
    if dynamics is not None:
        figures["training_dynamics"] = dynamics
    formats = plan.config.figure_format
    written, files = written_figures(out), sorted(f"{name}.{fmt}" for name in figures for fmt in formats)
    write_marker(out, "sweep", figures=sorted({*written, *files}))  # a kill before the end forgets none
    for old in written - set(files):
        (out / old).unlink(missing_ok=True)  # an earlier gather's figure this one does not make
    for name, fig in figures.items():
        for fmt in formats:
            data = save_figure(fig, fmt, dpi=120)
            with atomic_file(out / f"{name}.{fmt}", size=len(data)) as f:
                f.write(data)
    write_marker(out, "sweep", figures=files)
    summary = {"study": plan.config.study, "executor": plan.executor, "ray_address": plan.ray_address,
               "tasks": rows, "n_done": sum(r.get("numbers") is not None for r in rows),
               "n_failed": sum(r["status"] == "failed" for r in rows),
               "manifest": {"versions": library_versions(), "seed": plan.config.seed,
                            "timings": {"sweep_s": round(seconds, 3)}}}
    across = get_study(plan.config.study).sweep_summary(plan.config, [r["numbers"] for r in rows if r.get("numbers")])
    summary.update(across or {})
    atomic_write_json(out / "sweep.json", jsonable(summary))
    with atomic_file(out / "report.md", "w") as f:
        f.write(sweep_report(summary))
    write_sweep_index(out, summary)
    return summary
