"""Run configs as YAML or TOML files: one study, or a suite of studies with shared settings.

    configs = load_config_file("suite.yaml")          # {study name: StudyConfig}, in suite order
    configs = resolve_configs(None, {"seed": 7})       # no file: all five studies, defaults + overrides
    text = dump_configs({n: c.to_dict() for n, c in configs.items()})   # the YAML a run folder keeps

A file holds :class:`StudyConfig` fields at the top level, shared by every study it runs,
plus what to run::

    study: phases                  # one study; or
    studies: [divergence, phases]  # several (leave both out: every registered study)
    seed: 7
    phases:                        # settings for one study only
      n_bootstrap: 2000

``studies`` may also map each study to its own settings; that is how a run folder's
``config.yaml`` spells every resolved setting, so passing it back reproduces the run.
Relative file paths in a config file (and models that are local folders or .gguf files there)
are relative to the file's folder; every local path is stored absolute. Unknown keys, values of
the wrong type, a key given twice and YAML aliases that repeat more than ``MAX_ALIAS_REPEATS``
values are errors that name the key; a setting that none of the studies to run reads gets a
``warning:`` line (an error when it names a file that does not exist).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..data.files import file_problem
from ..errors import short
from ..study.config import COMMON, ConfigError, StudyConfig, absolute_model, absolute_path
from ..study.settings import is_file_setting
from ..terminal import say
from .registry import studies


def __getattr__(name: str) -> Any:
    if name == "SUITE":  # every registered study, in the order a suite runs and reports them
        return tuple(studies())
    if name == "FIELDS":
        return fields()
    raise AttributeError(name)


def fields() -> dict[str, tuple[dataclasses.Field, type]]:
    """Every setting by name: its field and the class that declares it (``StudyConfig`` for the shared ones)."""
    found = {name: (f, StudyConfig) for name, f in COMMON.items()}
    for study in studies().values():
        for f in dataclasses.fields(study.Settings):
            found.setdefault(f.name, (f, study.Settings))
    return found


def _is_file(key: str, value: Any) -> bool:
    return any(is_file_setting(s.Settings, key, value) for s in studies().values())
MAX_ALIAS_REPEATS = 1000
"""Values that YAML aliases (``*name``) may repeat in one file; an alias bomb repeats billions."""
RESOLVED_HEADER = ("# layerscope run config, every setting resolved. Reproduce this run with\n"
                   "#   layerscope run --config {path}\n")


def load_config_file(path: str | os.PathLike, overrides: dict[str, Any] | None = None,
                     warn: Callable[[str], None] | None = None) -> dict[str, StudyConfig]:
    """Read, validate and resolve a config file; ``overrides`` (from the command line) win over it."""
    path = Path(path)
    data = read_config_file(path)
    return resolve_configs(data, overrides or {}, base=path.resolve().parent, source=str(path), warn=warn)


def print_warning(message: str) -> None:
    """The default ``warn``: one ``warning: ...`` line on stderr."""
    say(f"warning: {message}", err=True)


def resolve_configs(data: dict[str, Any] | None, overrides: dict[str, Any], base: Path | None = None,
                    source: str = "the settings", warn: Callable[[str], None] | None = None
                    ) -> dict[str, StudyConfig]:
    """One validated :class:`StudyConfig` per study to run, in suite order.

    A setting that no study to run reads calls ``warn`` (default: a ``warning:`` line on stderr) with a message
    naming it; from a file only when it differs from the default. If it names a missing file, that is an error.
    """
    data = dict(data or {})
    suite = tuple(studies())
    if "study" in data and "studies" in data:
        raise ConfigError(f"{source}: give either 'study' or 'studies', not both")
    names, per_study = _studies(data, source)
    shared = {k: v for k, v in data.items() if k not in ("study", "studies", *suite)}
    for name in suite:
        if name in data:
            if name not in names:
                raise ConfigError(f"{source}: settings for '{name}', which this config does not run; "
                                  f"add it to 'studies' or remove the '{name}' section")
            per_study[name] = {**per_study.get(name, {}), **_mapping(data[name] or {}, name, source)}
    resolved = "studies" in data and isinstance(data["studies"], dict)  # the form a run folder's config.yaml has
    shared, command_line = _checked(shared, source, base), _checked(overrides, "the command line", Path.cwd())
    sections = {name: _checked(per_study.get(name, {}), source, base, name) for name in names}
    not_read = _unused(command_line, names, "the command line")
    if not_read and len(names) == 1:  # an option the chosen study does not read is a mistake, not a detail
        fix = f" (see `layerscope run {names[0]} --help` for its options)"
        raise ConfigError(not_read[0].replace("; ignored", f"; leave it out{fix}"))
    unused = not_read + _unused(shared, names, source)  # a suite: each study reads what it can
    for name, section in sections.items():
        unused += _unused(section, names if resolved else [name], source, name)
    for message in unused:
        (warn or print_warning)(message)
    return {name: StudyConfig(study=name, **_read_by(name, {**shared, **sections[name], **command_line}))
            for name in names}


def _read_by(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings study ``name`` reads (shared ones and its own)."""
    own = {f.name for f in dataclasses.fields(studies()[name].Settings)}
    return {k: v for k, v in settings.items() if k in COMMON or k in own}


