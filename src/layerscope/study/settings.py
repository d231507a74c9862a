"""A study's own settings: one frozen dataclass per study, its section of the config.

    @dataclass(frozen=True)
    class ToySettings(Settings):
        scale: float = setting("How much to scale the metric by.", default=1.0)

        def __post_init__(self):
            super().__post_init__()                      # paths made absolute
            if self.scale <= 0:
                raise ConfigError(f"--scale {self.scale} must be positive")

Each field's ``help`` becomes its CLI option's help (``--scale``) and the config-file key's meaning;
a field made with ``file=True`` names an input file (made absolute, never replaced by an output folder).
:class:`PairSettings` holds what every statement-pair study reads (dataset, layers, permutations).
A value whose default depends on ``--compat`` is a :func:`by_compat` method: ``config.layer_spec``.

Every setting that multiplies work is bounded when the settings are built, before any model loads:
``check_count(value, "--n-bootstrap", 100, MAX_BOOTSTRAP, why)``; :data:`BOUNDS` lists each bound for the README.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LayerscopeError, short, spelled
from ..modes import NOTEBOOKS, notebooks_alias


class ConfigError(LayerscopeError):
    """A study setting that cannot work."""


MAX_BOOTSTRAP = 100_000
"""Most bootstrap resamples per interval (--n-bootstrap): the ends of a 95% interval settle to the reported digits
long before; each resample re-runs the statistic."""
MAX_PERMUTATIONS = 100_000
"""Most permutations per p-value (--n-permutations): a p-value resolves 1/100,000 with them."""
MAX_LAYER = 4096
"""The highest layer index a --layers list may name (so at most 4,097 layers); the deepest models have ~130."""
MAX_LENGTH = 131_072
"""Most tokens per text (--max-length): the longest context of the supported models."""
MAX_BATCH_SIZE = 4096
"""Most texts per forward pass (--batch-size); memory grows with it, speed stops growing long before."""
MAX_MODELS = 10_000
"""Most models in one study config, and most tasks (models x revisions) in one sweep."""
MAX_WORKERS = 1024
"""Most CPUs of a local Ray instance (--workers)."""
MAX_GPUS_PER_TASK = 64
"""Most GPUs one sweep task asks Ray for (--gpus-per-task)."""

BOUNDS: dict[str, tuple[int, int, str]] = {
    "--n-bootstrap": (100, MAX_BOOTSTRAP, "fewer resamples are too few for a confidence interval, more change no "
                      "reported digit"),
    "--n-permutations": (100, MAX_PERMUTATIONS, "fewer are too few for a p-value, more change no reported digit"),
    "--layers": (0, MAX_LAYER, "layer indices count from 0 (the embeddings); no model has more layers"),
    "--max-length": (2, MAX_LENGTH, "a text needs 2 tokens (one to predict from, one to predict), and no supported "
                     "model reads more positions"),
    "--batch-size": (1, MAX_BATCH_SIZE, "texts per forward pass; leave it out to plan batches from memory"),
    "models per study (--model)": (0, MAX_MODELS, "models load one after another; split the list into several runs"),
    "tasks per sweep (models x revisions)": (1, MAX_MODELS, "each task is a whole study run; split the sweep into "
                                             "several"),
    "--workers": (1, MAX_WORKERS, "CPUs of the local Ray instance, one task each"),
}
"""``{option: (lowest, highest, why)}``: every bound on work a setting multiplies, as the README table lists them
(besides ``--gpus-per-task``, 0 to :data:`MAX_GPUS_PER_TASK`, a fraction allowed, checked in ``sweep.plan``).
``check_bound(value, "--n-bootstrap")`` checks one."""


def check_count(value: Any, name: str, low: int, high: int, why: str) -> int:
    """``check_count(self.n_bootstrap, "--n-bootstrap", 100, MAX_BOOTSTRAP, "fewer are too few for an interval")``:
    ``value`` when it is a whole number from ``low`` to ``high``, else a :class:`ConfigError` naming the option
    (``--n-bootstrap`` on the command line, ``n_bootstrap`` in Python), the value, the limit and the fix,
    followed by ``why`` (the reason for the limits). Call it in a settings ``__post_init__``, so the bound is
    checked when the config is built, before any model loads."""
    shown = spelled(name, name[2:].replace("-", "_")) if name.startswith("--") else name
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{shown} must be a whole number from {low:,} to {high:,}, got {short(value)}; {why}")
    if value < low:
        raise ConfigError(f"{shown} {value:,} is too small; use at least {low:,} (at most {high:,}): {why}")
    if value > high:
        raise ConfigError(f"{shown} {value:,} is above the limit of {high:,}; use {low:,} to {high:,}: {why}")
    return value


def check_bound(value: Any, option: str) -> int:
    """``check_bound(self.n_bootstrap, "--n-bootstrap")``: :func:`check_count` with the bound :data:`BOUNDS` lists."""
    return check_count(value, option, *BOUNDS[option])


def setting(help: str, *, default: Any = None, file: bool = False, keywords: tuple[str, ...] = ()) -> Any:
    """A settings field with its help text; ``file``: it names an input file unless it is one of ``keywords``."""
    return field(default=default, metadata={"help": help, "file": file, "keywords": keywords})


def by_compat(method: Callable[[Any, str | None], Any]) -> Callable[[Any, str | None], Any]:
    """Mark ``method(settings, compat)`` as a value :class:`~layerscope.study.config.StudyConfig` exposes as an
    attribute: ``config.quant_scheme`` is ``config.settings.quant_scheme(config.compat)``."""
    method.by_compat = True  # type: ignore[attr-defined]
    return method


def absolute_path(path: str, base: Path | None = None) -> str:
    """``path`` (``~`` expanded) made absolute against ``base`` (default: the working folder)."""
    return str((Path(base or Path.cwd()) / Path(path).expanduser()).resolve())


@dataclass(frozen=True)
class Settings:
    """The base of every study's settings section (a study without settings uses it as it is)."""

    def __post_init__(self):
        for f in file_fields(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, (str, os.PathLike)) and value not in f.metadata["keywords"]:
                object.__setattr__(self, f.name, absolute_path(os.fspath(value)))  # works from any folder

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def input_files(self) -> list[str]:
        """The input files these settings name (not the keywords such as 'standard')."""
        return [getattr(self, f.name) for f in file_fields(type(self))
                if getattr(self, f.name) not in (None, *f.metadata["keywords"])]


