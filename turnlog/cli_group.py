"""The ``turnlog`` click group: its error handling (one clear line, never a traceback) and the
context every command receives. Command modules add their commands to it; ``turnlog.cli`` imports
them all."""

from __future__ import annotations

from typing import Any

import click

from turnlog import open_store
from turnlog.output import dumps, escape_text
from turnlog.store import Store, StoreError


class _Group(click.Group):
    """Turns library errors into one clear line and exit status 1, never a traceback; every error
    message is escaped, since it may quote what was given (a session id holding ESC)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        # --json asks for JSON errors too (an option value that reads "--json" is rare enough).
        self._json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
        try:
            _check_arguments(args)
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise self._error(exc) from exc.__cause__

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except StoreError as exc:
                raise click.ClickException(str(exc)) from exc
            except OSError as exc:
                raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}".strip()) from exc
            # Last line of defence for input that slipped past validation: still one line, no
            # traceback (each known case has its own, clearer message before it gets here).
            except RecursionError as exc:
                raise click.ClickException("the input is nested too deeply to be read") from exc
            except (OverflowError, UnicodeError) as exc:
                raise click.ClickException(f"the input cannot be used: {exc}") from exc
        except click.ClickException as exc:
            raise self._error(exc) from exc.__cause__

    def _error(self, exc: click.ClickException) -> click.ClickException:
        return _JsonError(exc) if getattr(self, "_json", False) else _escaped(exc)


class _JsonError(click.ClickException):
    """An error of a command run with --json: ``{"error": ..., "exit_code": ...}`` on one line of
    standard output, so a script reads every answer as JSON; the exit status is the error's."""

    def __init__(self, exc: click.ClickException) -> None:
        super().__init__(exc.format_message())
        self.exit_code = exc.exit_code  # type: ignore[misc]  # click declares it on the class

    def show(self, file: Any = None) -> None:
        click.echo(dumps({"error": self.message, "exit_code": self.exit_code}, indent=None))


def _escaped(exc: click.ClickException) -> click.ClickException:
    # Escaped in place, so click's own subclasses keep their usage line, hint and exit status.
    exc.message = escape_text(exc.message)  # type: ignore[misc]
    return exc


def _check_arguments(args: list[str]) -> None:
    """Refuse an argument that is not UTF-8: Python hands its undecodable bytes over as lone
    surrogates, which no file name, session id or text field can hold, and which would fail deep
    inside a command with a traceback."""
    for number, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise click.UsageError(
                f"argument {number} ({escape_text(arg)}) is not valid UTF-8: give every argument as "
                "UTF-8 text"
            ) from None


class _Context:
    def __init__(self, db: str) -> None:
        self.db = db

    def open(self, *, create: bool = False, tokenizer: str | None = None) -> Store:
        """The store, for a command that writes (it leaves the projections caught up)."""
        return open_store(self.db, create=create, tokenizer=tokenizer)

    def read(self) -> Store:
        """The store, read-only, for a command that only reads: it never writes to the file and
        never waits for a writer."""
        return open_store(self.db, create=False, readonly=True)

    def __repr__(self) -> str:
        return f"_Context({self.db!r})"


pass_ctx = click.make_pass_decorator(_Context)


@click.group(cls=_Group)
@click.version_option(package_name="turnlog")
@click.option(
    "--db",
    envvar="TURNLOG_DB",
    default="turnlog.db",
    show_default="$TURNLOG_DB or ./turnlog.db",
    type=click.Path(dir_okay=False),
    help="The store's file.",
)
@click.pass_context
def cli(ctx: click.Context, db: str) -> None:
    """turnlog: an event-sourced conversation store for LLM agents.

    Every message, tool call and return, todo update, artifact and token usage of an agent session is
    appended to an immutable, hash-chained log; everything else is a projection of it.
    """
    if db == ":memory:" or db.startswith("file:"):
        # A memory database would acknowledge appends that are gone when the command ends; a URI's
        # parameters could override how turnlog opens the file (read-only, locking).
        raise click.BadParameter(
            f"{db!r} is not a file path: --db takes the path of the store's file (a file whose name "
            "starts with 'file:' can be given as ./file:NAME)"
            if db.startswith("file:")
            else "':memory:' would lose every append when the command ends: give the path of a file",
            param_hint="--db",
        )
    ctx.obj = _Context(db)
