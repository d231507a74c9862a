"""The Typer app, logging set-up, and the rule that input errors exit with status 2."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable

import typer

from ..errors import LayerscopeError

app = typer.Typer(
    name="layerscope",
    help="Layer-wise analysis of transformer language models: extract every layer's "
    "representations once, then analyse them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version_callback(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"layerscope {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Layer-wise analysis of transformer language models."""


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    import transformers

    transformers.logging.set_verbosity_error()  # its load-time chatter hides our messages
    transformers.logging.disable_progress_bar()


def user_errors(command: Callable) -> Callable:
    """Print a :class:`LayerscopeError` as one line on stderr and exit with status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LayerscopeError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from None

    return wrapper


def main() -> None:
    app()
