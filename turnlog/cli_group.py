"""The ``turnlog`` click group: its lazy command table, its error handling (one clear line, never a
traceback; with --json, a JSON error) and the context every command receives. Command modules add
their commands to it when the group imports them, on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import click

from turnlog.output import dumps, escape_text
from turnlog.store.errors import (
    CorruptStoreError,
    DuplicateEventError,
    InvalidEventError,
    LockBusy,
    StoreError,
    TokenizerError,
    UnknownArtifactError,
    UnknownEventError,
    UnknownSessionError,
    VersionConflictError,
)

if TYPE_CHECKING:
    from turnlog.store.base import Store
    from turnlog.store.sqlite_quick import QuickView

# Every command: name -> (the module that defines it, its short help). The group imports a command's
# module only when that command runs or its help is shown, so `turnlog --help` and `--version` load
# none of them; the short help here is what `turnlog --help` lists (a test checks that each equals
# the first sentence of the command's docstring, as click would show it).
COMMANDS: dict[str, tuple[str, str]] = {
    "append": ("turnlog.commands.session", "Append events to SESSION, atomically (all or nothing)."),
    "artifact": (
        "turnlog.commands.projections",
        "Print an artifact's content by id (or a unique prefix of 8+ characters), a page of lines at a "
        "time; the notice says which offset comes next.",
    ),
    "artifacts": (
        "turnlog.commands.projections",
        "List SESSION's artifacts: files written and tool outputs kept whole.",
    ),
    "audit": (
        "turnlog.commands.projections",
        "Where the tokens went: billed usage (the agent's model calls and turnlog's summarizer calls), "
        "tokens appended, tokens sent per category, and cost: as billed by the source where it "
        "recorded one, and as priced by turnlog (genai-prices, each call at its date; unknown models "
        "unpriced).",
    ),
    "compact": (
        "turnlog.commands.compaction",
        "Summarize SESSION's oldest messages so its context fits BUDGET.",
    ),
    "context": (
        "turnlog.commands.projections",
        "Build the context to send to the model for SESSION under a token budget.",
    ),
    "copy": (
        "turnlog.commands.io",
        "Copy every event of the store SOURCE into the store DESTINATION: each a SQLite file or a "
        "PostgreSQL URL, either direction.",
    ),
    "datasette-metadata": (
        "turnlog.commands.doctor",
        "Print the Datasette metadata for a turnlog store: titles, column help and canned audit queries.",
    ),
    "doctor": (
        "turnlog.commands.doctor",
        "Say what is wrong with the store, if anything, and the command that fixes each finding.",
    ),
    "export": (
        "turnlog.commands.io",
        "Export SESSIONS: every event as JSON lines (several sessions at once, a fork after its "
        "parent), or one session's conversation as an OpenAI or Anthropic transcript.",
    ),
    "fork": (
        "turnlog.commands.session",
        "Start a new session that shares SESSION's history up to a version, without copying it.",
    ),
    "import": (
        "turnlog.commands.io",
        "Import PATH (a file, a folder of logs for the formats that read folders, or '-' for standard "
        "input with --format) as sessions, one per conversation.",
    ),
    "index": (
        "turnlog.commands.projections",
        "Print the one-line-per-artifact index an agent reads before fetching what it needs.",
    ),
    "init": ("turnlog.commands.maintenance", "Create a store (or check an existing one)."),
    "log": (
        "turnlog.commands.session",
        "Show SESSION's events, in order; events a rewind or a removal undid are marked ``undone`` "
        '(with --json: ``"live": false``).',
    ),
    "mcp": (
        "turnlog.commands.mcp",
        "Serve the agent-facing tool for the session named by --session over MCP on standard input "
        "and output (stdio), until the client disconnects.",
    ),
    "pin": (
        "turnlog.commands.session",
        "Pin a message (EVENT_ID or a unique prefix, as `turnlog log` shows it) so every context "
        "keeps it, whole.",
    ),
    "policy": (
        "turnlog.commands.policy",
        "Show SESSION's run-time policy, or set it (any option given): the fields given replace the "
        "stored ones, the rest stay (--reset: start from nothing).",
    ),
    "rebuild": (
        "turnlog.commands.maintenance",
        "Rebuild every materialized projection from the log, from zero.",
    ),
    "replay": (
        "turnlog.commands.replay",
        "Walk SESSION's model calls: what each was sent, its tokens, and what changed since the "
        "previous call (added, capped, summarized, dropped).",
    ),
    "rewind": (
        "turnlog.commands.session",
        "Return SESSION to the state it had at a version, by recording a ``session_rewound`` event.",
    ),
    "serve": (
        "turnlog.commands.serve",
        "Serve a read-only web viewer of the store until interrupted (Ctrl-C): the sessions, each "
        "session's timeline, each model call replayed with exactly the messages it was sent, token "
        "spend per call and per day, and a JSON API (/api/sessions, /api/sessions/ID/events, "
        "/api/sessions/ID/calls/N).",
    ),
    "sessions": (
        "turnlog.commands.session",
        "List the sessions: head version, messages, tokens, first and last activity.",
    ),
    "summaries": (
        "turnlog.commands.compaction",
        "Show SESSION's summary tree: levels, the versions each covers, and the tokens it saves.",
    ),
    "todos": (
        "turnlog.commands.projections",
        "Show SESSION's todo list as the checklist given to the model, or replace it with --write.",
    ),
    "tool": (
        "turnlog.commands.tool",
        "The agent-facing tool: one `turnlog` tool through which an agent reads its own log on demand "
        "(history, artifacts, todos) and writes its todo list and pins.",
    ),
    "unpin": ("turnlog.commands.session", "Lift the pin of a message (EVENT_ID or a unique prefix)."),
    "verify": (
        "turnlog.commands.maintenance",
        "Check the file's integrity, the immutability triggers, the hash chain, that every event "
        "decodes, every stored token count, the content blobs, and that every materialized projection "
        "equals a fresh rebuild.",
    ),
}


class CommandError(click.ClickException):
    """A command's error with its kind named: ``type`` in the JSON error (see :func:`error_type`)."""

    def __init__(self, message: str, error_type: str = "bad_input") -> None:
        super().__init__(message)
        self.error_type = error_type


