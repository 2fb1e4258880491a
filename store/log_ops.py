"""The few reads of the log itself that the materializer and the projections make on the connection
a store handed them (inside its transaction), for whichever backend made that connection: the events
between two positions, a session version's position, and the token-count watermark."""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.store.base import RecordedEvent
from turnlog.store.dialect import Connection, dialect_of


def records_between(
    conn: Connection, after: int, through: int, types: Sequence[str] | None = None
) -> list[RecordedEvent]:
    """The events with after < position <= through (optionally only some types), in order."""
    if dialect_of(conn).name == "postgresql":
        from turnlog.store.pg_storage import pg_records_between

        return pg_records_between(conn, after, through, types)
    from turnlog.store.sqlite_reading import records_between as sqlite_records_between

    return sqlite_records_between(conn, after, through, types)


def position_of(conn: Connection, session_id: str, version: int) -> int | None:
    """The global position of a session's version, following a fork's lineage."""
    if dialect_of(conn).name == "postgresql":
        from turnlog.store.pg_storage import pg_position_of

        return pg_position_of(conn, session_id, version)
    from turnlog.store.sqlite_reading import position_of as sqlite_position_of

    return sqlite_position_of(conn, session_id, version)


PG_COUNTED_THROUGH = "SELECT coalesce(max(position), 0) FROM events"
"""What :func:`counted_through` reads on PostgreSQL (the head: every event is counted when stored)."""


def counted_through(conn: Connection) -> int:
    """Every event at or below this position has its token count (a backend that counts every
    event before it stores it: the head)."""
    if dialect_of(conn).name == "postgresql":
        row = conn.execute(PG_COUNTED_THROUGH).fetchone()
        return int(row[0])
    from turnlog.store.sqlite_tokens import counted_through as sqlite_counted_through

    return sqlite_counted_through(conn)


def counted_through_expr(conn: Connection) -> str:
    """:func:`counted_through` as a scalar subquery, for a caller that reads it with other values in
    one statement."""
    if dialect_of(conn).name == "postgresql":
        return f"({PG_COUNTED_THROUGH})"
    from turnlog.store.sqlite_tokens import COUNTED_THROUGH_EXPR

    return COUNTED_THROUGH_EXPR


def write_token_counts(conn: Connection, counts: Sequence[tuple[int, int]], through: int) -> None:
    """Store deferred token counts and move the watermark (nothing to do where counts are made
    before the events are stored: the counts given are those already in the rows)."""
    if dialect_of(conn).name == "postgresql":
        return  # the counts are in the rows from the start, and there is no watermark to move
    from turnlog.store.sqlite_tokens import write_token_counts as sqlite_write_token_counts

    sqlite_write_token_counts(conn, counts, through)


__all__ = ["counted_through", "position_of", "records_between", "write_token_counts"]
