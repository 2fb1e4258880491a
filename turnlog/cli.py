"""The ``turnlog`` command line: each command parses its input, calls one library function and
renders the result. Errors print one line and exit 1 (usage errors exit 2)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from projections.artifacts import artifact_index, list_artifacts, read_artifact
from projections.capping import MIN_CAP
from projections.context import ContextPolicy, build_context
from projections.ledger import audit, load_prices
from projections.registry import materializer
from projections.sessions import list_sessions
from projections.todos import current_todos, render_checklist, todo_history
from store import (
    ANY,
    DEFAULT_ENCODING,
    NO_SESSION,
    Expected,
    SQLiteStore,
    StoreError,
    parse_events_json,
)
from turnlog import open_store
from turnlog.actions import fork_session, pin_message, unpin_message, write_todos
from turnlog.checks import verify_all
from turnlog.importers import IMPORT_FORMATS, import_file
from turnlog.output import (
    at_option,
    check_json_depth,
    describe,
    echo,
    emit,
    escape_text,
    input_file_option,
    int_range,
    json_option,
    max_tool_tokens_option,
    read_text,
    short,
    table,
    tokens_range,
)

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    """Turns library errors into one clear line and exit status 1, never a traceback; every error
    message is escaped, since it may quote what was given (a session id holding ESC)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            _check_arguments(args)
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise _escaped(exc) from exc.__cause__

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
            raise _escaped(exc) from exc.__cause__


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

    def open(self, *, create: bool = False, tokenizer: str | None = None) -> SQLiteStore:
        """The store, for a command that writes (it leaves the projections caught up)."""
        return open_store(self.db, create=create, tokenizer=tokenizer)

    def read(self) -> SQLiteStore:
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


@cli.command()
@click.option(
    "--tokenizer",
    default=None,
    help=f"tiktoken encoding for token counts (default {DEFAULT_ENCODING}, which works offline).",
)
@json_option
@pass_ctx
def init(ctx: _Context, tokenizer: str | None, as_json: bool) -> None:
    """Create a store (or check an existing one).

    \b
    Example:
      turnlog --db agent.db init
    """
    existed = os.path.exists(ctx.db)
    with ctx.open(create=True, tokenizer=tokenizer) as store:
        data = {
            "path": ctx.db,
            "created": not existed,
            "tokenizer": store.tokenizer.name,
            "events": store.head_position(),
        }
    verb = "created" if data["created"] else "already exists:"
    emit(
        data,
        as_json=as_json,
        text=f"{verb} turnlog store {ctx.db} (tokenizer {data['tokenizer']}, {data['events']} events)",
    )


def _expected(value: str | None) -> Expected:
    if value is None or value == "any":
        return ANY
    if value == "new":
        return NO_SESSION
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter("use a version number, 'any' or 'new'") from None
    if number < 0:
        raise click.BadParameter("a version is 0 or more")
    return number


@cli.command()
@click.argument("session")
@click.option(
    "--expected-version",
    metavar="N|any|new",
    help="Append only if the session's head version is N ('new': the session must not exist).",
)
@input_file_option("events")
@json_option
@pass_ctx
def append(ctx: _Context, session: str, expected_version: str | None, source: Any, as_json: bool) -> None:
    """Append events to SESSION, atomically (all or nothing).

    Events are JSON: one object, a list, or JSON lines, read from standard input.

    \b
    Example:
      echo '{"type": "message_appended", "role": "user", "content": "hi"}' \\
        | turnlog append my-session
    """
    expected = _expected(expected_version)
    text = read_text(source)
    # The events and the list around them are two levels more than their fields may have.
    check_json_depth(text, "events", wrapping=2)
    events = parse_events_json(text)
    with ctx.open(create=True) as store:
        records = store.append(session, events, expected_version=expected)
    data = [
        {"position": r.position, "version": r.version, "event_id": r.event_id, "type": r.type}
        for r in records
    ]
    if len(data) > 10 and not as_json:
        first, last = records[0], records[-1]
        emit(data, as_json=False, text=f"appended {len(records)} events to {session}: versions "
             f"{first.version}–{last.version}, positions {first.position}–{last.position}")  # fmt: skip
        return
    emit(data, as_json=as_json, columns=["position", "version", "type", "event_id"])


