"""``layerscope run STUDY``: run one study and write its folder."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import typer

from ..io import check_out_dir
from ..studies import StudyConfig, get_study, run_study
from .app import app, setup_logging, user_errors
from .extract import Compat, DType


def _help(name: str) -> str:
    return StudyConfig.__dataclass_fields__[name].metadata["help"]


@app.command("run")
@user_errors
def run_command(
    study: str = typer.Argument(..., help="The study: divergence, scaling, phases, anisotropy or ablation."),
    models: list[str] = typer.Option(None, "--model", "-m", help=_help("models") + " Repeat for several."),
    dataset: Path = typer.Option(None, "--dataset", "-d", help=_help("dataset")),
    out: Path = typer.Option(None, "--out", "-o", help="Run folder to write. Default: runs/<study>-<UTC time>."),
    compat: Compat = typer.Option(None, "--compat", help=_help("compat")),
    layers: str = typer.Option(None, "--layers", help=_help("layers")),
    pooling: str = typer.Option("mean", "--pooling", help=_help("pooling")),
    n_bootstrap: int = typer.Option(10_000, "--n-bootstrap", help=_help("n_bootstrap")),
    ci_level: float = typer.Option(0.95, "--ci-level", help=_help("ci_level")),
    seed: int = typer.Option(42, "--seed", help=_help("seed")),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help=_help("batch_size")),
    dtype: DType = typer.Option(DType.float32, "--dtype", help=_help("dtype")),
    device: str = typer.Option(None, "--device", help=_help("device")),
    reference: Path = typer.Option(None, "--reference", help=_help("reference")),
    prompts: Path = typer.Option(None, "--prompts", help=_help("prompts")),
    exclude_bos: bool = typer.Option(False, "--exclude-bos", help=_help("exclude_bos")),
    reference_lstar: int = typer.Option(None, "--reference-lstar", help=_help("reference_lstar")),
    texts: Path = typer.Option(None, "--texts", help=_help("texts")),
    bits: int = typer.Option(4, "--bits", help=_help("bits")),
    configs: str = typer.Option("standard", "--configs", help=_help("configs")),
    sweep: bool = typer.Option(False, "--sweep", help=_help("sweep")),
    scheme: str = typer.Option(None, "--scheme", help=_help("scheme")),
    targets: str = typer.Option(None, "--targets", help=_help("targets")),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the activation cache."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Run one study (divergence, scaling, phases, anisotropy, ablation) and write result.json, table.csv, figures
    and report.md into a run folder."""
    setup_logging(verbose)
    get_study(study)  # an unknown study fails before anything else
    out = check_out_dir(out or Path("runs") / f"{study}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}", force)
    config = StudyConfig(
        study=study, models=tuple(models or ()), dataset=str(dataset) if dataset else None,
        compat=compat.value if compat else None, layers=layers, pooling=pooling, n_bootstrap=n_bootstrap,
        ci_level=ci_level, seed=seed, batch_size=batch_size, dtype=dtype.value, device=device,
        reference=str(reference) if reference else None, cache=not no_cache,
        prompts=str(prompts) if prompts else None, exclude_bos=exclude_bos, reference_lstar=reference_lstar,
        texts=str(texts) if texts else None, bits=bits, configs=configs, sweep=sweep, scheme=scheme, targets=targets)
    result = run_study(config)
    result.write(out, force=force)
    for line in get_study(study).headline(result):
        typer.echo(f"{study}: {line}")
    typer.echo(f"wrote {out}/ (result.json, table.csv, report.md, figures)")
