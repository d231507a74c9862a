"""Every study by name: the built-in ones and those other packages add.

    @register_study                       # in the study's own package (layerscope.study.register_study)
    class Toy(Study): name = "toy"; ...

    studies()                             # {name: Study}, in suite order
    study = get_study("phases");  result = run_study(StudyConfig(study="phases"))
    study_origin("toy")                   # "built-in", or the plugin's "<distribution> <version>"
    listing()                             # [(name, origin, title)]: what `layerscope studies` prints

Built-in studies are the sub-packages of ``layerscope.studies`` (each registers itself when imported). Another
package adds one through the entry-point group ``layerscope.studies``, naming a :class:`Study` subclass::

    [project.entry-points."layerscope.studies"]
    toy = "my_package.toy:Toy"

A plugin that fails to load is reported in one ``warning:`` line naming it; the other studies still run.
The built-in studies are registered before any plugin is imported, so a plugin module may build on one either
way: ``Base = type(layerscope.get_study("divergence"))`` (or ``study_class("divergence")`` from here) or
``from layerscope.studies.divergence import Divergence``, then ``class Mine(Base): name = "mine"``. While
plugins are being imported, only the built-in studies can be looked up.

Names are never taken over silently. A built-in study always keeps its name: a plugin study under it is not used,
and one ``warning:`` line names both packages. Two plugins offering one name: neither runs (the name is
unavailable, and a ``warning:`` line names both) until the user picks one in the environment variable
``LAYERSCOPE_PLUGINS="name=distribution[,name2=distribution2]"`` or uninstalls one. Each result's manifest
records ``study_origin``. A plugin is code its package runs in this process with your rights when it is
imported: these rules keep names unambiguous, they do not sandbox a package; install only packages you trust.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import re
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from .. import studies as built_in_studies
from ..errors import short
from ..study.base import Study
from ..study.registry import check_study, listen
from ..study.settings import ConfigError

if TYPE_CHECKING:
    from ..study.config import StudyConfig
    from ..study.result import StudyResult

ENTRY_POINT_GROUP = "layerscope.studies"
PICK_VARIABLE = "LAYERSCOPE_PLUGINS"
"""``LAYERSCOPE_PLUGINS="toy=toy-plugin,norms=my-norms"``: which distribution's study runs under a name that
several installed plugins offer."""
BUILT_IN = "built-in"
"""The origin of a study that ships with layerscope."""


@dataclass(frozen=True)
class Origin:
    """Where a plugin study comes from: ``label`` as shown ("toy-plugin 0.1"), ``package`` as
    ``LAYERSCOPE_PLUGINS`` names it, ``where`` the entry point's target or the class's module."""

    label: str
    package: str
    where: str

    def __str__(self) -> str:
        return f"{self.label} ({self.where})"


_BUILT_INS: dict[str, type[Study]] = {}
_FROM_CODE: dict[str, dict[type[Study], Origin]] = {}  # non-built-in studies registered outside an entry point
_OFFERED: dict[str, dict[type[Study], Origin]] = {}  # those and the entry points' (found again by each _load)
_REGISTERED: dict[str, type[Study]] = {}  # what runs under each name
_ORIGINS: dict[str, str] = {}
_UNAVAILABLE: dict[str, str] = {}  # name -> why no study runs under it, and the fix
_warned: set[str] = set()
_plugin: Origin | None = None  # the entry point being imported: what it registers is that package's
_loaded = False  # _load has started (or finished)
_resolved = False  # _load has finished: a study registered from now on is placed at once


def _take(cls: type[Study]) -> None:
    """What ``@register_study`` hands over: a built-in study, an entry point's, or one registered in code."""
    if _plugin is not None:
        _offer(_OFFERED, cls, _plugin)
    elif _is_built_in(cls):
        _BUILT_INS[cls.name] = cls
    else:
        origin = _code_origin(cls)
        _offer(_FROM_CODE, cls, origin)
        _offer(_OFFERED, cls, origin)
    if _resolved:
        _resolve()


def studies() -> dict[str, Study]:
    """Every registered study, in suite order (``Study.order``, then name)."""
    _load()
    ordered = sorted(_REGISTERED.values(), key=lambda cls: (cls.order, cls.name))
    return {cls.name: cls() for cls in ordered}


def study_class(name: str) -> type[Study]:
    """``study_class("phases")``: the class that runs under ``name``; ``ConfigError`` naming the fix when no
    study has that name or two plugins offer it."""
    _load()
    if name in _UNAVAILABLE:
        raise ConfigError(_UNAVAILABLE[name])
    if name not in _REGISTERED:
        raise ConfigError(f"unknown study {short(name)}; choose one of {', '.join(studies())}")
    return _REGISTERED[name]