@cli.command()
@click.argument("session")
@click.option("--from-version", type=int_range(1), default=1, help="First version shown.")
@click.option("--to-version", type=int_range(1), default=None, help="Last version shown.")
@click.option("--width", type=int_range(20, 100_000), default=80, help="Text width per event.")
@json_option
@pass_ctx
def log(
    ctx: _Context,
    session: str,
    from_version: int,
    to_version: int | None,
    width: int,
    as_json: bool,
) -> None:
    """Show SESSION's events, in order.

    \b
    Example:
      turnlog log my-session --from-version 10
    """
    with ctx.read() as store:
        store.require_session(session)
        store.catch_up_tokens()
        records = store.read_session(session, from_version=from_version, to_version=to_version)
    if as_json:
        emit([r.to_dict() for r in records], as_json=True)
        return
    rows = [
        {
            "ver": r.version,
            "pos": r.position,
            "type": r.type,
            "tokens": r.tokens,
            "event_id": r.event_id[:12],
            "what": describe(r, width),
        }
        for r in records
    ]
    emit(rows, as_json=False, columns=["ver", "pos", "type", "tokens", "event_id", "what"])


@cli.command()
@at_option()
@json_option
@pass_ctx
def sessions(ctx: _Context, at: int | None, as_json: bool) -> None:
    """List the sessions: head version, messages, tokens, first and last activity.

    \b
    Example:
      turnlog sessions --json
    """
    with ctx.read() as store:
        infos = list_sessions(store, at=at)
    if as_json:
        emit([dataclasses.asdict(i) for i in infos], as_json=True)
        return
    rows = [
        {
            "session": i.session_id,
            "version": i.head_version,
            "messages": i.system_messages + i.user_messages + i.assistant_messages + i.tool_returns,
            "tokens": i.tokens,
            "title": short(i.title or "", 40),
            "last": i.last_recorded_at[:19],
        }
        for i in infos
    ]
    emit(rows, as_json=False, columns=["session", "version", "messages", "tokens", "title", "last"])


