"""The engine's module paths of layerscope 0.3, kept working with a ``DeprecationWarning`` until 0.5.0.

    from layerscope.engine.store import LayerStore    # warns: moved to layerscope.engine.cache.store
    from layerscope.engine.cache.store import LayerStore    # the new place: the same class, no warning

In 0.4.0 the engine's 43 modules moved from one flat folder into five rooms (``forward``, ``cache``,
``lenses``, ``atlas``, ``interventions``). :data:`MOVED` maps each old module name to where its names live
now. An old path imports as a stand-in module; reading a name from it warns, naming the new place, and gives the
object itself (the same class or function, so ``isinstance`` and monkeypatching the new module still agree).
``layerscope.engine.atlas`` and ``layerscope.engine.interventions`` are rooms now: their packages forward the old
modules' names the same way. Nothing here imports the engine until a name is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

MOVED: dict[str, tuple[str, ...]] = {
    "batching": ("forward.batching",), "guards": ("forward.guards",), "capture": ("forward.capture",),
    "head": ("forward.head",), "pooling": ("forward.pooling",), "massive": ("forward.massive",),
    "pipeline": ("forward.pipeline",), "extract": ("forward.extract",), "activations": ("forward.activations",),
    "tokens": ("forward.tokens",), "probing": ("forward.probing",),
    "store": ("cache.store",), "store_files": ("cache.files",), "store_views": ("cache.views",),
    "entry": ("cache.entry",), "journal": ("cache.journal",), "layers": ("cache.layers",),
    "lens": ("lenses.logit",), "lens_prompt": ("lenses.prompt",), "lens_rows": ("lenses.logit_rows",),
    # 0.3's tuned_lens also handed out train_tuned_lens, split_holdout, evaluate_lenses and LensEvaluation
    "tuned_lens": ("lenses.tuned", "lenses.tuned_train", "lenses.tuned_eval"),
    "tuned_lens_io": ("lenses.tuned_io",), "tuned_lens_train": ("lenses.tuned_train",),
    "tuned_lens_fit": ("lenses.tuned_fit",), "tuned_lens_rows": ("lenses.tuned_rows",),
    "tuned_lens_split": ("lenses.tuned_split",), "tuned_lens_eval": ("lenses.tuned_eval",),
    "tuned_lens_cache": ("lenses.tuned_cache",),
    "atlas": ("atlas.stream",), "atlas_sums": ("atlas.sums",), "atlas_moments": ("atlas.moments",),
    "atlas_entropy": ("atlas.entropy",), "atlas_layout": ("atlas.layout",),
    "massive_profile": ("atlas.massive_profile",),
    "surgery": ("interventions.surgery",), "surgery_run": ("interventions.surgery_run",),
    "steering": ("interventions.steering",), "edits": ("interventions.edits",),
    "interventions": ("interventions.edit_scores",), "transitions": ("interventions.transitions",),
    "scoring": ("interventions.scoring",), "prefix": ("interventions.prefix",),
    "prefix_plan": ("interventions.prefix_plan",),
}
"""Old module name (under ``layerscope.engine``) -> the modules, in lookup order, that hold its names now."""

ROOMS = ("forward", "cache", "lenses", "atlas", "interventions")
ENGINE = __name__.rpartition(".")[0]
REMOVED_IN = "0.5.0"


def old_attribute(old: str, name: str) -> Any:
    """``name`` as the 0.3 module ``layerscope.engine.<old>`` held it, with a ``DeprecationWarning`` that names its
    new module; ``AttributeError`` if none of the new modules holds it (a room's sub-module is never forwarded).
    Called by a module's ``__getattr__``, so the warning points at the line that asked for the name."""
    if not name.startswith("__") and not (old in ROOMS and name in _submodules(old)):
        for target in MOVED[old]:
            module = importlib.import_module(f"{ENGINE}.{target}")
            if name in vars(module):
                warnings.warn(f"{ENGINE}.{old}.{name} moved to {ENGINE}.{target}.{name} in layerscope 0.4.0: import "
                              f"it from {ENGINE}.{target} (the old path stops working in {REMOVED_IN})",
                              DeprecationWarning, stacklevel=3)
                return vars(module)[name]
    raise AttributeError(f"module '{ENGINE}.{old}' has no attribute {name!r}")


def _submodules(room: str) -> set[str]:
    return {target.partition(".")[2] for targets in MOVED.values() for target in targets if target.startswith(room)}


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``layerscope.engine.<old>`` (an old module name that is not a room now) as a stand-in module whose
    names resolve through :func:`old_attribute`. Consulted only after the normal finders found no such module."""

    def find_spec(self, fullname: str, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package != ENGINE or old not in MOVED or old in ROOMS:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        old = module.__name__.rpartition(".")[2]
        new = ", ".join(f"{ENGINE}.{target}" for target in MOVED[old])
        module.__doc__ = f"Moved in layerscope 0.4.0 to {new}; this old path stops working in {REMOVED_IN}."

        def __getattr__(name: str) -> Any:
            return old_attribute(old, name)

        module.__getattr__ = __getattr__


class Engine(types.ModuleType):
    """The module type of ``layerscope.engine``: importing a stand-in (``import layerscope.engine.extract``) does not
    replace a name the package holds (the function ``layerscope.engine.extract``), as Python's import system would
    when it sets a loaded sub-module on its parent (it gets an ``AttributeError`` and warns, ``ImportWarning``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        loader = getattr(getattr(value, "__spec__", None), "loader", None)
        if isinstance(loader, OldPaths) and name in vars(self):
            raise AttributeError(f"{self.__name__}.{name} stays the package's own {name}, not the old module path")
        super().__setattr__(name, value)


def install() -> None:
    """Put :class:`OldPaths` last on ``sys.meta_path`` (once) and guard the engine package's own names."""
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldPaths())
    sys.modules[ENGINE].__class__ = Engine
