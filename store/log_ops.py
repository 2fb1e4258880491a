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


# What :func:`counted_through` reads on PostgreSQL: the watermark (store.pg_tokens), kept here as
# text so that the projections read it without importing the driver.
PG_COUNTED_THROUGH = (
    "SELECT coalesce((SELECT value::bigint FROM turnlog_meta WHERE key = 'tokens_counted_through'), 0)"
)


def counted_through(conn: Connection) -> int:
    """Every event at or below this position has its token count."""
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
    """Store deferred token counts (``(tokens, position)`` pairs) and move the watermark to
    ``through``, inside the caller's transaction."""
    if dialect_of(conn).name == "postgresql":
        from turnlog.store.pg_tokens import pg_write_token_counts

        pg_write_token_counts(conn, counts, through)  # a QmarkConnection there
        return
    from turnlog.store.sqlite_tokens import write_token_counts as sqlite_write_token_counts

    sqlite_write_token_counts(conn, counts, through)


def advance_watermark(conn: Connection, start: int, end: int) -> None:
    """Move the watermark to ``end`` if every event up to ``start`` is counted, inside the caller's
    transaction: the events after ``start`` up to ``end`` were stored with their counts (an append
    that counted them before its commit). Otherwise it stays, and a catch-up moves it."""
    if dialect_of(conn).name == "postgresql":
        conn.execute(
            "UPDATE turnlog_meta SET value = ? WHERE key = 'tokens_counted_through' "
            "AND value::bigint >= ? AND value::bigint < ?",
            (str(end), start, end),
        )
        return
    if counted_through(conn) >= start:
        write_token_counts(conn, (), end)


__all__ = ["advance_watermark", "counted_through", "position_of", "records_between", "write_token_counts"]