@cli.command()
@click.option(
    "--quick",
    is_flag=True,
    help="Run SQLite's quick_check instead of the full integrity_check (faster; skips the indexes).",
)
@json_option
@pass_ctx
def verify(ctx: _Context, quick: bool, as_json: bool) -> None:
    """Check the file's integrity, the immutability triggers, the hash chain, that every event
    decodes, every stored token count, the content blobs, and that every materialized projection
    equals a fresh rebuild.

    Exits 1 and lists every finding, with its position, when anything is wrong.
    """
    with ctx.read() as store:
        report = verify_all(store, quick=quick)
    data = {
        "ok": report.ok,
        "events": report.events,
        "head_hash": report.head_hash,
        "first_bad_position": report.first_bad_position,
        "problems": report.problems,
    }
    if report.ok:
        text = (
            f"ok: {report.events} events, hash chain intact (head {report.head_hash[:16]}), "
            "projections match a fresh rebuild"
        )
    else:
        text = f"FAILED at position {report.first_bad_position}:\n" + "\n".join(
            f"  {p}" for p in report.problems
        )
    emit(data, as_json=as_json, text=text)
    if not report.ok:
        sys.exit(1)


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(IMPORT_FORMATS)),
    required=True,
    help="The transcript's format.",
)
@click.option("--session", help="Session id (NAME-1, NAME-2... when the file has several).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_ctx
def import_(ctx: _Context, file: str, fmt: str, session: str | None, quiet: bool, as_json: bool) -> None:
    """Import FILE ('-' for standard input) as sessions, one per conversation.

    The whole file is checked before anything is written; then each conversation is stored
    whole, in one transaction. Safe to re-run: an already imported conversation is skipped, a
    grown one gets its new messages appended, and an interrupted import is finished.

    \b
    Example:
      turnlog import chat.json --format openai --session support-42
    """
    # Bytes: the importer decodes them and names the first byte that is not UTF-8.
    data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    bar = _ProgressBar("importing", enabled=not quiet and not as_json)
    with ctx.open(create=True) as store, bar:
        result = import_file(store, data, fmt, session=session, progress=bar.update)
    emit(
        result.sessions,
        as_json=as_json,
        columns=["session_id", "events", "appended", "skipped"],
    )


class _ProgressBar:
    """A progress bar on standard error, shown only for long jobs on a terminal."""

    def __init__(self, label: str, *, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self._bar: Any = None
        self._shown = 0

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < 20:
            return
        if self._bar is None:
            self._bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done - self._shown)
        self._shown = done

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


@cli.command()
@click.argument("session")
@click.option("--budget", type=tokens_range(1), required=True, help="Prompt tokens, all included.")
@max_tool_tokens_option("Inline cap per tool output (the rest stays fetchable as an artifact).")
@click.option(
    "--max-message-tokens",
    type=tokens_range(MIN_CAP),
    default=4000,
    show_default=True,
    help="Cap for an over-long user or assistant message.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["openai", "anthropic", "text"]),
    default="openai",
    show_default=True,
    help="Output format.",
)
@at_option("Build it as of this log position (replay).")
@click.option("--cap-open-run", is_flag=True, help="Cap tool outputs of the open run too.")
@click.option("--manifest", is_flag=True, help="Also print what went in: events, modes, tokens.")
@click.option("--record", is_flag=True, help="Append a context_built event with the manifest.")
@json_option
@pass_ctx
def context(
    ctx: _Context,
    session: str,
    budget: int,
    max_tool_tokens: int,
    max_message_tokens: int,
    fmt: str,
    at: int | None,
    cap_open_run: bool,
    manifest: bool,
    record: bool,
    as_json: bool,
) -> None:
    """Build the context to send to the model for SESSION under a token budget.

    System messages, the first user message and pinned messages are always kept; then the newest
    messages. Tool calls stay with their results; outputs are capped by tokens. The openai and
    anthropic formats print JSON; text is for people.

    \b
    Example:
      turnlog context chat-1 --budget 8000 --format anthropic --manifest
    """
    policy = ContextPolicy(
        budget=budget,
        max_tool_tokens=max_tool_tokens,
        max_message_tokens=max_message_tokens,
        format=fmt,
        cap_open_run=cap_open_run,
    )
    with ctx.open() if record else ctx.read() as store:
        built = build_context(store, session, policy, at=at, record=record)
    if fmt == "text" and not as_json:
        echo(built.rendered)
        if manifest:
            echo("\n" + _manifest_table(built.manifest()))
        return
    data: Any = built.rendered
    if manifest or as_json:
        data = {"messages": built.rendered, "manifest": built.manifest()}
    emit(data, as_json=True)


def _manifest_table(manifest: dict[str, Any]) -> str:
    rows = [
        {
            "#": i,
            "role": e["role"],
            "mode": e["mode"],
            "category": e["category"],
            "tokens": e["tokens"],
            "events": ",".join(x[:12] for x in e["event_ids"]),
        }
        for i, e in enumerate(manifest["entries"], 1)
    ]
    head = (
        f"{manifest['total_tokens']:,} of {manifest['budget']:,} tokens "
        f"({manifest['tokenizer']}), {manifest['omitted_messages']:,} messages left out"
    )
    return head + "\n" + table(rows, ["#", "role", "mode", "category", "tokens", "events"])


@cli.command()
@click.argument("session")
@at_option()
@json_option
@pass_ctx
def artifacts(ctx: _Context, session: str, at: int | None, as_json: bool) -> None:
    """List SESSION's artifacts: files written and tool outputs kept whole.

    \b
    Example:
      turnlog artifacts chat-1
    """
    with ctx.read() as store:
        found = list_artifacts(store, session, at=at)
    if as_json:
        emit([dataclasses.asdict(a) for a in found], as_json=True)
        return
    rows = [
        {
            "id": a.short_id,
            "source": a.source,
            "name": short(a.name, 40),
            "type": a.media_type,
            "bytes": a.size,
            "tokens": a.tokens if a.tokens_exact else f"~{a.tokens}",
            "pos": a.position,
        }
        for a in found
    ]
    emit(rows, as_json=False, columns=["id", "source", "name", "type", "bytes", "tokens", "pos"])


@cli.command()
@click.argument("artifact_id")
@click.option("--offset", type=int_range(0), default=0, help="First line (0-based).")
@click.option("--limit", type=int_range(1), default=200, show_default=True, help="Lines.")
@click.option("--max-tokens", type=tokens_range(1), help="Fewer lines so the page fits.")
@json_option
@pass_ctx
def artifact(
    ctx: _Context, artifact_id: str, offset: int, limit: int, max_tokens: int | None, as_json: bool
) -> None:
    """Print an artifact's content by id (or a unique prefix of 8+ characters), a page of lines
    at a time; the notice says which offset comes next.

    \b
    Example:
      turnlog artifact 3f9a1c2b7d4e --offset 200 --limit 100
    """
    with ctx.read() as store:
        page = read_artifact(store, artifact_id, offset=offset, limit=limit, max_tokens=max_tokens)
    emit(dataclasses.asdict(page), as_json=as_json, text=page.render())


@cli.command()
@click.argument("session")
@at_option()
@click.option("--max-chars", type=int_range(200), default=32768, show_default=True)
@json_option
@pass_ctx
def index(ctx: _Context, session: str, at: int | None, max_chars: int, as_json: bool) -> None:
    """Print the one-line-per-artifact index an agent reads before fetching what it needs.

    \b
    Example:
      turnlog index chat-1
    """
    with ctx.read() as store:
        text = artifact_index(store, session, at=at, max_chars=max_chars)
    emit({"index": text}, as_json=as_json, text=text)


@cli.command()
@click.argument("session")
@at_option()
@click.option("--history", is_flag=True, help="Every version of the list, oldest first.")
@click.option(
    "--write",
    "source",
    type=click.File("rb"),
    help="Replace the list with JSON read from FILE ('-': standard input): a list of strings or "
    'of {"content", "status", "id"} objects.',
)
@json_option
@pass_ctx
def todos(ctx: _Context, session: str, at: int | None, history: bool, source: Any, as_json: bool) -> None:
    """Show SESSION's todo list as the checklist given to the model, or replace it with --write.

    \b
    Examples:
      turnlog todos chat-1
      echo '["write the test", {"content": "fix it", "status": "in_progress"}]' \\
        | turnlog todos chat-1 --write -
    """
    if source is not None:
        text = read_text(source)
        check_json_depth(text, "--write")
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"--write: malformed JSON: {exc.msg}") from None
        if not isinstance(items, list):
            raise click.ClickException("--write: expected a JSON list of todo items")
        with ctx.open(create=True) as store:
            write_todos(store, session, items)
            current = current_todos(store, session)
        emit([i.model_dump() for i in current], as_json=as_json, text=render_checklist(current))
        return
    with ctx.read() as store:
        if history:
            snapshots = todo_history(store, session, at=at)
            data = [
                {"position": h.position, "version": h.version, "items": [i.model_dump() for i in h.items]}
                for h in snapshots
            ]
            text = "\n\n".join(
                f"version {h.version} (position {h.position}):\n{render_checklist(h.items)}"
                for h in snapshots
            )
            emit(data, as_json=as_json, text=text or "no todo list yet")
            return
        current = current_todos(store, session, at=at)
    emit([i.model_dump() for i in current], as_json=as_json, text=render_checklist(current))