def file_fields(cls: type[Settings]) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("file")]


def is_file_setting(cls: type[Settings], key: str, value: Any) -> bool:
    """Whether ``value`` of setting ``key`` names a file (``configs: standard`` does not)."""
    found = next((f for f in file_fields(cls) if f.name == key), None)
    return found is not None and value is not None and value not in found.metadata["keywords"]


LAYERS_HELP = ("Layers to test: 'all', 'notebooks' (the notebooks' choice: every 4th plus the last; 'seed' is its "
               "deprecated old name) or a list like '0,4,8'.")


def layers_setting(layers: str | list[int] | tuple[int, ...] | None) -> str | None:
    """A ``layers`` setting checked and written as a string: ``[0, 4, 8]`` (the Python API, YAML) -> ``"0,4,8"``."""
    if isinstance(layers, (list, tuple)):
        _check_layer_count(len(layers))
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
            raise ConfigError(f"layers {short(list(layers))} must be whole numbers, e.g. [0, 4, 8]")
        layers = ",".join(map(str, layers))
    if layers is not None:
        if not isinstance(layers, str):
            raise ConfigError(f"layers {short(layers)} must be 'all', 'notebooks', a list like [0, 4, 8] "
                              "or a string like '0,4,8'")
        layers = notebooks_alias(layers, "layers")
        parse_layers(layers)
    return layers


