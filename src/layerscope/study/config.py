"""What a study run needs to know, validated once: the settings every study shares, and the study's own section.

    config = StudyConfig(study="phases", models=["smollm2-135m"], compat="notebooks", n_bootstrap=2000)
    config.settings                     # PhasesSettings(..., n_bootstrap=2000, ...): the study's own section
    config.n_bootstrap                  # 2000: a study's own setting reads like a shared one
    config.layer_spec                   # "notebooks": a value whose default follows --compat (settings.by_compat)
    layers = select_layers(config.layer_spec, n_layers=30)    # [0, 4, ..., 28, 30]

Keyword arguments that are not shared settings go to the study's settings class (``Study.Settings``); one the
study does not have is a :class:`ConfigError` naming it. Every field has a ``help`` text; the CLI shows it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import short
from ..models import DEFAULT_MODEL, ZOO, LoadedModel
from ..models.load import is_dtype_name
from ..models.spec import path_exists, split_revision
from ..modes import NOTEBOOKS, notebooks_alias
from ..paths import control_char, safe_name
from ..report.plotting import FIGURE_FORMATS
from . import hooks
from .settings import ConfigError, Settings, absolute_path, check_bound, parse_layers, select_layers

__all__ = ["COMMON", "ConfigError", "StudyConfig", "absolute_model", "absolute_path", "figure_formats", "model_name",
           "parse_layers", "select_layers"]


def model_name(model: str | LoadedModel) -> str:
    """The name a model spec or a :class:`LoadedModel` (``LoadedModel.wrap(..., name=...)``) goes by."""
    return model.info.name if isinstance(model, LoadedModel) else model


def _is_loaded(model: Any) -> bool:
    return isinstance(model, LoadedModel)


def absolute_model(spec: Any, base: Path | None = None) -> Any:
    """``spec`` with a local folder or .gguf file (relative to ``base``, default the working folder) made absolute.

    Zoo names, hub ids (``OWNER/NAME[@REVISION]``) and loaded models stay as they are.
    """
    if not isinstance(spec, str) or spec in ZOO:
        return spec
    base = Path(base or Path.cwd())
    if path_exists(base / Path(spec).expanduser()):
        return absolute_path(spec, base)
    name, revision = split_revision(spec)
    if revision is not None and name and path_exists(base / Path(name).expanduser()):  # a local folder at a revision
        return f"{absolute_path(name, base)}@{revision}"
    return spec


def _help(text: str, **kwargs) -> Any:
    return field(metadata={"help": text}, **kwargs)


@dataclass(frozen=True, init=False)
class StudyConfig:
    study: str = _help("Which study to run.")
    models: tuple[str, ...] = _help(
        "Models to analyse, loaded one at a time: zoo names, folders, .gguf files or hub ids. Default: the "
        f"study's default models ({DEFAULT_MODEL}; scaling: smollm2-135m and gemma3-270m).", default=())
    compat: str | None = _help("'notebooks' reproduces the five research notebooks: token 0 dropped, every 4th "
                               "layer, their statistics ('seed' is its deprecated old name). Default: the "
                               "corrected method.", default=None)
    ci_level: float = _help("Confidence level of the intervals.", default=0.95)
    seed: int = _help("Random seed for resampling.", default=42)
    batch_size: int | None = _help("Texts per forward pass. Default: planned from the device's memory (a token "
                                   "budget); a GPU out-of-memory error halves it.", default=None)
    store_dtype: str = _help("How pooled vectors are cached: float32, or float16 for half the disk.",
                             default="float32")
    dtype: str = _help("One dtype for every parameter: auto, float32, float16, bfloat16. "
                       "Default: bfloat16 on CUDA, float32 on CPU.", default="auto")
    device: str | None = _help("cpu, cuda or cuda:N; default: cuda if present, else cpu.", default=None)
    device_map: str | None = _help("'auto' spreads one big model over every GPU of the machine (accelerate); "
                                   "default: the whole model on --device.", default=None)
    cache: bool = _help("Read and write the activation cache.", default=True)
    max_length: int | None = _help("Truncate every text to this many tokens (recorded in the manifest). Default: "
                                   "no truncation, and a text longer than the model's maximum positions is an "
                                   "error naming it.", default=None)
    figure_format: tuple[str, ...] = _help(
        "Figure file formats, comma-separated: png (150 dpi), svg (text stays text), pdf; e.g. svg,pdf. "
        "Default: png.", default=("png",))
    settings: Settings = field(default=None, metadata={"help": "The study's own settings."})  # type: ignore

    def __init__(self, study: str, models: Any = (), *, settings: Settings | None = None, **kwargs: Any):
        cls = hooks.study_class(study).Settings
        safe_name(study, "study name")  # it names the study's folder in a suite and the default --out
        common = {key: kwargs.pop(key) for key in list(kwargs) if key in COMMON}
        if settings is not None and not isinstance(settings, cls):
            raise ConfigError(f"settings for {study} must be a {cls.__name__}, not a {type(settings).__name__}")
        unknown = [key for key in kwargs if key not in own_fields(cls)]
        if unknown:
            raise ConfigError(f"{study} has no setting {short(unknown[0])}; its own settings: "
                              f"{', '.join(own_fields(cls)) or 'none'} (and the shared ones: {', '.join(COMMON)})")
        settings = dataclasses.replace(settings, **kwargs) if settings is not None else cls(**kwargs)
        values = {"study": study, "models": models, **common, "settings": settings}
        for f in dataclasses.fields(self):
            default = f.default if f.default is not dataclasses.MISSING else None
            object.__setattr__(self, f.name, values.get(f.name, default))
        self._check()

    def _check(self) -> None:
        if isinstance(self.models, str) or _is_loaded(self.models):
            raise ConfigError(f"models must be a list of models, e.g. [{short(model_name(self.models))}], "
                              "not one model")
        bad = [m for m in self.models if not (_is_loaded(m) or (isinstance(m, str) and m.strip()))]
        if bad:
            raise ConfigError(f"model {short(bad[0])} is neither a model spec (a zoo name, folder, .gguf file or hub "
                              "id) nor a LoadedModel; pass one of those")
        check_bound(len(self.models), "models per study (--model)")
        object.__setattr__(self, "models", tuple(absolute_model(m) for m in self.models))
        names = self.model_names
        odd = next((n for n in names if control_char(n) is not None), None)
        if odd is not None:
            raise ConfigError(f"model name {short(odd)} holds the control character {control_char(odd)!r}; name "
                              "the model without control characters (a folder: rename it)")
        if len(set(names)) != len(names):
            raise ConfigError(f"a model is listed twice in {short(list(names))}; list each model once")
        object.__setattr__(self, "compat", notebooks_alias(self.compat, "compat"))
        if self.compat not in (None, NOTEBOOKS):
            raise ConfigError(f"unknown compat mode {short(self.compat)}; use {NOTEBOOKS!r} or leave it out")
        if not 0.5 < self.ci_level < 1:
            raise ConfigError(f"confidence level {self.ci_level} must lie between 0.5 and 1")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"--seed {self.seed} is out of range; use a whole number from 0 to {2**32 - 1}")
        if self.max_length is not None:
            check_bound(self.max_length, "--max-length")
        if self.batch_size is not None:
            check_bound(self.batch_size, "--batch-size")
        if not is_dtype_name(self.dtype):
            raise ConfigError(f"unknown dtype {short(self.dtype)}; use auto (bfloat16 on CUDA, float32 on CPU), "
                              "float32, float16 or bfloat16")
        if self.store_dtype not in ("float32", "float16"):
            raise ConfigError(f"unknown store dtype {short(self.store_dtype)}; use float32 or float16")
        if self.device_map not in (None, "auto"):
            raise ConfigError(f"unknown device map {short(self.device_map)}; use 'auto' or leave it out")
        object.__setattr__(self, "figure_format", figure_formats(self.figure_format))

    def __getattr__(self, name: str) -> Any:
        """A study's own setting (``config.n_bootstrap``) or compat-dependent value (``config.layer_spec``)."""
        settings = self.__dict__.get("settings")
        if settings is None or name.startswith("__"):
            raise AttributeError(name)
        method = getattr(type(settings), name, None)
        if getattr(method, "by_compat", False):
            return method(settings, self.compat)
        if name in own_fields(type(settings)):
            return getattr(settings, name)
        raise AttributeError(f"{self.study} has no setting {name!r}")

    @property
    def model_names(self) -> tuple[str, ...]:
        """Each model's name: its spec, or the name a :class:`LoadedModel` was wrapped with."""
        return tuple(model_name(m) for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        """The shared settings and the study's own, flat (as config.yaml and result.json hold them)."""
        data = {name: getattr(self, name) for name in ("study", *COMMON)}  # asdict would copy a model
        data["models"] = list(self.model_names)
        data["figure_format"] = list(self.figure_format)  # a list, as YAML and JSON read it back
        return {**data, **self.settings.to_dict()}

    def input_files(self) -> list[str]:
        return self.settings.input_files()


def figure_formats(value: Any) -> tuple[str, ...]:
    """``figure_formats("svg,pdf")`` -> ``("svg", "pdf")``: the figure formats a ``--figure-format`` value (a
    string or a list of strings, each comma-separated) names, in order, each once; a :class:`ConfigError` for
    an unknown or no format."""
    pieces = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if pieces is None or not all(isinstance(p, str) for p in pieces):
        raise ConfigError(f"figure format {short(value)} must be a string such as 'png,svg' or a list of strings")
    names = [name.strip().lower() for piece in pieces for name in piece.split(",") if name.strip()]
    unknown = [name for name in names if name not in FIGURE_FORMATS]
    if unknown or not names:
        what = f"unknown figure format {short(unknown[0])}" if unknown else "no figure format given"
        raise ConfigError(f"{what}; use {', '.join(FIGURE_FORMATS[:-1])} or {FIGURE_FORMATS[-1]}, or several "
                          "joined by commas (e.g. png,svg)")
    return tuple(dict.fromkeys(names))


def own_fields(cls: type[Settings]) -> dict[str, dataclasses.Field]:
    """A settings class's fields by name."""
    return {f.name: f for f in dataclasses.fields(cls)}


COMMON = {f.name: f for f in dataclasses.fields(StudyConfig) if f.name not in ("study", "settings")}
"""The settings every study shares, by name."""
