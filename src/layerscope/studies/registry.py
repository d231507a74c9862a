"""Every study by name: the built-in ones and those other packages add.

    @register_study                       # in the study's own package
    class Toy(Study): name = "toy"; ...

    studies()                             # {name: Study}, in suite order
    study = get_study("phases");  result = run_study(StudyConfig(study="phases"))

Built-in studies are the sub-packages of ``layerscope.studies`` (each registers itself when imported). Another
package adds one through the entry-point group ``layerscope.studies``, naming a :class:`Study` subclass::

    [project.entry-points."layerscope.studies"]
    toy = "my_package.toy:Toy"

A plugin that fails to load is reported in one ``warning:`` line naming it; the other studies still run.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from ..errors import short
from .base import Study
from .settings import ConfigError

if TYPE_CHECKING:
    from .config import StudyConfig
    from .result import StudyResult

ENTRY_POINT_GROUP = "layerscope.studies"
_REGISTERED: dict[str, type[Study]] = {}
_loaded = False


def register_study(cls: type[Study]) -> type[Study]:
    """Class decorator: make ``cls`` runnable by its ``name`` (``layerscope run NAME``, suites, sweeps)."""
    if not (isinstance(cls, type) and issubclass(cls, Study)):
        raise TypeError(f"{cls!r} is not a layerscope Study subclass")
    for attr in ("name", "title", "question"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr).strip():
            raise TypeError(f"study {cls.__name__} needs a class attribute {attr!r} (a non-empty string)")
    if not cls.name.replace("_", "").isalnum() or cls.name != cls.name.lower():
        raise TypeError(f"study name {cls.name!r} must be lower-case letters, digits and underscores")
    if not (isinstance(cls.Settings, type) and dataclasses.is_dataclass(cls.Settings)):
        raise TypeError(f"{cls.__name__}.Settings must be a frozen dataclass subclassing Settings")
    _REGISTERED[cls.name] = cls
    return cls


def studies() -> dict[str, Study]:
    """Every registered study, in suite order (``Study.order``, then name)."""
    _load()
    ordered = sorted(_REGISTERED.values(), key=lambda cls: (cls.order, cls.name))
    return {cls.name: cls() for cls in ordered}


def study_class(name: str) -> type[Study]:
    _load()
    if name not in _REGISTERED:
        raise ConfigError(f"unknown study {short(name)}; choose one of {', '.join(studies())}")
    return _REGISTERED[name]


def get_study(name: str) -> Study:
    return study_class(name)()


def run_study(config: StudyConfig) -> StudyResult:
    """Run ``config.study``; with no models given, on that study's default models.

    Every entry point (``layerscope run``, a suite, a sweep task, Python) comes through here, so this is where a
    result is refused when a number its verdicts are computed from is NaN or inf (:func:`finite.check_result`).
    """
    from .finite import check_result

    study = get_study(config.study)
    if not config.models:
        config = dataclasses.replace(config, models=study.default_models)
    return check_result(study.run(config))


def _load() -> None:
    """Import the built-in study packages, then every plugin's entry point (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    package = importlib.import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        if module.ispkg:
            importlib.import_module(f"{__package__}.{module.name}")
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = entry.load()
            if isinstance(cls, type) and issubclass(cls, Study) and _REGISTERED.get(cls.name) is not cls:
                register_study(cls)
            elif not (isinstance(cls, type) and issubclass(cls, Study)):
                raise TypeError(f"{entry.value} is not a layerscope Study subclass")
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the built-in studies
            where = f"package {entry.dist.name}" if entry.dist is not None else "an installed package"
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            print(f"warning: study plugin {entry.name!r} ({entry.value}, {where}) failed to load and is skipped: "
                  f"{detail}", file=sys.stderr)


def reload_plugins() -> None:
    """Look for plugins again (after a package was installed or put on ``sys.path`` in this process)."""
    global _loaded
    _loaded = False
    _load()
