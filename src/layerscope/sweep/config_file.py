"""Sweep config files: one study's settings (as for ``layerscope run --config``) plus what to sweep.

    plan = load_sweep_file("sweep.yaml", executor="ray")     # a SweepPlan; keyword arguments override the file
    text = dump_plan(plan)                                   # the YAML a sweep folder keeps as config.yaml

A sweep file::

    study: scaling
    models: [EleutherAI/pythia-410m, EleutherAI/pythia-1.4b]
    revisions: [step1000, step36000, step143000]   # optional: every model at every revision
    executor: ray                                  # optional: serial (default) or ray
    ray_address: auto                              # optional: join a running cluster
    layers: notebooks
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from ..run.config_file import read_config_file, resolve_configs
from ..study.config import ConfigError
from .plan import SweepPlan

SWEEP_KEYS = {"revisions": list, "executor": str, "ray_address": str, "workers": int, "gpus_per_task": (int, float)}
"""Settings of the sweep itself, beside the study's; each with the type it must have."""

RAY_KEYS = ("ray_address", "workers", "gpus_per_task")

HEADER = ("# layerscope sweep config, every setting resolved. Run it again (finished tasks are kept) with\n"
          "#   layerscope sweep --config {path}\n")


def load_sweep_file(path: str | os.PathLike, overrides: dict[str, Any] | None = None, **sweep: Any) -> SweepPlan:
    """Read a sweep file; ``overrides`` are study settings and ``sweep`` sweep settings that win over the file's."""
    path = Path(path)
    data = read_config_file(path)
    if "studies" in data or "study" not in data:
        raise ConfigError(f"{path}: a sweep runs one study; name it with 'study: scaling' (not 'studies')")
    settings = {key: _checked(key, data.pop(key), path) for key in list(data) if key in SWEEP_KEYS}
    (config,) = resolve_configs(data, overrides or {}, base=path.resolve().parent, source=str(path)).values()
    settings.update({k: v for k, v in sweep.items() if v is not None})
    if settings.get("executor", "serial") != "ray":  # the file's Ray settings wait for a Ray run
        settings = {k: v for k, v in settings.items() if k not in RAY_KEYS or sweep.get(k) is not None}
    return SweepPlan(config=config, **settings)


def _checked(key: str, value: Any, path: Path) -> Any:
    kind = SWEEP_KEYS[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{path}: '{key}' must be {_kind_name(kind)}, got {value!r}")
    if key == "revisions":
        if not value or not all(isinstance(r, (str, int)) and not isinstance(r, bool) and str(r).strip()
                                for r in value):
            raise ConfigError(f"{path}: 'revisions' must be a non-empty list of revision names, e.g. [step1000]")
        return tuple(str(r) for r in value)
    return value


def _kind_name(kind: Any) -> str:
    return {list: "a list", str: "a string", int: "a whole number"}.get(kind, "a number")


def dump_plan(plan: SweepPlan, path: str = "config.yaml") -> str:
    """YAML that :func:`load_sweep_file` reads back into the same plan."""
    body = plan.config.to_dict()
    body.update({"revisions": list(plan.revisions) or None, "executor": plan.executor,
                 "ray_address": plan.ray_address, "workers": plan.workers, "gpus_per_task": plan.gpus_per_task})
    body = {k: v for k, v in body.items() if not (k in SWEEP_KEYS and v is None)}
    return HEADER.format(path=path) + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)