@cli.command("audit")
@click.argument("session", required=False)
@click.option(
    "--by",
    type=click.Choice(["session", "run", "model", "day", "category"]),
    default="session",
    show_default=True,
    help="How to group the rows.",
)
@click.option(
    "--prices",
    type=click.Path(dir_okay=False, exists=True),
    help="A price table (JSON, USD per million tokens) instead of the bundled one.",
)
@json_option
@pass_ctx
def audit_(ctx: _Context, session: str | None, by: str, prices: str | None, as_json: bool) -> None:
    """Where the tokens went: billed usage, tokens appended, tokens sent per category, and cost.

    \b
    Examples:
      turnlog audit --by model
      turnlog audit chat-1 --by category
    """
    table_of_prices = load_prices(prices)
    with ctx.read() as store:
        report = audit(store, session, by=by, prices=table_of_prices)  # type: ignore[arg-type]
    rows = [dataclasses.asdict(r) for r in (*report.rows, report.totals)]
    rows[-1]["key"] = "TOTAL"
    if as_json:
        emit(
            {
                "by": report.by,
                "session_id": report.session_id,
                "rows": rows[:-1],
                "totals": rows[-1],
                "unknown_models": list(report.unknown_models),
                "prices": {"date": report.prices_date, "source": report.prices_source},
            },
            as_json=True,
        )
        return
    for row in rows:
        row[by] = row.pop("key") if row["key"] is not None else "-"
        row["cost"] = "" if row["cost"] is None else f"${row['cost']:.4f}"
    columns = [by, "calls", "input", "output", "cache_read", "reasoning", "appended", "sent", "cost"]
    if by == "category":
        columns = [by, "contexts", "sent"]
    text = table(rows, columns)
    if by != "category":
        origin = "--prices file" if prices else "the bundled table"
        text += f"\n(cost: USD, prices of {report.prices_date} from {origin})"
    if report.unknown_models:
        text += "\nno price for: " + ", ".join(report.unknown_models)
    emit(rows, as_json=False, text=text)


