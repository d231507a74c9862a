"""``@register_study``: how a study makes itself known, built-in or plugin.

    @register_study
    class Toy(Study):
        name = "toy"; title = "Toy"; question = "..."

The decorator checks the class (a :class:`Study` subclass with a lower-case ``name``, a ``title``, a
``question`` and a frozen ``Settings`` dataclass) and hands it to whoever listens: ``layerscope.run.registry``,
which finds the built-in studies and the plugins' entry points and decides what runs under each name (see its
docstring for the rules). A class registered before that listener exists is handed to it when it starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..errors import short
from ..paths import NAME_FIX, name_problem
from .base import Study

_registered: list[type[Study]] = []
_listeners: list[Callable[[type[Study]], None]] = []


def register_study(cls: type[Study]) -> type[Study]:
    """Class decorator: make ``cls`` runnable by its ``name`` (``layerscope run NAME``, suites, sweeps).

    A class of a sub-package of ``layerscope.studies`` is built-in; any other is a plugin study, which never
    replaces a built-in one nor, silently, another plugin's."""
    check_study(cls)
    _registered.append(cls)
    for listener in _listeners:
        listener(cls)
    return cls


def listen(listener: Callable[[type[Study]], None]) -> None:
    """Call ``listener(cls)`` for every study class registered so far and every one registered from now on."""
    _listeners.append(listener)
    for cls in list(_registered):
        listener(cls)


def check_study(cls: object) -> None:
    """A ``TypeError`` naming what is missing when ``cls`` is not a complete :class:`Study` subclass."""
    if not (isinstance(cls, type) and issubclass(cls, Study)):
        raise TypeError(f"{cls!r} is not a layerscope Study subclass")
    for attr in ("name", "title", "question"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr).strip():
            raise TypeError(f"study {cls.__name__} needs a class attribute {attr!r} (a non-empty string)")
    if not cls.name.replace("_", "").isalnum() or not cls.name.isascii() or cls.name != cls.name.lower():
        raise TypeError(f"study name {short(cls.name)} must be lower-case letters, digits and underscores")
    problem = name_problem(cls.name)
    if problem is not None:
        raise TypeError(f"study name {short(cls.name)} cannot name its run folder: it {problem}; {NAME_FIX}")
    if not (isinstance(cls.Settings, type) and dataclasses.is_dataclass(cls.Settings)):
        raise TypeError(f"{cls.__name__}.Settings must be a frozen dataclass subclassing Settings")
