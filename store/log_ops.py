"""The few reads of the log itself that the materializer and the projections make on the connection
a store handed them (inside its transaction), for whichever backend made that connection: the events
between two positions, a session version's position, and the token-count watermark."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

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


# What :func:`counted_through` reads on PostgreSQL, kept here as text so that the projections read it
# without importing the driver: the position before the first placed event still waiting for its
# count (a probe of the partial index of such rows: store.pg_schema migration 4), else the head.
PG_COUNTED_THROUGH = (
    "SELECT coalesce((SELECT min(position) FROM event_log WHERE tokens IS NULL AND position IS NOT NULL)"
    " - 1, (SELECT coalesce(max(position), 0) FROM events))"
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
    ``through``, inside the caller's transaction (PostgreSQL keeps no watermark: the rows still
    without a count say it)."""
    if dialect_of(conn).name == "postgresql":
        from turnlog.store.pg_tokens import pg_write_token_counts

        pg_write_token_counts(conn, counts)  # a QmarkConnection there
        return
    from turnlog.store.sqlite_tokens import write_token_counts as sqlite_write_token_counts

    sqlite_write_token_counts(conn, counts, through)


def given_counts(records: list[RecordedEvent], counts: Sequence[tuple[int, int]]) -> list[RecordedEvent]:
    """``records`` with the counts of ``counts`` (``(tokens, position)`` pairs) given to those read
    without one."""
    if all(r.tokens is not None for r in records):
        return records
    by_position = {position: tokens for tokens, position in counts}
    return [
        replace(r, tokens=by_position[r.position]) if r.tokens is None and r.position in by_position else r
        for r in records
    ]


def catch_up_in_batches(
    count_pending: Callable[[], tuple[list[tuple[int, int]], int] | None],
    head_position: Callable[[], int],
    write: Callable[[list[tuple[int, int]], int], None],
    batch: int,
) -> int:
    """Count the events waiting for their token count, a batch at a time (``count_pending``: up to
    ``batch`` counts and the position they reach), each batch stored by ``write(counts, through)``;
    only up to the head seen on entry, so that a writer appending faster than the tokenizer counts
    never keeps a reader here (what it adds meanwhile is counted by the next catch-up). Returns how
    many were counted."""
    counted = 0
    target: int | None = None
    while True:
        pending = count_pending()
        if pending is None:
            return counted
        counts, through = pending
        if target is None:
            target = through if len(counts) < batch else head_position()
        write(counts, through)
        counted += len(counts)
        if through >= target or not counts:
            return counted


__all__ = [
    "catch_up_in_batches",
    "counted_through",
    "given_counts",
    "position_of",
    "records_between",
    "write_token_counts",
]
