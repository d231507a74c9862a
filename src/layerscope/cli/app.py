"""The Typer app, logging set-up, and the rule that input errors are one ``error:`` line and exit status 2.

    @app.command("name")
    @user_errors                 # a LayerscopeError -> one error line, exit 2
    def name_command(...): ...

Usage errors that Typer finds before a command runs (``--batch-size 0``, ``--seed abc``, an
unknown option, a missing argument) go through the same line, from every command.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import warnings
from collections.abc import Callable, Iterator

import typer
from typer.core import TyperGroup

from ..errors import LayerscopeError
from ..modes import RenamedValueWarning
from ..provenance import VERSION
from ..terminal import ShownFormatter, say

try:  # typer >= 0.26 carries its own copy of click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException


def print_error(message: str) -> None:
    """The one line every input error ends in, on stderr."""
    say(f"error: {' '.join(message.split())}", err=True)


class OneLineErrors(TyperGroup):
    """Runs a command as Typer does, but prints a usage error of any command (a bad option value, an
    unknown option, a missing argument or file) as one ``error:`` line and exits with status 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `layerscope` alone: the help, as Typer shows it
                if self.rich_markup_mode is None:
                    exc.show()
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            command = ctx.command_path if ctx is not None else "layerscope"
            print_error(f"{exc.format_message().rstrip('.')}; see `{command} --help`")
            sys.exit(2)
        except typer.Abort:
            say("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    name="layerscope",
    help="Layer-wise analysis of transformer language models: extract every layer's "
    "representations once, then analyse them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def version_callback(value: bool) -> None:
    if value:
        say(f"layerscope {VERSION}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Layer-wise analysis of transformer language models."""


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ShownFormatter("%(levelname)s %(name)s: %(message)s"))  # a name from outside stays text
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    import transformers

    transformers.logging.set_verbosity_error()  # its load-time chatter hides our messages
    transformers.logging.disable_progress_bar()


@contextlib.contextmanager
def renamed_values_as_notes() -> Iterator[None]:
    """A value under its old name (``--compat seed``, ``compat: seed`` in a config file) is one ``note:`` line on
    stderr, once per command, instead of a ``DeprecationWarning`` that Python would not show; other warnings as
    before."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs):
            if not issubclass(category, RenamedValueWarning):
                return shown(message, category, *args, **kwargs)
            if str(message) not in seen:
                seen.add(str(message))
                say(f"note: {message}", err=True)

        warnings.showwarning = show
        warnings.simplefilter("always", RenamedValueWarning)
        yield


def user_errors(command: Callable) -> Callable:
    """Print a :class:`LayerscopeError` as one line on stderr and exit with status 2; a value under its old name
    as one ``note:`` line (:func:`renamed_values_as_notes`)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with renamed_values_as_notes():
                return command(*args, **kwargs)
        except LayerscopeError as exc:
            print_error(exc.cli_message())  # --force where Python says force=True
            raise typer.Exit(code=2) from None

    return wrapper


def main() -> None:
    app()
