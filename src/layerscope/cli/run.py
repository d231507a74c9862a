"""``layerscope run [STUDY]``: one study, or every study into one run folder with an HTML report.

    layerscope run                           # every study on its default models -> runs/<time>/index.html
    layerscope run phases --model smollm2-135m
    layerscope run --config suite.yaml       # any study or suite; runs/X/config.yaml reruns run X
    layerscope studies                       # every study: name, origin (built-in or plugin package), title
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from ..terminal import say
from .app import app, setup_logging, user_errors
from .run_options import SETTINGS, RunCommand
from .sweep import Executor, finish_sweep


@app.command("run", cls=RunCommand)
@user_errors
def run_command(
    ctx: typer.Context,
    study: str = typer.Argument(None, metavar="STUDY", help="The study to run (RunCommand lists them). "
                                "Leave it out to run every study into one folder with an HTML report."),
    config_file: Path = typer.Option(None, "--config", "-c", help="A YAML or TOML config file (one study or a "
                                     "suite); options given here override its settings."),
    out: Path = typer.Option(None, "--out", "-o", help="Run folder to write. Default: runs/<study>-<UTC time>, "
                             "or runs/<UTC time> for several studies."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    executor: Executor = typer.Option(None, "--executor", help="Run STUDY as a sweep: one task per --model "
                                      "(serial: one after another here; ray: Ray tasks in parallel), with the "
                                      "tasks' tables gathered into one folder. See `layerscope sweep --help`."),
    ray_address: str = typer.Option(None, "--ray-address", help="With --executor ray: join this Ray cluster "
                                    "(e.g. auto) instead of starting one on this machine."),
    workers: int = typer.Option(None, "--workers", help="With --executor ray: CPUs of the local Ray instance, one "
                                "task per CPU. Default: every CPU."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
    list_studies: bool = typer.Option(False, "--list", help="List the studies (as `layerscope studies`) and "
                                      "exit."),
) -> None:
    """Run one study, or every study (no STUDY), and write result.json, table.csv, figures, report.md,
    config.yaml and a self-contained index.html into a run folder."""
    if list_studies:
        print_studies()
        return
    from ..io import check_out_dir  # the studies (and torch) only when the command runs
    from ..run import get_study, run_study
    from ..run.config_file import dump_configs, read_config_file, resolve_configs
    from ..run.output import input_paths
    from ..run.suite import check_inputs, find_partial, run_suite, with_default_models
    from ..study.config import ConfigError
    from ..sweep import SweepPlan

    setup_logging(verbose)
    overrides = ctx.meta[SETTINGS]  # the study settings given as options (see run_options)
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
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
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
            say(f"{name}: {line}")
        say(f"wrote {out}/ (index.html, result.json, table.csv, report.md, figures, config.yaml)")
        return
    if out is None:
        resolved = dump_configs({n: c.to_dict() for n, c in with_default_models(found).items()})
        out = find_partial(Path("runs"), resolved) or Path("runs") / stamp
    run_suite(found, out, force=force, echo=say, inputs=inputs)
    say(f"wrote {out}/index.html and one folder per study ({', '.join(found)})")


@app.command("studies")
@user_errors
def studies_command() -> None:
    """List every study `layerscope run` can run: its name, its origin (built-in, or the package and version of
    the plugin that adds it) and its title; a name two plugins offer is listed as unavailable, with the fix."""
    print_studies()


def print_studies() -> None:
    """One line per study: name, origin, title (a plugin's strings as plain text), then each name several plugins
    offer (their names and the fix are in the registry's ``warning:`` line on stderr)."""
    from ..run.registry import PICK_VARIABLE, listing, unavailable

    rows = [("STUDY", "ORIGIN", "TITLE"), *listing()]
    rows += [(name, "unavailable", f"several plugins offer it; set {PICK_VARIABLE}={name}=DISTRIBUTION")
             for name in unavailable()]
    name_w, origin_w = (max(len(row[i]) for row in rows) for i in (0, 1))
    for name, origin, title in rows:
        say(f"{name:<{name_w}}  {origin:<{origin_w}}  {title}".rstrip())
