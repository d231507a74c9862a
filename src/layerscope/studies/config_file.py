"""Run configs as YAML or TOML files: one study, or a suite of studies with shared settings.

    configs = load_config_file("suite.yaml")          # {study name: StudyConfig}, in suite order
    configs = resolve_configs(None, {"seed": 7})       # no file: all five studies, defaults + overrides
    text = dump_configs({n: c.to_dict() for n, c in configs.items()})   # the YAML a run folder keeps

A file holds :class:`StudyConfig` fields at the top level, shared by every study it runs,
plus what to run::

    study: phases                  # one study; or
    studies: [divergence, phases]  # several (leave both out: all five)
    seed: 7
    phases:                        # settings for one study only
      n_bootstrap: 2000

``studies`` may also map each study to its own settings; that is how a run folder's
``config.yaml`` spells every resolved setting, so passing it back reproduces the run.
Relative file paths in a config file are relative to the file's folder. Unknown keys and
values of the wrong type are errors that name the key.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from .config import ConfigError, StudyConfig

SUITE = ("divergence", "scaling", "phases", "anisotropy", "ablation")
"""Every study, in the order a suite runs and reports them."""

FIELDS = {f.name: f for f in dataclasses.fields(StudyConfig) if f.name != "study"}
PATH_FIELDS = ("dataset", "reference", "prompts", "texts")
RESOLVED_HEADER = ("# layerscope run config, every setting resolved. Reproduce this run with\n"
                   "#   layerscope run --config {path}\n")


def load_config_file(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> dict[str, StudyConfig]:
    """Read, validate and resolve a config file; ``overrides`` (from the command line) win over it."""
    path = Path(path)
    data = read_config_file(path)
    return resolve_configs(data, overrides or {}, base=path.resolve().parent, source=str(path))


def resolve_configs(data: dict[str, Any] | None, overrides: dict[str, Any], base: Path | None = None,
                    source: str = "the settings") -> dict[str, StudyConfig]:
    """One validated :class:`StudyConfig` per study to run, in suite order."""
    data = dict(data or {})
    if "study" in data and "studies" in data:
        raise ConfigError(f"{source}: give either 'study' or 'studies', not both")
    names, per_study = _studies(data, source)
    shared = {k: v for k, v in data.items() if k not in ("study", "studies", *SUITE)}
    for name in SUITE:
        if name in data:
            if name not in names:
                raise ConfigError(f"{source}: settings for '{name}', which this config does not run; "
                                  f"add it to 'studies' or remove the '{name}' section")
            per_study[name] = {**per_study.get(name, {}), **_mapping(data[name] or {}, name, source)}
    configs = {}
    for name in names:
        settings = {**_checked(shared, source, base), **_checked(per_study.get(name, {}), source, base, name),
                    **_checked(overrides, "the command line", Path.cwd())}
        configs[name] = StudyConfig(study=name, **settings)
    return configs


def dump_configs(configs: dict[str, dict[str, Any]], path: str = "config.yaml") -> str:
    """YAML with every setting of every study (``{name: config.to_dict()}``), readable by
    :func:`load_config_file`: one study as top-level settings, several under ``studies``."""
    if len(configs) == 1:
        body: dict[str, Any] = next(iter(configs.values()))
    else:
        body = {"studies": {name: {k: v for k, v in c.items() if k != "study"} for name, c in configs.items()}}
    return RESOLVED_HEADER.format(path=path) + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def read_config_file(path: Path) -> dict[str, Any]:
    """The raw mapping in a .yaml/.yml/.toml file; :class:`ConfigError` if it cannot be read or parsed."""
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ConfigError(f"config file {path} must end in .yaml, .yml or .toml")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
        data = tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"config file {path} is not valid {'TOML' if suffix == '.toml' else 'YAML'}: {detail}"
                          ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings (key: value), "
                          f"not a {type(data).__name__}")
    return data


def _studies(data: dict[str, Any], source: str) -> tuple[list[str], dict[str, dict]]:
    if "study" in data:
        listed: Any = [data["study"]] if isinstance(data["study"], str) else data["study"]
        if not isinstance(data["study"], str):
            raise ConfigError(f"{source}: 'study' must be one study name, e.g. phases")
    else:
        listed = data.get("studies", list(SUITE))
    per_study: dict[str, dict] = {}
    if isinstance(listed, dict):
        per_study = {name: _mapping(v or {}, name, source) for name, v in listed.items()}
        listed = list(listed)
    if not isinstance(listed, list) or not listed or not all(isinstance(n, str) for n in listed):
        raise ConfigError(f"{source}: 'studies' must be a non-empty list of study names, e.g. [divergence, phases]")
    unknown = [n for n in listed if n not in SUITE]
    if unknown:
        raise ConfigError(f"{source}: unknown study '{unknown[0]}'; choose from {', '.join(SUITE)}")
    if len(set(listed)) != len(listed):
        raise ConfigError(f"{source}: a study is listed twice in {listed}")
    return [n for n in SUITE if n in listed], per_study


def _mapping(value: Any, name: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{name}' must be a mapping of settings, not {type(value).__name__}")
    return value


def _checked(settings: dict[str, Any], source: str, base: Path | None, section: str | None = None
             ) -> dict[str, Any]:
    """Each key a StudyConfig field, each value of that field's type (converted where obvious)."""
    out = {}
    for key, value in settings.items():
        where = f"{section}.{key}" if section else key
        if key not in FIELDS:
            hint = f"; known settings: {', '.join(FIELDS)}" if section or key not in SUITE else ""
            raise ConfigError(f"{source}: unknown setting '{where}'{hint}")
        value = _typed(key, value, where, source)
        if (key in PATH_FIELDS or (key == "configs" and value != "standard")) and value is not None and base:
            value = str((base / Path(value).expanduser()).resolve())
        out[key] = value
    return out


def _typed(key: str, value: Any, where: str, source: str) -> Any:
    hint = typing.get_type_hints(StudyConfig)[key]
    optional = type(None) in typing.get_args(hint) and isinstance(hint, types.UnionType)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{source}: setting '{where}' cannot be empty")
    kind = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if key == "layers" and isinstance(value, list) and all(type(v) is int for v in value):
        return ",".join(map(str, value))  # [0, 4, 8] means '0,4,8'
    if key == "models" and isinstance(value, str):
        return (value,)
    if typing.get_origin(kind) is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{source}: setting '{where}' must be a list of strings, got {value!r}")
    ok = (type(value) is int or (kind is float and type(value) is float)) if kind in (int, float) \
        else isinstance(value, kind)
    if not ok:
        raise ConfigError(f"{source}: setting '{where}' must be {_article(kind)}, got {value!r} "
                          f"({type(value).__name__})")
    return float(value) if kind is float else value


def _article(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, kind.__name__)