def get_study(name: str) -> Study:
    return study_class(name)()


def study_origin(name: str) -> str:
    """``study_origin("divergence")`` -> ``"built-in"``; a plugin's ``"<distribution> <version>"``."""
    study_class(name)
    return _ORIGINS[name]


def listing() -> list[tuple[str, str, str]]:
    """``[(name, origin, title), ...]`` of every study that runs, in suite order, as plain text (a plugin's title
    with its control characters escaped: safe to print on a terminal)."""
    return [(name, plain(_ORIGINS[name]), plain(study.title)) for name, study in studies().items()]


def unavailable() -> dict[str, str]:
    """``{name: why}``: names several plugins offer and none of them runs under (until one is picked)."""
    _load()
    return dict(_UNAVAILABLE)


def run_study(config: StudyConfig) -> StudyResult:
    """Run ``config.study``; with no models given, on that study's default models.

    Every entry point (``layerscope run``, a suite, a sweep task, Python) comes through here, so this is where a
    result is refused when a number its verdicts are computed from is NaN or inf (:func:`finite.check_result`),
    and where its manifest gets ``study_origin`` (the registry's word, whatever the study wrote there).
    """
    from ..study.finite import check_result

    study = get_study(config.study)
    if not config.models:
        config = dataclasses.replace(config, models=study.default_models)
    result = check_result(study.run(config))
    result.manifest = {"study_origin": _ORIGINS[config.study],
                       **{k: v for k, v in result.manifest.items() if k != "study_origin"}}
    return result


def plain(text: object) -> str:
    """``plain("a\\x1b[2Jb")`` -> ``'a\\\\x1b[2Jb'``: ``text`` with every character a terminal would act on
    (control, format and other unprintable characters, including line breaks) escaped, for printing a
    plugin's strings as plain text."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))


def reload_plugins() -> None:
    """Look for plugins again (after a package was installed or put on ``sys.path`` in this process, or
    ``LAYERSCOPE_PLUGINS`` changed)."""
    global _loaded, _resolved
    _loaded = _resolved = False
    _load()


def _is_built_in(cls: type[Study]) -> bool:
    """Whether ``cls`` is defined in a module of this package's own folder (a module name alone can be borrowed)."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return (cls.__module__.startswith(f"{built_in_studies.__name__}.") and file is not None
            and Path(file).resolve().is_relative_to(Path(built_in_studies.__file__).resolve().parent))


def _offer(into: dict[str, dict[type[Study], Origin]], cls: type[Study], origin: Origin) -> None:
    """Note that ``origin`` offers ``cls``; an entry point's origin replaces one guessed from the module."""
    offered = into.setdefault(cls.name, {})
    if cls not in offered or offered[cls].package.startswith("module "):
        offered[cls] = origin


def _code_origin(cls: type[Study]) -> Origin:
    """The origin of a plugin class registered outside an entry point: its distribution where one installs
    its top-level module, else its module."""
    from importlib.metadata import packages_distributions, version

    names = packages_distributions().get(cls.__module__.split(".")[0], [])
    if names:
        try:
            return Origin(f"{names[0]} {version(names[0])}", names[0], cls.__module__)
        except Exception:  # noqa: BLE001 - metadata of someone else's package: fall back to the module
            pass
    return Origin(f"module {cls.__module__}", f"module {cls.__module__}", f"{cls.__module__}.{cls.__qualname__}")


def _entry_origin(entry) -> Origin:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return Origin("an unknown package", entry.value, entry.value)
    return Origin(f"{dist.name} {dist.version}", dist.name, entry.value)


