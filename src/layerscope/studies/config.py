"""What a study run needs to know, validated once.

    config = StudyConfig(study="phases", models=["smollm2-135m"], compat="seed")
    layers = select_layers(config.layers, n_layers=30)    # "seed" -> [0, 4, ..., 28, 30]

Every field has a ``help`` text; the CLI shows it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LayerscopeError, short
from ..models import DEFAULT_MODEL, ZOO, LoadedModel
from ..quant.fake import parse_scheme


class ConfigError(LayerscopeError):
    """A study setting that cannot work."""


PAIR_STUDIES = ("divergence", "scaling", "phases")
PATH_FIELDS = ("dataset", "reference", "prompts", "texts")
"""Settings that name an input file (besides ``configs``, which may also be 'standard')."""


def model_name(model: str | LoadedModel) -> str:
    """The name a model spec or a :class:`LoadedModel` (``LoadedModel.wrap(..., name=...)``) goes by."""
    return model.info.name if isinstance(model, LoadedModel) else model


def absolute_model(spec: str | LoadedModel, base: Path | None = None) -> str | LoadedModel:
    """``spec`` with a local folder or .gguf file (relative to ``base``, default the working folder) made absolute.

    Zoo names, hub ids (``OWNER/NAME[@REVISION]``) and loaded models stay as they are.
    """
    if not isinstance(spec, str) or spec in ZOO:
        return spec
    base = Path(base or Path.cwd())
    if _exists(base / Path(spec).expanduser()):
        return absolute_path(spec, base)
    name, at, revision = spec.rpartition("@")
    if at and name and _exists(base / Path(name).expanduser()):  # a local folder at a revision
        return f"{absolute_path(name, base)}@{revision}"
    return spec


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, say: no such file
        return False


def absolute_path(path: str, base: Path | None = None) -> str:
    """``path`` (``~`` expanded) made absolute against ``base`` (default: the working folder)."""
    return str((Path(base or Path.cwd()) / Path(path).expanduser()).resolve())


def _help(text: str, studies: tuple[str, ...] | None = None, **kwargs) -> Any:
    """A field with its CLI help and the studies that read it (``None``: every study)."""
    return field(metadata={"help": text, "studies": studies}, **kwargs)


@dataclass(frozen=True)
class StudyConfig:
    study: str = _help("Which study to run.")
    models: tuple[str, ...] = _help(
        "Models to analyse, loaded one at a time: zoo names, folders, .gguf files or hub ids. Default: "
        f"{DEFAULT_MODEL} (scaling: smollm2-135m and gemma3-270m).", default=())
    dataset: str | None = _help("Statement-pair dataset file (.json, .jsonl, .csv); default: the bundled pairs.",
                                studies=PAIR_STUDIES, default=None)
    compat: str | None = _help("'seed' reproduces the notebooks: token 0 dropped, every 4th layer, their "
                               "statistics. Default: the corrected method.", default=None)
    layers: str | list[int] | None = _help("Layers to test: 'all', 'seed' (every 4th plus the last) or a list like "
                               "'0,4,8'. Default: all (seed with --compat seed).", studies=PAIR_STUDIES, default=None)
    pooling: str = _help("Pooling for the pair-level and profile analyses (phases, scaling): mean, last, first.",
                         studies=("scaling", "phases"), default="mean")
    n_bootstrap: int = _help("Bootstrap resamples for confidence intervals.", studies=("phases", "ablation"),
                             default=10_000)
    ci_level: float = _help("Confidence level of the intervals.", studies=(*PAIR_STUDIES, "ablation", "anisotropy"), default=0.95)
    seed: int = _help("Random seed for resampling.", default=42)
    batch_size: int = _help("Texts per forward pass.", default=16)
    dtype: str = _help("One dtype for every parameter: float32, float16, bfloat16.", default="float32")
    device: str | None = _help("cpu, cuda or cuda:N; default: cuda if present, else cpu.", default=None)
    device_map: str | None = _help("'auto' spreads one big model over every GPU of the machine (accelerate); "
                                   "default: the whole model on --device.", default=None)
    reference: str | None = _help("CSV of reference phase means (model,early,mid,late); default: the "
                                  "published figures the phases notebook quotes.", studies=("phases",), default=None)
    cache: bool = _help("Read and write the activation cache.", default=True)
    max_length: int | None = _help("Truncate every text to this many tokens (recorded in the manifest). Default: "
                                   "no truncation, and a text longer than the model's maximum positions is an "
                                   "error naming it.", default=None)
    prompts: str | None = _help("anisotropy: a text file, one prompt per line (blank lines and '# kind' "
                                "lines skipped); default: the bundled prompts.", studies=("anisotropy",), default=None)
    exclude_bos: bool = _help("anisotropy: headline metrics without position 0 (the BOS token, or the first "
                              "word of a model without BOS).", studies=("anisotropy",), default=False)
    texts: str | None = _help("ablation: JSON {lang: {\"resource\": \"high\"|\"low\", \"texts\": [...]}}; default: "
                              "the bundled texts (8 languages).", studies=("ablation",), default=None)
    bits: int = _help("ablation: bits of the symmetric fake quantization.", studies=("ablation",), default=4)
    configs: str = _help("ablation: 'standard' (the notebook's 8 layer sets) or a JSON file "
                         "mapping each configuration's name to the list of layers it quantizes.", studies=("ablation",),
                         default="standard")
    sweep: bool = _help("ablation: also quantize one layer at a time, every layer.", studies=("ablation",),
                        default=False)
    scheme: str | None = _help("ablation: per-tensor, per-channel or group:N. Default: per-channel "
                               "(seed compat: per-tensor).", studies=("ablation",), default=None)
    targets: str | None = _help("ablation: 'linear' (linear-layer weights) or 'all-weights' (every weight, "
                                "norms included). Default: linear (seed compat: all-weights).", studies=("ablation",),
                                default=None)
    centroids: str | None = _help("phases: 'loo' (each pair is compared with centroids of the other pairs) or "
                                  "'self' (the notebooks' centroids, which include the pair itself). The report "
                                  "shows both. Default: loo (seed compat: self).", studies=("phases",), default=None)
    drop_category: str | None = _help("divergence, phases: also analyse the pairs without this category, beside "
                                      "the full results (e.g. numeric_vs_named, which can flip a 6-point r).",
                                      studies=("divergence", "phases"), default=None)
    n_permutations: int = _help("Permutations for the permutation p-values (not used in seed compat).",
                                studies=PAIR_STUDIES, default=10_000)
    reference_lstar: int | None = _help("anisotropy: a reference L* to compare with (match within 3 layers: "
                                        "excellent, within 5: good).", studies=("anisotropy",), default=None)

    def __post_init__(self):
        if isinstance(self.models, (str, LoadedModel)):
            raise ConfigError(f"models must be a list of models, e.g. [{short(model_name(self.models))}], "
                              "not one model")
        bad = [m for m in self.models if not (isinstance(m, LoadedModel) or (isinstance(m, str) and m.strip()))]
        if bad:
            raise ConfigError(f"model {short(bad[0])} is neither a model spec (a zoo name, folder, .gguf file or hub "
                              "id) nor a LoadedModel; pass one of those")
        object.__setattr__(self, "models", tuple(absolute_model(m) for m in self.models))
        for key in (*PATH_FIELDS, *(("configs",) if self.configs != "standard" else ())):
            if isinstance(getattr(self, key), (str, os.PathLike)):  # so a saved config works from any folder
                object.__setattr__(self, key, absolute_path(os.fspath(getattr(self, key))))
        if isinstance(self.layers, (list, tuple)):  # the Python API and YAML take [0, 4, 8] for "0,4,8"
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in self.layers):
                raise ConfigError(f"layers {short(list(self.layers))} must be whole numbers, e.g. [0, 4, 8]")
            object.__setattr__(self, "layers", ",".join(map(str, self.layers)))
        names = self.model_names
        if len(set(names)) != len(names):
            raise ConfigError(f"a model is listed twice in {short(list(names))}; list each model once")
        if self.compat not in (None, "seed"):
            raise ConfigError(f"unknown compat mode {short(self.compat)}; use 'seed' or leave it out")
        if self.pooling not in ("mean", "last", "first"):
            raise ConfigError(f"unknown pooling {short(self.pooling)}; use mean, last or first")
        if self.n_bootstrap < 100:
            raise ConfigError(f"--n-bootstrap {self.n_bootstrap} is too few for a confidence interval; use >= 100")
        if not 0.5 < self.ci_level < 1:
            raise ConfigError(f"confidence level {self.ci_level} must lie between 0.5 and 1")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"--seed {self.seed} is out of range; use a whole number from 0 to {2**32 - 1}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(f"--max-length {self.max_length} is too short; a text needs at least 2 tokens "
                              "(one to predict from, one to predict)")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, got {self.batch_size}")
        if self.device_map not in (None, "auto"):
            raise ConfigError(f"unknown device map {short(self.device_map)}; use 'auto' or leave it out")
        if self.layers is not None:
            if not isinstance(self.layers, str):
                raise ConfigError(f"layers {short(self.layers)} must be 'all', 'seed', a list like [0, 4, 8] "
                                  "or a string like '0,4,8'")
            parse_layers(self.layers)
        if not 2 <= self.bits <= 16:
            raise ConfigError(f"--bits {self.bits} is not usable; symmetric quantization needs 2 to 16 bits")
        if self.scheme is not None:
            parse_scheme(self.scheme)
        if self.targets not in (None, "linear", "all-weights"):
            raise ConfigError(f"unknown --targets {short(self.targets)}; use linear or all-weights")
        if self.centroids not in (None, "loo", "self"):
            raise ConfigError(f"unknown centroids {short(self.centroids)}; use loo or self")
        if self.n_permutations < 100:
            raise ConfigError(f"n_permutations {self.n_permutations} is too few for a p-value; use >= 100")
        if self.reference_lstar is not None and self.reference_lstar < 0:
            raise ConfigError(f"--reference-lstar {self.reference_lstar} must be a layer number, 0 or more")

    @property
    def model_names(self) -> tuple[str, ...]:
        """Each model's name: its spec, or the name a :class:`LoadedModel` was wrapped with."""
        return tuple(model_name(m) for m in self.models)

    @property
    def quant_scheme(self) -> str:
        return self.scheme or ("per-tensor" if self.compat == "seed" else "per-channel")

    @property
    def quant_targets(self) -> str:
        return self.targets or ("all-weights" if self.compat == "seed" else "linear")

    @property
    def centroid_mode(self) -> str:
        return self.centroids or ("self" if self.compat == "seed" else "loo")

    @property
    def layer_spec(self) -> str:
        """The layers setting after defaults: seed compat samples layers as the notebooks do."""
        return self.layers or ("seed" if self.compat == "seed" else "all")

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # asdict would copy a model
        data["models"] = list(self.model_names)
        return data


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