@cli.command()
@click.argument("session")
@click.argument("event_id")
@click.option("--reason", help="Why it must stay (shown to operators, not to the model).")
@json_option
@pass_ctx
def pin(ctx: _Context, session: str, event_id: str, reason: str | None, as_json: bool) -> None:
    """Pin a message (EVENT_ID or a unique prefix, as `turnlog log` shows it) so every context
    keeps it, whole.

    \b
    Example:
      turnlog pin chat-1 42c3c7ad5973 --reason "the user's constraints"
    """
    with ctx.open() as store:
        recorded = pin_message(store, session, event_id, reason)
    _print_written(recorded, as_json, "pinned")


@cli.command()
@click.argument("session")
@click.argument("event_id")
@click.option("--reason", help="Why it may go.")
@json_option
@pass_ctx
def unpin(ctx: _Context, session: str, event_id: str, reason: str | None, as_json: bool) -> None:
    """Lift the pin of a message (EVENT_ID or a unique prefix).

    \b
    Example:
      turnlog unpin chat-1 42c3c7ad5973
    """
    with ctx.open() as store:
        recorded = unpin_message(store, session, event_id, reason)
    _print_written(recorded, as_json, "unpinned")


def _print_written(recorded: Any, as_json: bool, verb: str) -> None:
    target = recorded.event.target_event_id
    emit(
        {"position": recorded.position, "version": recorded.version, "event_id": recorded.event_id,
         "target_event_id": target},
        as_json=as_json,
        text=f"{verb} {target[:12]} (event {recorded.event_id[:12]} at position {recorded.position})",
    )  # fmt: skip


@cli.command()
@click.argument("session")
@click.option("--at", "at_version", type=int_range(1), required=True, help="The last version shared.")
@click.option("--into", required=True, help="The new session's id.")
@click.option("--title", help="A title for the fork.")
@json_option
@pass_ctx
def fork(ctx: _Context, session: str, at_version: int, into: str, title: str | None, as_json: bool) -> None:
    """Start a new session that shares SESSION's history up to a version, without copying it.

    Every projection of the fork (context, artifacts, todos, summaries) sees the shared prefix;
    appends to either session never affect the other.

    \b
    Example:
      turnlog fork chat-1 --at 14 --into chat-1-retry
    """
    with ctx.open() as store:
        recorded = fork_session(store, session, at_version, into, title=title)
    emit(
        {"session_id": into, "parent": session, "at_version": at_version, "event_id": recorded.event_id,
         "version": recorded.version, "position": recorded.position},
        as_json=as_json,
        text=f"forked {session} at version {at_version} into {into} (its own events start at version "
        f"{recorded.version})",
    )  # fmt: skip


@cli.command()
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_ctx
def rebuild(ctx: _Context, quiet: bool, as_json: bool) -> None:
    """Rebuild every materialized projection from the log, from zero.

    Projections catch up by themselves; this is for after a bug fix, or to check timings.
    """
    bar = _ProgressBar("rebuilding", enabled=not quiet and not as_json)
    started = time.perf_counter()
    with ctx.open() as store, bar:
        materializer(store).rebuild(progress=bar.update)
        events = store.head_position()
    seconds = time.perf_counter() - started
    emit(
        {"events": events, "seconds": round(seconds, 3)},
        as_json=as_json,
        text=f"rebuilt every projection over {events:,} events in {seconds:.2f} s",
    )


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="turnlog")


if __name__ == "__main__":
    main()


# Command groups defined in their own modules register themselves on `cli` when imported.
from turnlog import commands  # noqa: E402, F401
