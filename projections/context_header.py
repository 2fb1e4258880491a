"""The first read of a build on SQLite: one statement that answers what each build asks first (the
open run, the running totals at the head, the newest artifact, the first message that is not a
system message) and whether the session has any of the rows most sessions never have (ranges that
are not live, pins, summaries, condensed views). A build then reads only the tables that have rows
for it: a typical warm build makes three or four statements in all. On a server, a warm build's one
statement (context_start) reads the same answers, and leaves them here for the build's reader."""

from __future__ import annotations

from dataclasses import dataclass

from turnlog.store.dialect import Connection

_HEADER = (
    "SELECT "
    "(SELECT 1 FROM live_gaps WHERE session_id = ? AND dead_at <= ? LIMIT 1), "
    "(SELECT 1 FROM ctx_pins WHERE session_id = ? AND pinned_at <= ? LIMIT 1), "
    "(SELECT 1 FROM ctx_summaries WHERE session_id = ? AND position <= ? LIMIT 1), "
    "(SELECT 1 FROM rt_condensed WHERE session_id = ? AND position <= ? LIMIT 1), "
    "(SELECT started_version FROM ctx_runs WHERE session_id = ? AND started_position <= ? "
    "AND (finished_position IS NULL OR finished_position > ?) ORDER BY started_position DESC LIMIT 1), "
    "{last_message}, "
    "(SELECT position FROM artifacts WHERE session_id = ? AND position <= ? ORDER BY position DESC LIMIT 1), "
    "(SELECT event_id FROM artifacts WHERE session_id = ? AND position <= ? ORDER BY position DESC LIMIT 1), "
    "(SELECT version FROM ctx_messages WHERE session_id = ? AND role != 'system' AND version >= 1 "
    "AND version <= ? ORDER BY version LIMIT 1)"
).format(
    last_message=", ".join(
        f"(SELECT {column} FROM ctx_messages WHERE session_id = ? AND version <= ? "
        "ORDER BY version DESC LIMIT 1)"
        for column in ("cum_messages", "cum_tokens")
    )
)


@dataclass(frozen=True, slots=True)
class Header:
    """What the first statement of a build said of a session as of position ``at``."""

    at: int
    gaps: bool
    """Some range of versions was taken out of the live set by ``at`` (it may be live again)."""
    pins: bool
    summaries: bool
    condensed: bool
    open_run: int | None
    """The version the open run started at, if a run is open."""
    cumulative: tuple[int, int]
    """Messages and their stored tokens up to the head version."""
    artifact: tuple[int, str] | None
    """The newest artifact row's position and event id (context_preamble's watermark)."""
    first_not_system: int | None
    """The first message that is not a system message (when no range is out of the live set)."""


def read_header(conn: Connection, session_id: str, at: int, head_version: int) -> Header:
    sid = session_id
    row = conn.execute(
        _HEADER,
        (sid, at) * 4 + (sid, at, at) + (sid, head_version) * 2 + (sid, at) * 2 + (sid, head_version),
    ).fetchone()
    gaps, pins, summaries, condensed, open_run, messages, tokens, position, event_id, first = row
    return Header(
        at,
        gaps is not None,
        pins is not None,
        summaries is not None,
        condensed is not None,
        None if open_run is None else int(open_run),
        (int(messages or 0), int(tokens or 0)),
        None if position is None else (int(position), str(event_id)),
        None if first is None else int(first),
    )


# -- on a server: the header read ahead, with the build's freshness check (context_start) ----------


def leave_ahead(
    conn: Connection, session_id: str, at: int, head_version: int, header: Header, chunk: int
) -> None:
    """Leave the header of a build as of (``at``, ``head_version``) on the reading's connection for
    the build's reader, with the size of the first chunk of its walk back (read with it)."""
    conn.ahead[("context_header", session_id, at, head_version)] = (header, chunk)


def take_ahead(conn: Connection, session_id: str, at: int, head_version: int) -> tuple[Header, int] | None:
    """The header (and first chunk size) :func:`leave_ahead` left for a build as of this position, if
    any: taken, so a later build reads its own."""
    ahead: dict[object, tuple[Header, int]] | None = getattr(conn, "ahead", None)
    return None if ahead is None else ahead.pop(("context_header", session_id, at, head_version), None)
