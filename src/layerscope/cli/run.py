"""``layerscope run [STUDY]``: one study, or every study into one run folder with an HTML report.

    layerscope run                           # all five on the default models -> runs/<time>/index.html
    layerscope run phases --model smollm2-135m
    layerscope run --config suite.yaml       # any study or suite; runs/X/config.yaml reruns run X
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import typer

from ..io import check_out_dir
from ..studies import StudyConfig, get_study, run_study
from ..studies.config import ConfigError
from ..studies.config_file import dump_configs, read_config_file, resolve_configs
from ..studies.output import input_paths
from ..studies.suite import check_inputs, find_partial, run_suite, with_default_models
from ..sweep import SweepPlan
from .app import app, setup_logging, user_errors
from .extract import Compat, DType
from .sweep import Executor, finish_sweep


def _help(name: str) -> str:
    field = StudyConfig.__dataclass_fields__[name]
    default = field.default if field.default is not None else None
    shown = f" Default: {default}." if default not in (None, (), False) and "Default" not in field.metadata["help"] \
        else ""
    return field.metadata["help"] + shown


@app.command("run")
@user_errors
def run_command(
    study: str = typer.Argument(None, help="The study: divergence, scaling, phases, anisotropy or ablation. "
                                "Leave it out to run all five into one folder with an HTML report."),
    config_file: Path = typer.Option(None, "--config", "-c", help="A YAML or TOML config file (one study or a "
                                     "suite); options given here override its settings."),
    models: list[str] = typer.Option(None, "--model", "-m", help=_help("models") + " Repeat for several."),
    dataset: Path = typer.Option(None, "--dataset", "-d", help=_help("dataset")),
    out: Path = typer.Option(None, "--out", "-o", help="Run folder to write. Default: runs/<study>-<UTC time>, "
                             "or runs/<UTC time> for several studies."),
    compat: Compat = typer.Option(None, "--compat", help=_help("compat")),
    layers: str = typer.Option(None, "--layers", help=_help("layers")),
    pooling: str = typer.Option(None, "--pooling", help=_help("pooling")),
    n_bootstrap: int = typer.Option(None, "--n-bootstrap", help=_help("n_bootstrap")),
    n_permutations: int = typer.Option(None, "--n-permutations", help=_help("n_permutations")),
    ci_level: float = typer.Option(None, "--ci-level", help=_help("ci_level")),
    seed: int = typer.Option(None, "--seed", help=_help("seed")),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help=_help("batch_size")),
    max_length: int = typer.Option(None, "--max-length", help=_help("max_length")),
    dtype: DType = typer.Option(None, "--dtype", help=_help("dtype")),
    device: str = typer.Option(None, "--device", help=_help("device")),
    device_map: str = typer.Option(None, "--device-map", help=_help("device_map")),
    reference: Path = typer.Option(None, "--reference", help=_help("reference")),
    centroids: str = typer.Option(None, "--centroids", help=_help("centroids")),
    drop_category: str = typer.Option(None, "--drop-category", help=_help("drop_category")),
    prompts: Path = typer.Option(None, "--prompts", help=_help("prompts")),
    exclude_bos: bool = typer.Option(False, "--exclude-bos", help=_help("exclude_bos")),
    reference_lstar: int = typer.Option(None, "--reference-lstar", help=_help("reference_lstar")),
    texts: Path = typer.Option(None, "--texts", help=_help("texts")),
    bits: int = typer.Option(None, "--bits", help=_help("bits")),
    configs: str = typer.Option(None, "--configs", help=_help("configs")),
    sweep: bool = typer.Option(False, "--sweep", help=_help("sweep")),
    scheme: str = typer.Option(None, "--scheme", help=_help("scheme")),
    targets: str = typer.Option(None, "--targets", help=_help("targets")),
    executor: Executor = typer.Option(None, "--executor", help="Run STUDY as a sweep: one task per --model "
                                      "(serial: one after another here; ray: Ray tasks in parallel), with the "
                                      "tasks' tables gathered into one folder. See `layerscope sweep --help`."),
    ray_address: str = typer.Option(None, "--ray-address", help="With --executor ray: join this Ray cluster "
                                    "(e.g. auto) instead of starting one on this machine."),
    workers: int = typer.Option(None, "--workers", help="With --executor ray: CPUs of the local Ray instance, one "
                                "task per CPU. Default: every CPU."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the activation cache."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Run one study, or all five (no STUDY), and write result.json, table.csv, figures, report.md,
    config.yaml and a self-contained index.html into a run folder."""
    setup_logging(verbose)
    given = {"models": tuple(models) if models else None, "dataset": dataset, "compat": compat and compat.value,
             "layers": layers, "pooling": pooling, "n_bootstrap": n_bootstrap, "n_permutations": n_permutations,
             "ci_level": ci_level, "seed": seed, "batch_size": batch_size,
             "max_length": max_length, "dtype": dtype and dtype.value,
             "device": device, "device_map": device_map, "reference": reference, "centroids": centroids,
             "drop_category": drop_category, "prompts": prompts, "exclude_bos": exclude_bos or None,
             "reference_lstar": reference_lstar, "texts": texts, "bits": bits, "configs": configs,
             "sweep": sweep or None, "scheme": scheme, "targets": targets, "cache": False if no_cache else None}
    overrides = {k: str(v) if isinstance(v, Path) else v for k, v in given.items() if v is not None}
    if study is not None:
        get_study(study)  # an unknown study fails before anything else
    if config_file is not None:
        data = read_config_file(config_file)
        found = resolve_configs(data, overrides, base=config_file.resolve().parent, source=str(config_file))
        if study is not None:
            if study not in found:
                raise ConfigError(f"{config_file} does not run '{study}'; leave STUDY out or add it to the file")
            found = {study: found[study]}
        single = study is not None or "study" in data
    else:
        found = resolve_configs({"study": study} if study else None, overrides)
        single = study is not None
    stamp = f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    inputs = [config_file] if config_file is not None else []  # --out never replaces a folder holding it
    if executor is not None:
        if not single:
            raise ConfigError("--executor sweeps one study over its models; name the study, e.g. "
                              "`layerscope run scaling --model A --model B --executor ray`")
        (name, config), = found.items()
        config = with_default_models({name: config})[name]
        plan = SweepPlan(config, executor=executor.value, ray_address=ray_address, workers=workers)
        finish_sweep(plan, out or Path("runs") / f"sweep-{name}-{stamp}", force, inputs)
        return
    if ray_address is not None or workers is not None:
        raise ConfigError("--ray-address and --workers need --executor ray")
    if single:
        (name, config), = found.items()
        out = check_out_dir(out or Path("runs") / f"{name}-{stamp}", force, [*inputs, *input_paths(config.to_dict())])
        check_inputs(config)
        result = run_study(config)
        result.write(out, force=force)
        for line in get_study(name).headline(result):
            typer.echo(f"{name}: {line}")
        typer.echo(f"wrote {out}/ (index.html, result.json, table.csv, report.md, figures, config.yaml)")
        return
    if out is None:
        resolved = dump_configs({n: c.to_dict() for n, c in with_default_models(found).items()})
        out = find_partial(Path("runs"), resolved) or Path("runs") / stamp
    run_suite(found, out, force=force, echo=typer.echo, inputs=inputs)
    typer.echo(f"wrote {out}/index.html and one folder per study ({', '.join(found)})")

