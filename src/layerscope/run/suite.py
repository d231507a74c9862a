"""Run several studies into one run folder, resumably, and write its HTML report.

    configs = resolve_configs(None, {})                 # every study, on its default models
    run_suite(configs, Path("runs/20261122-153000"))    # runs/.../<study>/..., config.yaml, index.html

The suite is built in a hidden ``.<name>.partial`` folder beside the target and renamed
into place when every study is done. A killed suite leaves that folder behind; running the
same config again (same ``--out``, or no ``--out`` at all) picks it up and skips the studies
that had finished, and the activation cache skips the batches that had been extracted.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ..io import atomic_file, check_out_dir, clear_stale, replace_dir, worded_writes, write_marker
from ..study.config import StudyConfig
from ..study.result import StudyResult
from .config_file import dump_configs
from .output import input_paths
from .pages import load_result, write_index
from .registry import get_study, run_study

log = logging.getLogger(__name__)

PARTIAL = ".partial"


def with_default_models(configs: dict[str, StudyConfig]) -> dict[str, StudyConfig]:
    """Each config with its study's default models filled in where none are given."""
    return {name: c if c.models else dataclasses.replace(c, models=get_study(name).default_models)
            for name, c in configs.items()}


def check_inputs(config: StudyConfig) -> None:
    """Read every input file a study will need, so a bad one fails before any model runs."""
    get_study(config.study).check_inputs(config)


def partial_dir(out: Path) -> Path:
    return out.parent / f".{out.name}{PARTIAL}"


def find_partial(runs: Path, resolved: str) -> Path | None:
    """The target of an unfinished suite under ``runs`` with exactly this resolved config."""
    for folder in sorted(runs.glob(f".*{PARTIAL}"), reverse=True):
        config = folder / "config.yaml"
        if config.is_file() and config.read_text(encoding="utf-8") == resolved:
            return runs / folder.name[1 : -len(PARTIAL)]
    return None


def run_suite(configs: dict[str, StudyConfig], out: Path, force: bool = False,
              echo: Callable[[str], None] = print, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Run each study into ``out/<study>/``, then write ``out/config.yaml`` and ``out/index.html``.

    ``inputs``: input files beyond the configs' own (the config file); ``out`` never replaces one."""
    configs = with_default_models(configs)
    inputs = [*inputs, *(path for c in configs.values() for path in input_paths(c.to_dict()))]
    out = check_out_dir(out, force, inputs)
    for config in configs.values():
        check_inputs(config)
    resolved = dump_configs({n: c.to_dict() for n, c in configs.items()})
    staging = partial_dir(out)
    if staging.exists() and _read(staging / "config.yaml") != resolved:
        shutil.rmtree(staging)  # an unfinished run of another config: ours to discard
    fresh = not staging.exists()
    try:
        with worded_writes(out):  # a full disk, a quota, a file-size limit...: one error naming out
            staging.mkdir(parents=True, exist_ok=True)
            with atomic_file(staging / "config.yaml", "w") as f:
                f.write(resolved)
    except BaseException:
        if fresh:
            shutil.rmtree(staging, ignore_errors=True)  # ours, and nothing in it yet
        raise
    finished_any = False
    wanted = {other for name in configs for other in get_study(name).companions}
    done: dict[str, StudyResult] = {}  # the results a later study's join reads
    try:
        for name, config in configs.items():
            folder = staging / name
            study = get_study(name)
            if (folder / "result.json").is_file():
                echo(f"{name}: finished in an earlier, interrupted run; reusing {out / name}")
                finished_any = True
                if name in wanted:
                    done[name] = load_result(folder)
                continue
            echo(f"{name}: running on {', '.join(config.model_names)}")
            result = run_study(config)
            study.join(result, {other: done[other] for other in study.companions if other in done})
            if name in wanted:
                done[name] = result
            result.write(folder, force=True)
            finished_any = True
            for line in study.headline(result):
                echo(f"{name}: {line}")
        clear_stale(staging)  # what a killed study write left beside the study folders
        with worded_writes(out):
            write_index(staging, name=out.name)
            write_marker(staging, "suite")
    except BaseException:
        if not finished_any:
            shutil.rmtree(staging, ignore_errors=True)  # nothing worth resuming: leave no trace
        raise
    with worded_writes(out):
        replace_dir(staging, out)
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None

