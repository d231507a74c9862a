"""Run a sweep's tasks: one after another in this process, or as Ray tasks in parallel.

    for outcome in execute(plan, tasks):    # in the order tasks finish
        outcome["spec"], outcome["status"], outcome["error"], outcome["seconds"]

Every task runs :func:`run_task`: the study on one model, written to the task's folder.
A task that fails (a bad model name, out of memory, a crashed worker) becomes an outcome
with status ``failed`` and its error; the others carry on.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from ..study.config import ConfigError, StudyConfig
from .plan import SweepPlan, Task

log = logging.getLogger(__name__)

FORWARDED_ENV = ("LAYERSCOPE_CACHE", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN")
"""Environment variables a Ray cluster's workers get from the driver."""


def run_task(config: StudyConfig, folder: Path, cwd: str | None = None) -> dict:
    """Run ``config`` (one model) and write its run folder; never raises for a failed study.

    Returns ``{"spec", "status": "done" | "failed", "error", "seconds", "headline"}``. ``cwd`` is the
    driver's working folder, so relative model paths mean the same on a local Ray worker.
    """
    from ..errors import LayerscopeError
    from ..run import get_study, run_study

    if cwd is not None and os.path.isdir(cwd):
        os.chdir(cwd)
    start = time.perf_counter()
    outcome = {"spec": config.models[0], "status": "done", "error": None, "headline": []}
    try:
        result = run_study(config)
        result.write(folder, force=True)
        outcome["headline"] = get_study(config.study).headline(result)
    except LayerscopeError as exc:
        outcome.update(status="failed", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a sweep reports any task's failure and goes on
        outcome.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    outcome["seconds"] = round(time.perf_counter() - start, 3)
    return outcome


def execute(plan: SweepPlan, tasks: list[Task]) -> Iterator[dict]:
    """One outcome per task, as each finishes, on ``plan.executor``."""
    cwd = os.getcwd()
    if plan.executor == "ray":
        yield from _ray_outcomes(plan, tasks, cwd)
    else:
        for task in tasks:
            yield run_task(plan.task_config(task), task.folder)


def _ray_outcomes(plan: SweepPlan, tasks: list[Task], cwd: str) -> Iterator[dict]:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'layerscope[ray]' (or leave out --executor for a "
                          "serial sweep)") from None

    started = not ray.is_initialized()
    if started:
        ray.init(**ray_init_kwargs(plan))
    try:
        gpus = plan.gpus_per_task
        if gpus is None:
            gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        # max_calls=1: each task's worker process exits after it, so the model's memory goes with it
        remote = ray.remote(num_cpus=1, num_gpus=gpus, max_calls=1, max_retries=0)(run_task)
        pending = {remote.remote(plan.task_config(task), task.folder.resolve(), cwd): task for task in tasks}
        while pending:
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready)
            try:
                yield ray.get(ready)
            except ray.exceptions.RayError as exc:  # the worker died: out of memory, killed, crashed
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                yield {"spec": task.spec, "status": "failed", "error": f"{type(exc).__name__}: {first}",
                       "seconds": None, "headline": []}
    finally:
        if started:
            ray.shutdown()


def ray_init_kwargs(plan: SweepPlan) -> dict:
    """``ray.init`` arguments: join ``plan.ray_address``, or start a local instance of ``plan.workers`` CPUs."""
    kwargs = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if plan.ray_address:
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        return {**kwargs, "address": plan.ray_address, "runtime_env": {"env_vars": env}}
    return {**kwargs, "num_cpus": plan.workers or os.cpu_count()}