@dataclass(frozen=True)
class PairSettings(Settings):
    """What every statement-pair study reads: the dataset, the layers to test and the permutation count."""

    dataset: str | None = setting("Statement-pair dataset file (.json, .jsonl, .csv); default: the bundled pairs.",
                                  file=True)
    layers: str | list[int] | None = setting(f"{LAYERS_HELP} Default: all (notebooks with --compat notebooks).")
    n_permutations: int = setting("Permutations for the permutation p-values (not used in notebooks mode).",
                                  default=10_000)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "layers", layers_setting(self.layers))
        check_bound(self.n_permutations, "--n-permutations")

    @by_compat
    def layer_spec(self, compat: str | None) -> str:
        """The layers setting after defaults: notebooks mode samples layers as the notebooks do."""
        return self.layers or (NOTEBOOKS if compat == NOTEBOOKS else "all")


PAIR_NOTES = (
    ("mean pooling drops position 0 always (on a model without BOS: the first word)",
     "mean pooling drops a BOS token, found by its id, and nothing else"),
    ("every 4th layer plus the last", "every layer"),
    ("Pearson r with its t-test p", "Pearson r and Spearman rho, a permutation p, Benjamini-Hochberg q over "
     "layers; significance judged on q"),
    ("preference = difference of mean NLL per token", "also the difference of summed NLL, and the token-length "
     "difference of each pair with its correlation to the preference"),
)
"""What ``--compat notebooks`` changes in every statement-pair study: (the notebooks, the layerscope default)."""


POOLING_HELP = "Pooling for the pair-level and profile analyses: mean, last, first."


def check_pooling(pooling: str) -> None:
    from ..engine.forward.pooling import POOLINGS

    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {short(pooling)}; use {', '.join(POOLINGS[:-1])} or {POOLINGS[-1]}")


def check_n_bootstrap(n: int) -> None:
    """``check_n_bootstrap(self.n_bootstrap)``: 100 to :data:`MAX_BOOTSTRAP` resamples, else a :class:`ConfigError`."""
    check_bound(n, "--n-bootstrap")


def parse_layers(spec: str) -> str | list[int]:
    """``"all"``, ``"notebooks"`` (``"seed"``, its deprecated old name, warns) or the sorted layer numbers."""
    spec = notebooks_alias(spec.strip(), "layers")
    if spec in ("all", NOTEBOOKS):
        return spec
    _check_layer_count(spec.count(",") + 1)
    try:
        layers = sorted({int(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"bad layer list {short(spec)}; use 'all', 'notebooks' or comma-separated numbers like 0,4,8"
                          ) from None
    if not layers:
        raise ConfigError("empty layer list; use 'all', 'notebooks' or numbers like 0,4,8")
    if layers[0] < 0:
        raise ConfigError(f"layer {layers[0]} is negative; layers count from 0 (the embeddings)")
    if layers[-1] > MAX_LAYER:
        raise ConfigError(f"layer {short(layers[-1])} in {spelled('--layers', 'layers')} is above the limit of "
                          f"{MAX_LAYER:,}; list layers from 0 to {MAX_LAYER:,} (no model has more), or 'all'")
    return layers


def _check_layer_count(n: int) -> None:
    if n > MAX_LAYER + 1:
        raise ConfigError(f"{spelled('--layers', 'layers')} lists {n:,} layers, above the limit of {MAX_LAYER + 1:,} "
                          f"(layers 0 to {MAX_LAYER:,}); list each layer once, or use 'all'")


def select_layers(spec: str, n_layers: int, model: str = "the model") -> list[int]:
    """Hidden-state indices to test, 0 (embeddings) to ``n_layers``."""
    parsed = parse_layers(spec)
    if parsed == "all":
        return list(range(n_layers + 1))
    if parsed == NOTEBOOKS:
        layers = list(range(0, n_layers + 1, 4))
        return layers if layers[-1] == n_layers else [*layers, n_layers]
    too_big = [layer for layer in parsed if layer > n_layers]
    if too_big:
        raise ConfigError(f"layer {too_big[0]} is out of range for {model}, which has layers 0 to {n_layers}")
    return parsed
