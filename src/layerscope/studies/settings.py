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
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LayerscopeError, short


class ConfigError(LayerscopeError):
    """A study setting that cannot work."""


def setting(help: str, *, default: Any = None, file: bool = False, keywords: tuple[str, ...] = ()) -> Any:
    """A settings field with its help text; ``file``: it names an input file unless it is one of ``keywords``."""
    return field(default=default, metadata={"help": help, "file": file, "keywords": keywords})


def by_compat(method: Callable[[Any, str | None], Any]) -> Callable[[Any, str | None], Any]:
    """Mark ``method(settings, compat)`` as a value :class:`~layerscope.studies.config.StudyConfig` exposes as an
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


LAYERS_HELP = "Layers to test: 'all', 'seed' (every 4th plus the last) or a list like '0,4,8'."


def layers_setting(layers: str | list[int] | tuple[int, ...] | None) -> str | None:
    """A ``layers`` setting checked and written as a string: ``[0, 4, 8]`` (the Python API, YAML) -> ``"0,4,8"``."""
    if isinstance(layers, (list, tuple)):
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
            raise ConfigError(f"layers {short(list(layers))} must be whole numbers, e.g. [0, 4, 8]")
        layers = ",".join(map(str, layers))
    if layers is not None:
        if not isinstance(layers, str):
            raise ConfigError(f"layers {short(layers)} must be 'all', 'seed', a list like [0, 4, 8] "
                              "or a string like '0,4,8'")
        parse_layers(layers)
    return layers


@dataclass(frozen=True)
class PairSettings(Settings):
    """What every statement-pair study reads: the dataset, the layers to test and the permutation count."""

    dataset: str | None = setting("Statement-pair dataset file (.json, .jsonl, .csv); default: the bundled pairs.",
                                  file=True)
    layers: str | list[int] | None = setting(f"{LAYERS_HELP} Default: all (seed with --compat seed).")
    n_permutations: int = setting("Permutations for the permutation p-values (not used in seed compat).",
                                  default=10_000)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "layers", layers_setting(self.layers))
        if self.n_permutations < 100:
            raise ConfigError(f"n_permutations {self.n_permutations} is too few for a p-value; use >= 100")

    @by_compat
    def layer_spec(self, compat: str | None) -> str:
        """The layers setting after defaults: seed compat samples layers as the notebooks do."""
        return self.layers or ("seed" if compat == "seed" else "all")


PAIR_NOTES = (
    ("mean pooling drops position 0 always (on a model without BOS: the first word)",
     "mean pooling drops a BOS token, found by its id, and nothing else"),
    ("every 4th layer plus the last", "every layer"),
    ("Pearson r with its t-test p", "Pearson r and Spearman rho, a permutation p, Benjamini-Hochberg q over "
     "layers; significance judged on q"),
    ("preference = difference of mean NLL per token", "also the difference of summed NLL, and the token-length "
     "difference of each pair with its correlation to the preference"),
)
"""What ``--compat seed`` changes in every statement-pair study: (the notebooks, the layerscope default)."""


POOLING_HELP = "Pooling for the pair-level and profile analyses: mean, last, first."


def check_pooling(pooling: str) -> None:
    from ..engine.pooling import POOLINGS

    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {short(pooling)}; use {', '.join(POOLINGS[:-1])} or {POOLINGS[-1]}")


def check_n_bootstrap(n: int) -> None:
    if n < 100:
        raise ConfigError(f"--n-bootstrap {n} is too few for a confidence interval; use >= 100")


def parse_layers(spec: str) -> str | list[int]:
    spec = spec.strip()
    if spec in ("all", "seed"):
        return spec
    try:
        layers = sorted({int(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"bad layer list {short(spec)}; use 'all', 'seed' or comma-separated numbers like 0,4,8"
                          ) from None
    if not layers:
        raise ConfigError("empty layer list; use 'all', 'seed' or numbers like 0,4,8")
    if layers[0] < 0:
        raise ConfigError(f"layer {layers[0]} is negative; layers count from 0 (the embeddings)")
    return layers


def select_layers(spec: str, n_layers: int, model: str = "the model") -> list[int]:
    """Hidden-state indices to test, 0 (embeddings) to ``n_layers``."""
    parsed = parse_layers(spec)
    if parsed == "all":
        return list(range(n_layers + 1))
    if parsed == "seed":
        layers = list(range(0, n_layers + 1, 4))
        return layers if layers[-1] == n_layers else [*layers, n_layers]
    too_big = [layer for layer in parsed if layer > n_layers]
    if too_big:
        raise ConfigError(f"layer {too_big[0]} is out of range for {model}, which has layers 0 to {n_layers}")
    return parsed