def used_by(key: str) -> tuple[str, ...] | None:
    """The studies that read setting ``key`` (``None``: every study)."""
    if key in COMMON:
        return None
    return tuple(name for name, s in studies().items() if key in {f.name for f in dataclasses.fields(s.Settings)})


def _unused(settings: dict[str, Any], names: list[str], source: str, section: str | None = None) -> list[str]:
    """A warning for each setting that none of ``names`` reads; :class:`ConfigError` if it names a missing file."""
    messages = []
    defaults = fields()
    for key, value in settings.items():
        readers = used_by(key)
        if readers is None or any(n in readers for n in names):
            continue
        if source == "the command line":  # a setting on by default is turned off by --no-<name>
            off = value is False and defaults[key][0].default is True
            label = f"--{'no-' if off else ''}{key.replace('_', '-')}"
        elif value == defaults[key][0].default:
            continue  # a resolved config spells out every setting; only a changed one is worth a warning
        else:
            label = f"{source}: setting '{f'{section}.{key}' if section else key}'"
        runs = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        problem = file_problem(Path(value)) if _is_file(key, value) else None
        if problem:
            raise ConfigError(f"{label} names {value}, which {problem.split(';')[0]}; it is not used by {runs} "
                              "anyway, so leave it out or fix the path")
        messages.append(f"{label} is not used by {runs}; ignored")
    return messages


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
    if problem := file_problem(path, "--config"):
        raise ConfigError(f"config file {path} {problem}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    toml = suffix == ".toml"
    try:
        text = raw.decode("utf-8-sig")
        data = tomllib.loads(text) if toml else parse_yaml(path, text)
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        _check_other_format(path, text, toml)
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        raise ConfigError(f"config file {path} is not valid {'TOML' if toml else 'YAML'}: {detail}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply to read; settings need only two levels") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        _check_other_format(path, text, toml)
        raise ConfigError(f"config file {path} must hold a mapping of settings (key: value), "
                          f"not a {type(data).__name__}")
    return data


def parse_yaml(path: Path, text: str) -> Any:
    """``data = parse_yaml(path, text)``: one YAML document, safely; :class:`ConfigError` for a key given twice in
    one mapping (YAML would keep the last) or aliases that repeat more than ``MAX_ALIAS_REPEATS`` values."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        repeats = _expanded_size(path, node, sizes, set()) - len(sizes)
        if repeats > MAX_ALIAS_REPEATS:
            raise ConfigError(f"config file {path}: YAML aliases (*name) repeat {repeats:,} values, more than the "
                              f"{MAX_ALIAS_REPEATS} allowed; write the settings out without nested aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(path: Path, node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes under ``node`` with every alias expanded, counted without expanding (``sizes``: by node id);
    checks each mapping for a key given twice."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise ConfigError(f"config file {path}, line {node.start_mark.line + 1}: a YAML alias refers to a value "
                          "that contains it; write the setting out without the alias")
    open_nodes.add(id(node))
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if (key.tag, key.value) in seen:
                    raise ConfigError(f"config file {path}, line {line}: the key {short(key.value)} appears twice "
                                      f"in one mapping (first on line {seen[key.tag, key.value]}); YAML keeps only "
                                      "the last one, so merge the two entries or remove one")
                seen[key.tag, key.value] = line
            children += (key, value)
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    size = 1 + sum(_expanded_size(path, child, sizes, open_nodes) for child in children)
    open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size


def _check_other_format(path: Path, text: str, toml: bool) -> None:
    """:class:`ConfigError` suggesting the other suffix when a file that fails to parse is a mapping in the other
    format (TOML ``key = value`` lines in a .yaml file, or YAML in a .toml file)."""
    try:
        other = parse_yaml(path, text) if toml else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, ConfigError, RecursionError):
        return
    if isinstance(other, dict) and other:
        fmt, suffix = ("YAML", ".yaml") if toml else ("TOML", ".toml")
        raise ConfigError(f"config file {path} holds {fmt}, not {'TOML' if toml else 'YAML'}; rename it to "
                          f"{path.with_suffix(suffix).name}")


def _studies(data: dict[str, Any], source: str) -> tuple[list[str], dict[str, dict]]:
    if "study" in data:
        listed: Any = [data["study"]] if isinstance(data["study"], str) else data["study"]
        if not isinstance(data["study"], str):
            raise ConfigError(f"{source}: 'study' must be one study name, e.g. phases")
    else:
        listed = data.get("studies", list(studies()))
    per_study: dict[str, dict] = {}
    if isinstance(listed, dict):
        per_study = {name: _mapping(v or {}, name, source) for name, v in listed.items()}
        listed = list(listed)
    if not isinstance(listed, list) or not listed or not all(isinstance(n, str) for n in listed):
        raise ConfigError(f"{source}: 'studies' must be a non-empty list of study names, e.g. [divergence, phases]")
    suite = tuple(studies())
    unknown = [n for n in listed if n not in suite]
    if unknown:
        raise ConfigError(f"{source}: unknown study {short(unknown[0])}; choose from {', '.join(suite)}")
    if len(set(listed)) != len(listed):
        raise ConfigError(f"{source}: a study is listed twice in {short(listed)}")
    return [n for n in suite if n in listed], per_study


def _mapping(value: Any, name: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{name}' must be a mapping of settings, not {type(value).__name__}")
    return value


def _checked(settings: dict[str, Any], source: str, base: Path | None, section: str | None = None
             ) -> dict[str, Any]:
    """Each key a StudyConfig field, each value of that field's type (converted where obvious)."""
    out = {}
    known = fields()
    for key, value in settings.items():
        where = f"{section}.{key}" if section else key
        if key not in known:
            hint = f"; known settings: {', '.join(known)}" if section or key not in studies() else ""
            raise ConfigError(f"{source}: unknown setting {short(str(where))}{hint}")
        value = _typed(key, value, where, source, known[key][1])
        if _is_file(key, value) and base:
            value = absolute_path(value, base)
        if key == "models" and base:  # a local model relative to the file, else to the working folder
            value = tuple(absolute_model(m, base) for m in value)
        out[key] = value
    return out


def _typed(key: str, value: Any, where: str, source: str, owner: type) -> Any:
    hint = typing.get_type_hints(owner)[key]
    optional = type(None) in typing.get_args(hint) and isinstance(hint, types.UnionType)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{source}: setting '{where}' cannot be empty")
    kind = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if key == "layers" and isinstance(value, list) and all(type(v) is int for v in value):
        return ",".join(map(str, value))  # [0, 4, 8] means '0,4,8'
    if key in ("models", "figure_format") and isinstance(value, str):
        return (value,)  # figure_format: svg,pdf means [svg, pdf] (StudyConfig splits it)
    if typing.get_origin(kind) is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{source}: setting '{where}' must be a list of strings, got {short(value)}")
    ok = (type(value) is int or (kind is float and type(value) is float)) if kind in (int, float) \
        else isinstance(value, kind)
    if not ok:
        raise ConfigError(f"{source}: setting '{where}' must be {_article(kind)}, got {short(value)} "
                          f"({type(value).__name__})")
    return float(value) if kind is float else value


def _article(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, kind.__name__)
