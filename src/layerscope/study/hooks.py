"""What the study API asks of the machinery above it, filled in by ``layerscope/__init__.py``.

    hooks.study_class("divergence")        # the class that runs under a name (the registry's discovery)
    hooks.write(result, Path("runs/x"))    # what StudyResult.write does (the run-folder writer)
    hooks.html(result)                     # what a result shows in a notebook (the page renderer)
    hooks.runner_name("run_study")         # a name of layerscope.run (for the names layerscope.studies once held)

A :class:`~layerscope.study.StudyConfig` needs a study's settings class by name, a result writes itself and
shows itself in Jupyter; all three are done by code above the study API (``layerscope.run``), which imports the
study packages, which import this API. So the API names the three jobs here and the package's front door,
which Python runs before any of its modules, connects them (:func:`connect`): the imports run one way, and
nothing here imports anything of layerscope's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_jobs: dict[str, Callable[..., Any]] = {}


def connect(**jobs: Callable[..., Any]) -> None:
    """``connect(study_class=f, write=g, html=h, runner_name=r)``: who does each job (a later call replaces one)."""
    unknown = set(jobs) - {"study_class", "write", "html", "runner_name"}
    if unknown:
        raise TypeError(f"unknown hook {sorted(unknown)[0]!r}; the hooks are study_class, write, html and runner_name")
    _jobs.update(jobs)


def _job(name: str) -> Callable[..., Any]:
    if name not in _jobs:  # only when layerscope/__init__.py did not run: not a normal import
        raise RuntimeError(f"layerscope's {name} hook is not connected; import layerscope first")
    return _jobs[name]


def study_class(name: str) -> type:
    """The :class:`~layerscope.study.Study` subclass that runs under ``name``; a ``ConfigError`` naming the
    studies there are when none does."""
    return _job("study_class")(name)


def write(result: Any, out: Any, force: bool = False) -> Any:
    return _job("write")(result, out, force=force)


def html(result: Any) -> str:
    return _job("html")(result)


def runner_name(name: str) -> Any:
    """The object ``layerscope.run`` holds under ``name``."""
    return _job("runner_name")(name)