# A StoreError's class -> the JSON error's type (the first match in order; see the README's list).
_STORE_ERROR_TYPES: tuple[tuple[type[StoreError], str], ...] = (
    (UnknownSessionError, "not_found"),
    (UnknownEventError, "not_found"),
    (UnknownArtifactError, "not_found"),
    (VersionConflictError, "version_conflict"),
    (DuplicateEventError, "duplicate_event"),
    (InvalidEventError, "bad_input"),
    (CorruptStoreError, "corrupt_store"),
    (TokenizerError, "tokenizer_error"),
    (LockBusy, "busy"),
    (StoreError, "store_error"),
)


def error_type(exc: BaseException) -> str:
    """The stable snake_case name of an error's kind, as ``--json`` reports it."""
    kind = getattr(exc, "error_type", None)
    if isinstance(kind, str):
        return kind
    if isinstance(exc, click.UsageError):
        return "usage_error"
    cause = exc.__cause__ if isinstance(exc, click.ClickException) else exc
    if isinstance(cause, StoreError):
        return next(name for cls, name in _STORE_ERROR_TYPES if isinstance(cause, cls))
    if isinstance(cause, OSError):
        return "file_error"
    return "bad_input"


class _Group(click.Group):
    """Loads each command's module on first use (see COMMANDS); turns library errors into one clear
    line and exit status 1, never a traceback; every error message is escaped, since it may quote
    what was given (a session id holding ESC)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in COMMANDS:
                # Importing the module registers its commands on this group (@cli.command()).
                importlib.import_module(COMMANDS[cmd_name][0])
            else:  # a command module not in the table yet (a test says to add it): still found
                load_commands()
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help`` from the table, without importing any command."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is not None and command.hidden:
                continue
            if name in COMMANDS:
                # Cut as click cuts a command's own help, without importing the command.
                text = click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit)
            elif command is not None:  # registered by hand, outside the table
                text = command.get_short_help_str(limit)
            else:
                continue
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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
    """An error of a command run with --json: ``{"error": {"type": ..., "message": ...}}`` on one
    line of standard output, so a script reads every answer as JSON; the exit status is the
    error's (2 for a usage error, 1 otherwise)."""

    def __init__(self, exc: click.ClickException) -> None:
        super().__init__(exc.format_message())
        self.exit_code = exc.exit_code  # type: ignore[misc]  # click declares it on the class
        self.error_type = error_type(exc)

    def show(self, file: Any = None) -> None:
        error = {"type": self.error_type, "message": self.message}
        click.echo(dumps({"error": error}, indent=None))


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
        from turnlog import open_store

        return open_store(self.db, create=create, tokenizer=tokenizer)

    def read(self) -> Store:
        """The store, read-only, for a command that only reads: it never writes to the file and
        never waits for a writer."""
        from turnlog import open_store

        return open_store(self.db, create=False, readonly=True)

    def quick(self) -> QuickView | None:
        """A quick read-only view of the store file, for a command that must start at once; None
        when there is none to have (a PostgreSQL store, or a file the full store must read: it
        also says what is wrong with one)."""
        from turnlog import is_postgres_url

        if is_postgres_url(self.db):
            return None
        from turnlog.store.sqlite_quick import QuickView

        return QuickView.open(self.db)

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


def load_commands() -> dict[str, click.Command]:
    """Every command, every module of turnlog.commands imported (for tests and tools that walk the
    whole command line)."""
    import pkgutil

    import turnlog.commands

    for info in pkgutil.iter_modules(turnlog.commands.__path__, "turnlog.commands."):
        importlib.import_module(info.name)
    return dict(cli.commands)
