"""Commands that write to or show one session: append, log, pin, unpin, fork, rewind, and the list
of sessions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

# The writing commands import their actions (and the policy's loop) when they run: `sessions` and
# `log` share this module and must start fast.
from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.output import (
    at_option,
    check_json_depth,
    describe,
    describe_fields,
    emit,
    input_file_option,
    int_range,
    json_option,
    read_text,
    short,
)
from turnlog.projections.live_ranges import COMPENSATING_TYPES, LIVE_PROJECTION, LIVE_VERSION, marks
from turnlog.projections.sessions import SessionInfo, list_sessions, quick_sessions
from turnlog.store.event_fields import StoredEvent

if TYPE_CHECKING:
    from turnlog.store import Expected, RecordedEvent


def _expected(value: str | None) -> Expected:
    from turnlog.store import ANY, NO_SESSION  # with the event models: only the writing commands

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

    Events are JSON: one object, a list, or JSON lines, read from standard input. Once they are
    stored, the session's policy (`turnlog policy`) runs: long tool outputs get their auto/custom
    views, and a run_finished compacts when the policy says so (a failure is recorded as an event
    and printed as a warning; the appended events stay).

    \b
    Example:
      echo '{"type": "message_appended", "role": "user", "content": "hi"}' \\
        | turnlog append my-session
    """
    from turnlog.commands.policy import report_loop
    from turnlog.store import parse_events_json

    expected = _expected(expected_version)
    text = read_text(source)
    # The events and the list around them are two levels more than their fields may have.
    check_json_depth(text, "events", wrapping=2)
    events = parse_events_json(text)
    with ctx.open(create=True) as store:
        records = store.append(session, events, expected_version=expected)
        report_loop(store, session, records)
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
    """Show SESSION's events, in order; events a rewind or a removal undid are marked ``undone``
    (with --json: ``"live": false``).

    \b
    Example:
      turnlog log my-session --from-version 10
    """
    shown: Sequence[RecordedEvent | StoredEvent] | None = None
    view = ctx.quick()
    if view is not None:
        # The store file read as it stands, when it gives exactly what the full store would.
        with view:
            events = view.session_events(session, from_version=from_version, to_version=to_version)
            if events is not None and view.current(LIVE_PROJECTION, LIVE_VERSION):
                with view.reading() as conn:
                    live = marks(conn, session, view.head_position(), events)
                shown = events
    if shown is None:
        with ctx.read() as store:
            store.require_session(session)
            store.catch_up_tokens()
            records = store.read_session(session, from_version=from_version, to_version=to_version)
            # Imported here: the full read loads the projections' machinery.
            from turnlog.projections.live import live_marks

            live = live_marks(store, session, records)
        shown = records
    if as_json:
        emit([{**r.to_dict(), "live": alive} for r, alive in zip(shown, live, strict=True)], as_json=True)
        return
    rows = [
        {
            "ver": r.version,
            "pos": r.position,
            "type": r.type,
            "tokens": r.tokens,
            "event_id": r.event_id[:12],
            # Compensating events are never live, but they are what happened, not what was undone.
            "live": "" if alive or r.type in COMPENSATING_TYPES else "undone",
            "what": _what(r, width),
        }
        for r, alive in zip(shown, live, strict=True)
    ]
    emit(rows, as_json=False, columns=["ver", "pos", "type", "tokens", "event_id", "live", "what"])


def _what(record: RecordedEvent | StoredEvent, width: int) -> str:
    if isinstance(record, StoredEvent):
        return describe_fields(record.type, record.fields, width)
    return describe(record, width)


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
    infos: list[SessionInfo] | None = None
    view = ctx.quick()
    if view is not None:  # the store file's rows as they stand, when they give the listing
        with view:
            infos = quick_sessions(view, at=at)
    if infos is None:
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
    from turnlog.actions import pin_message

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
    from turnlog.actions import unpin_message

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
    from turnlog.actions import fork_session

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
@click.argument("session")
@click.option("--to-version", type=int_range(0), required=True, help="The version to return to (0: empty).")
@click.option(
    "--reason",
    type=click.Choice(["rewind", "pop", "clear", "delete", "time_travel"]),
    default="rewind",
    show_default=True,
    help="What the rewind stands for.",
)
@click.option("--note", help="Free text for operators.")
@json_option
@pass_ctx
def rewind(
    ctx: _Context, session: str, to_version: int, reason: Any, note: str | None, as_json: bool
) -> None:
    """Return SESSION to the state it had at a version, by recording a ``session_rewound`` event.

    Nothing is deleted: `turnlog log` still shows every event (the undone ones marked), the ledger
    keeps every usage, and a later rewind can bring the undone events back.

    \b
    Example:
      turnlog rewind chat-1 --to-version 12 --reason pop
    """
    from turnlog.actions import rewind_session

    with ctx.open() as store:
        recorded = rewind_session(store, session, to_version, reason=reason, note=note)
    emit(
        {"session_id": session, "to_version": to_version, "reason": reason, "event_id": recorded.event_id,
         "version": recorded.version, "position": recorded.position},
        as_json=as_json,
        text=f"rewound {session} to version {to_version} (event {recorded.event_id[:12]} at version "
        f"{recorded.version}; nothing deleted)",
    )  # fmt: skip
