"""``layerscope sweep``: one study over many models or training checkpoints, serially or on Ray.

    layerscope sweep --config sweep.yaml                      # study, models, revisions, settings in a file
    layerscope sweep --config sweep.yaml --executor ray --workers 2
    layerscope sweep --config sweep.yaml --executor ray --ray-address auto    # an existing cluster
    layerscope run scaling --model A --model B --executor ray                 # the same, without a file
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..terminal import say
from .app import app, setup_logging, user_errors

if TYPE_CHECKING:
    from ..sweep import SweepPlan


class Executor(StrEnum):
    serial = "serial"
    ray = "ray"


@app.command("sweep")
@user_errors
def sweep_command(
    config_file: Path = typer.Option(..., "--config", "-c", help="A YAML or TOML file: 'study', 'models' "
                                     "(NAME or NAME@REVISION), optional 'revisions' (every model at each), "
                                     "'executor', 'ray_address', 'workers', and any study setting."),
    models: list[str] = typer.Option(None, "--model", "-m", help="Models to sweep instead of the file's; repeat "
                                     "for several."),
    revisions: list[str] = typer.Option(None, "--revision", "-r", help="Sweep every model at these revisions "
                                        "(e.g. step1000) instead of the file's; repeat for several."),
    executor: Executor = typer.Option(None, "--executor", help="serial (default): one task after another in this "
                                      "process; ray: Ray tasks in parallel."),
    ray_address: str = typer.Option(None, "--ray-address", help="Join this Ray cluster (e.g. auto, or "
                                    "ray://HOST:10001) instead of starting one on this machine. Every node must "
                                    "have layerscope installed and see --out."),
    workers: int = typer.Option(None, "--workers", help="CPUs of a local Ray instance, one task per CPU. Default: "
                                "every CPU."),
    gpus_per_task: float = typer.Option(None, "--gpus-per-task", help="GPUs each Ray task asks for. Default: 1 "
                                        "when the cluster has GPUs, else 0."),
    out: Path = typer.Option(None, "--out", "-o", help="Sweep folder. Default: runs/sweep-<study>-<UTC time>. "
                             "An unfinished or failed sweep's folder is resumed: finished tasks are kept."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it holds something else."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Run one study once per model (or model revision), each into its own folder, and gather every
    task's table into one table.csv with figures over depth and training step, sweep.json and index.html.
    A task that fails is reported and the others go on; running the same sweep again retries it."""
    from ..sweep import load_sweep_file  # the studies (and torch) only when the command runs

    setup_logging(verbose)
    overrides = {"models": tuple(models)} if models else {}
    plan = load_sweep_file(config_file, overrides, revisions=tuple(revisions) if revisions else None,
                           executor=executor and executor.value, ray_address=ray_address, workers=workers,
                           gpus_per_task=gpus_per_task)
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
    finish_sweep(plan, out or Path("runs") / f"sweep-{plan.config.study}-{stamp}", force, [config_file])


def finish_sweep(plan: SweepPlan, out: Path, force: bool, inputs: tuple[Path, ...] | list[Path] = ()) -> None:
    """Run the sweep, print where it went; exit 1 when a task failed (after writing everything else).
    ``inputs``: the config file, which ``out`` may not hold."""
    from ..sweep import run_sweep

    summary = run_sweep(plan, out, force=force, echo=say, inputs=inputs)
    say(f"wrote {out}/ (index.html, table.csv, sweep.json, figures; one folder per task under tasks/)")
    if summary["n_failed"]:
        say(f"error: {summary['n_failed']} of {len(summary['tasks'])} tasks failed (see {out}/sweep.json); "
                   "fix them and run the same command again: finished tasks are kept", err=True)
        raise typer.Exit(code=1)