def _norm(name: str) -> str:
    """A distribution name as PyPI compares it (``Toy_Plugin`` = ``toy-plugin``)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _warn(message: str) -> None:
    """One ``warning:`` line on stderr, once per process for the same message, as plain text."""
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {plain(' '.join(message.split()))}", file=sys.stderr)


def _picks() -> dict[str, str]:
    """``LAYERSCOPE_PLUGINS`` as ``{study name: normalised distribution name}``; a malformed item is a warning."""
    picks = {}
    for item in filter(None, (part.strip() for part in os.environ.get(PICK_VARIABLE, "").split(","))):
        name, sep, package = item.partition("=")
        if not sep or not name.strip() or not package.strip():
            _warn(f"{PICK_VARIABLE} item {short(item)} is ignored: write name=distribution, e.g. "
                  f"{PICK_VARIABLE}=toy=toy-plugin (several separated by commas)")
            continue
        picks[name.strip()] = _norm(package)
    return picks


def _resolve() -> None:
    """Decide what runs under each name: built-ins, then each plugin name one package offers or the user picked."""
    from ..provenance import VERSION

    picks = _picks()
    registered: dict[str, type[Study]] = dict(_BUILT_INS)
    origins = dict.fromkeys(_BUILT_INS, BUILT_IN)
    refused: dict[str, str] = {}
    for name, offered in _OFFERED.items():
        if name in _BUILT_INS:
            for cls, origin in offered.items():
                if cls is not _BUILT_INS[name]:
                    _warn(f"study plugin {name!r} from package {origin} is not used: {name!r} is the built-in "
                          f"study of layerscope {VERSION} ({_BUILT_INS[name].__module__}), which always keeps "
                          f"its name; ask the maintainers of {origin.package} to rename it (its `name`), or "
                          f"uninstall {origin.package}")
            continue
        if name in picks:
            chosen = [(cls, origin) for cls, origin in offered.items() if _norm(origin.package) == picks[name]]
        else:
            chosen = list(offered.items())
        if len(chosen) == 1:
            registered[name], origins[name] = chosen[0][0], chosen[0][1].label
            continue
        refused[name] = _clash(name, offered, picks.get(name))
        _warn(refused[name])
    for name in sorted(picks):
        if name in _BUILT_INS:
            what = "a built-in study, which always runs"
        elif name not in _OFFERED:
            what = "offered by no installed plugin"
        else:
            continue
        _warn(f"{PICK_VARIABLE} picks a package for study {short(name)}, which is {what}; the pick is ignored")
    _REGISTERED.clear()
    _REGISTERED.update(registered)
    _ORIGINS.clear()
    _ORIGINS.update(origins)
    _UNAVAILABLE.clear()
    _UNAVAILABLE.update(refused)


def _place_built_ins() -> None:
    """Make the built-in studies, and only those, run under their names: what a plugin sees while the entry
    points are imported (``get_study("divergence")`` from its module). No plugin study is placed before
    :func:`_resolve` has seen them all, so none can take a name over in the meantime."""
    _REGISTERED.clear()
    _REGISTERED.update(_BUILT_INS)
    _ORIGINS.clear()
    _ORIGINS.update(dict.fromkeys(_BUILT_INS, BUILT_IN))
    _UNAVAILABLE.clear()


def _clash(name: str, offered: dict[type[Study], Origin], picked: str | None) -> str:
    """Why no study runs under ``name``, which the packages in ``offered`` all offer, and the fix."""
    both = " and ".join(sorted(str(origin) for origin in offered.values()))
    packages = sorted({origin.package for origin in offered.values()})
    fix = (f"pick one with {PICK_VARIABLE}={name}=DISTRIBUTION (one of {', '.join(packages)}, e.g. "
           f"{PICK_VARIABLE}={name}={packages[0]}), or uninstall all but one of them")
    if picked is None:
        return f"study {name!r} is offered by several plugins, {both}, so neither runs; {fix}"
    return (f"study {name!r} is offered by several plugins, {both}, and {PICK_VARIABLE} picks {picked!r}, "
            f"which {'offers several' if any(_norm(p) == picked for p in packages) else 'is not one of them'}; "
            f"{fix}")


def _load() -> None:
    """Import the built-in study packages, then every plugin's entry point (once), and decide what runs."""
    global _loaded, _plugin, _resolved
    if _loaded:
        return
    _loaded = True
    for module in pkgutil.iter_modules(built_in_studies.__path__):
        if module.ispkg:
            importlib.import_module(f"{built_in_studies.__name__}.{module.name}")
    _place_built_ins()  # before any plugin is imported: one may look a built-in up to subclass it
    _OFFERED.clear()  # the entry points installed now (a reload forgets an uninstalled package's)
    _OFFERED.update({name: dict(offered) for name, offered in _FROM_CODE.items()})
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        origin = _entry_origin(entry)
        try:
            _plugin = origin  # a study the module registers while it is imported is this package's too
            try:
                cls = entry.load()
            finally:
                _plugin = None
            check_study(cls)
            if _BUILT_INS.get(cls.name) is not cls:  # an entry point may name a built-in class: nothing new
                _offer(_OFFERED, cls, origin)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the built-in studies
            where = f"package {origin.label}" if getattr(entry, "dist", None) is not None else "an installed package"
            detail = f"{type(exc).__name__}: {exc}"[:200]
            _warn(f"study plugin {entry.name!r} ({entry.value}, {where}) failed to load and is skipped: {detail}")
    _resolve()
    _resolved = True


listen(_take)  # every study class registered, before this module was imported or after
