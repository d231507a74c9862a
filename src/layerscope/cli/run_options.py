"""The options of ``layerscope run`` that set study settings, made from the registered studies: a new study's
settings appear on the command line with no edit here.

    @app.command("run", cls=RunCommand)   # its own options (--config, --out, ...) are written out as usual
    def run_command(ctx: typer.Context, ...):
        overrides = ctx.meta[SETTINGS]    # {setting: value} of the study settings given on the command line

    layerscope run --help                 # every option
    layerscope run anisotropy --help      # the shared settings and anisotropy's own; the others hidden, still
                                          # accepted (the study's config then names the one it does not read)

Each shared setting (``StudyConfig``) and each field of a study's ``Settings`` becomes ``--field-name`` with the
field's help text and a type from its annotation: ``bool`` a flag (``--no-NAME`` when it defaults to true), a
file setting a path, a union such as ``str | list[int]`` a string, ``tuple[str, ...]`` a repeatable option.
The options are built the first time ``run`` is parsed or asked for help: loading the studies imports torch,
which ``layerscope --help`` must not.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import typing
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from ..terminal import say
from .extract import Compat, DType, StoreDType

try:  # typer >= 0.26 carries its own copy of click
    from typer._click import Context, Parameter
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click import Context, Parameter
    from click.exceptions import UsageError

SETTINGS = "layerscope.run.settings"
"""``ctx.meta`` key: the study settings given on the command line, as ``resolve_configs`` overrides."""
_STUDY = "layerscope.run.study"

CHOICES: dict[str, type[Enum]] = {"compat": Compat, "dtype": DType, "store_dtype": StoreDType}
ALIASES = {"models": ("--model", "-m"), "dataset": ("--dataset", "-d")}
LIMITS = {"batch_size": {"min": 1}}
HELP = {"models": "{help} Repeat for several.", "cache": "Neither read nor write the activation cache."}
STUDY_HELP = "The study: {names}. Leave it out to run every study into one folder with an HTML report."
SHARED_PANEL = "Settings every study reads"


@dataclass(frozen=True)
class SettingOption:
    """One study setting as an option: ``param`` is its click parameter, built by typer."""

    name: str
    param: Parameter
    readers: tuple[str, ...] | None  # the studies that read it; None: every study (a shared setting)
    inverted: bool  # --no-NAME: given, the setting is false

    def override(self, value: Any) -> Any:
        """The command-line ``value`` as a ``resolve_configs`` override; ``None`` when the option was not given."""
        if self.param.multiple:
            return tuple(value) if value else None
        if getattr(self.param, "is_flag", False):
            return (not self.inverted) if value else None
        if isinstance(value, Enum):
            return value.value
        return str(value) if isinstance(value, Path) else value


class RunCommand(TyperCommand):
    """``layerscope run``: the options its function declares, then one per study setting, built on first use.

    ``run STUDY --help`` hides the settings STUDY does not read (they still parse: ``resolve_configs`` then
    names the one given and the study that does not read it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._views: dict[str | None, list[Parameter]] = {}

    def get_params(self, ctx: Context) -> list[Parameter]:
        params = [*self.params, *self._view(ctx.meta.get(_STUDY))]
        help_option = self.get_help_option(ctx)
        return [*params, help_option] if help_option is not None else params

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        ctx.meta[_STUDY] = self._peek_study(ctx, args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Context) -> Any:
        given = {o.name: o.override(ctx.params.pop(o.name)) for o in self.setting_options if o.name in ctx.params}
        ctx.meta[SETTINGS] = {name: value for name, value in given.items() if value is not None}
        return super().invoke(ctx)

    @cached_property
    def setting_options(self) -> list[SettingOption]:
        from ..run.registry import studies

        for param in self.params:
            if param.name == "study":
                param.help = STUDY_HELP.format(names=", ".join(studies()))
        return build_options(taken={n for p in self.params for n in (p.name, *p.opts, *p.secondary_opts)})

    def _view(self, study: str | None) -> list[Parameter]:
        """The setting options as ``run STUDY --help`` shows them (the same objects on every call: click orders
        the parsed options by identity)."""
        if study not in self._views:
            self._views[study] = [_shown_for(option, study) for option in self.setting_options]
        return self._views[study]

    def _peek_study(self, ctx: Context, args: list[str]) -> str | None:
        """The STUDY argument on the command line, if it names a registered study (parsing nothing for good)."""
        from ..run.registry import studies

        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except UsageError:  # the real parse reports it
            return None
        study = opts.get("study")
        return study if study in studies() else None


def _shown_for(option: SettingOption, study: str | None) -> Parameter:
    """A copy of ``option.param`` with the help ``run STUDY --help`` gives it (all studies' when ``study`` is None):
    hidden when ``study`` does not read it, else with that study's own help text and default."""
    from ..run.registry import studies

    param = copy.copy(option.param)
    shared = option.readers is None
    if study is None:
        param.rich_help_panel = SHARED_PANEL if shared else "Study settings"
        if not shared:
            param.help = f"{param.help} (read by {', '.join(option.readers)})"
    elif shared or study in option.readers:
        param.rich_help_panel = SHARED_PANEL if shared else f"Settings of {study}"
        if not shared:
            own = {f.name: f for f in dataclasses.fields(studies()[study].Settings)}
            param.help = option_help(own[option.name], option.inverted)
    else:
        param.hidden = True
    return param


def build_options(taken: set[str]) -> list[SettingOption]:
    """One option per setting: the shared ones, then each study's own in suite order (first declaration wins).
    ``taken``: the names and flags the command has already; a setting that would reuse one is left out (with a
    warning) and can still be set in a config file."""
    from ..run.config_file import fields, used_by
    from ..study.config import COMMON, StudyConfig

    specs: list[tuple[str, Any, Any]] = []
    found: list[tuple[str, bool]] = []
    for name, (field, owner) in fields().items():
        hint = typing.get_type_hints(StudyConfig if name in COMMON else owner)[name]
        annotation = _annotation(name, field, hint)
        inverted = annotation is bool and field.default is True
        decls = ALIASES.get(name, (f"--{'no-' if inverted else ''}{name.replace('_', '-')}",))
        clash = [d for d in (name, *decls) if d in taken]
        if clash:
            say(f"warning: setting '{name}' is not offered as {decls[0]}: `layerscope run` has {clash[0]} "
                "already; set it in a config file", err=True)
            continue
        taken.update((name, *decls))
        specs.append((name, annotation, typer.Option(None if annotation is not bool else False, *decls,
                                                     help=option_help(field, inverted), **LIMITS.get(name, {}))))
        found.append((name, inverted))
    params = {p.name: p for p in _typer_params(specs)}
    return [SettingOption(name, params[name], used_by(name), inverted) for name, inverted in found]


def option_help(field: dataclasses.Field, inverted: bool = False) -> str:
    """The field's help text, with its default when the text does not give it."""
    text = HELP.get(field.name, "{help}").format(help=field.metadata["help"])
    if inverted:  # the default is on
        return text if field.name in HELP else f"{text} On by default: this flag turns it off."
    default = field.default
    if default in (None, (), False, dataclasses.MISSING) or "Default" in text:
        return text
    return f"{text} Default: {default}."


def _annotation(name: str, field: dataclasses.Field, hint: Any) -> Any:
    """The option's type: the field's, with ``None`` left out; a union of several kinds is a string."""
    if name in CHOICES:
        return CHOICES[name]
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] \
        if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
    if len(kinds) != 1:
        return str  # e.g. layers: str | list[int], written '0,4,8' on the command line
    kind = kinds[0]
    if typing.get_origin(kind) in (tuple, list):
        return list[str]
    if kind is str and field.metadata.get("file") and not field.metadata.get("keywords"):
        return Path
    return kind if kind in (bool, int, float, str) else str


def _typer_params(specs: list[tuple[str, Any, Any]]) -> list[Parameter]:
    """Click parameters for ``(name, annotation, typer.Option(...))``, made by typer as for a function
    with those keyword arguments (so values are checked and errors worded as for every other option)."""

    def settings(**values: Any) -> None:  # never called: typer reads only its signature
        """Study settings."""

    settings.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)
         for name, annotation, info in specs])
    settings.__annotations__ = {name: annotation for name, annotation, _ in specs}
    holder = typer.Typer(add_completion=False)
    holder.command()(settings)
    return typer.main.get_command(holder).params
