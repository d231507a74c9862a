"""``layerscope validate``: the validation card of a model (every verdict's power, false-alarm rate and coverage,
measured on plants and nulls whose answer is known)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from ..models import DEFAULT_MODEL
from ..terminal import say
from .app import app, setup_logging, user_errors
from .extract import MODEL_HELP


@app.command("validate")
@user_errors
def validate_command(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help=MODEL_HELP),
    instances: int = typer.Option(20, "--instances", min=2, max=10_000, help="Planted instances per kind (scaled "
                                  "writes; 5x as many inserted bands, 10x as many profiles with no change; a "
                                  "third as many surgery runs)."),
    texts: int = typer.Option(48, "--texts", min=4, max=100_000, help="Texts of each atlas pass: a seeded subset "
                              "of the bundled statements and prompts."),
    resamples: int = typer.Option(100, "--resamples", min=20, max=10_000, help="Bootstrap resamples behind each "
                                  "boundary fit (its penalty and intervals)."),
    seed: int = typer.Option(42, "--seed", help="Seed of every draw: plant positions, texts, resamples."),
    max_length: int = typer.Option(None, "--max-length", min=2, help="Truncate every text of the studies the "
                                   "card runs to this many tokens (for a model with fewer positions than the "
                                   "bundled texts need). Default: no truncation."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder for the card (index.html, report.md, table.csv, "
                             "card.csv, result.json). Default: runs/validate-<UTC time>."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N. Default: cuda if present, else cpu."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Plant known answers in MODEL (blocks that write nothing, scaled writes, removed bands), run the studies that
    make each verdict, and write the card: each verdict's power, false-alarm rate and interval coverage, with
    Wilson 95 % intervals and the targets they are held to."""
    from ..io import check_out_dir
    from ..models import load_model
    from ..validation.run import validate, write_card

    setup_logging(verbose)
    out = check_out_dir(out or Path("runs") / f"validate-{datetime.now(UTC):%Y%m%d-%H%M%S}", force, [])
    lm = load_model(model, device=device)
    result = validate(lm, instances=instances, seed=seed, n_texts=texts, n_resamples=resamples,
                      max_length=max_length)
    write_card(result, out, force=force)
    from ..validation.card import standing

    words = [standing(c) for c in result["card"]]
    say(f"{len(words)} checks: {words.count('yes')} meet their target, {words.count('no')} miss it, "
               f"{words.count('too few instances')} need more instances; {result['meta']['seconds']['total']:.0f} s")
    say(f"wrote {out / 'index.html'}")
