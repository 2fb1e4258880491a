"""The PostgreSQL section's third side of the durable append (issue 17), as the floor section has one
for SQLite (floor_rows.py): turnlog's own one-round-trip statements, recorded from a store's appends
(not timed) and sent again by plain psycopg, one per commit, into a copy of that store's log as it
was before them. What it measures is the server's cost of turnlog's schema and statement (the locks,
the heads checked, the row and its unique keys) without turnlog's Python (the event checked, its
tokens counted, its hashes, the pool): turnlog ÷ it is the share of the gap to the floor that is
client CPU."""

from __future__ import annotations

import time
from typing import Any

from benchlib.postgres_bench import _message, schema, server


class _Recording:
    """A kept cursor that remembers every statement it is given, then runs it."""

    def __init__(self, cursor: Any, recorded: list[tuple[str, list[Any]]]) -> None:
        self.cursor, self.recorded = cursor, recorded

    def execute(self, sql: str, params: list[Any], **options: Any) -> Any:
        self.recorded.append((sql, list(params)))
        return self.cursor.execute(sql, params, **options)


def _recorded_appends(source: str, copy: str, n: int) -> list[tuple[str, list[Any]]]:
    """``n`` one-event appends to a store in schema ``source``, each one round trip, after a few
    that make its sessions (copied into ``copy`` before the ``n``); the statements they sent and
    their parameters."""
    import turnlog
    from turnlog.store import pg_fast

    store = turnlog.open_store(f"{server()}?schema={source}")
    recorded: list[tuple[str, list[Any]]] = []
    kept = pg_fast.kept_cursor
    try:
        store.append("warm-up", [_message(0)])
        store.append("s", [_message(0)])
        store.append("s", [_message(1)])  # the heads known: the appends that follow take one round trip
        _copy_log(source, copy)
        pg_fast.kept_cursor = lambda conn, cursors: _Recording(kept(conn, cursors), recorded)  # type: ignore[assignment]
        for i in range(n):
            store.append("s", [_message(i + 2)])
    finally:
        pg_fast.kept_cursor = kept  # type: ignore[assignment]
        store.close()
    appends = [r for r in recorded if r[0].startswith("WITH ok AS")]
    if len(appends) != n:
        raise RuntimeError(f"pg_rows: {len(appends)} of {n} appends took the one-round-trip path")
    return appends


def _copy_log(source: str, copy: str) -> None:
    """Copy the log of ``source`` as it is now into a turnlog store in schema ``copy`` (made by
    turnlog, so the copy has the same tables, keys and triggers)."""
    import psycopg

    import turnlog

    turnlog.open_store(f"{server()}?schema={copy}").close()
    with psycopg.connect(server(), autocommit=True) as conn, conn.transaction():
        for table in ("blobs", "event_log"):
            conn.execute(f"INSERT INTO {copy}.{table} OVERRIDING SYSTEM VALUE SELECT * FROM {source}.{table}")
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{copy}.event_log', 'row_id'), "
            f"(SELECT max(row_id) FROM {copy}.event_log))"
        )


def _hashes(conn: Any, name: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT position, hash, order_hash FROM {name}.event_log ORDER BY row_id").fetchall()


def least_append(n: int) -> float:
    """The least client work (floor_rows.LeastWork: the event object made from the message, its
    payload JSON, its chain's three hashes) of ``n`` durable appends' events, timed alone: events/s.
    The floor ÷ (these statements' time + this) is the most a PostgreSQL append of this design can
    reach."""
    import turnlog
    from benchlib.floor_rows import LeastWork

    with schema() as source, schema() as copy:
        statements = _recorded_appends(source, copy, n)
        store = turnlog.open_store(f"{server()}?schema={source}")
        try:
            salt = store.salt
        finally:
            store.close()
    rows = [(tuple(params[-14:]), None) for _, params in statements]
    # The first statement checks the order head the first row follows (its 8th parameter).
    least = LeastWork(turnlog.MessageAppended.model_validate, rows, salt, order=statements[0][1][7])
    messages = [_message(i + 2) for i in range(n)]
    start = time.perf_counter()
    least.run(messages, 0)
    return n / (time.perf_counter() - start)


def rows_append(n: int) -> float:
    """turnlog's recorded statements of ``n`` durable appends, sent by plain psycopg (a raw cursor,
    prepared on the server, in autocommit mode: one round trip and one commit each): events/s. The
    copy is checked to hold exactly the source's rows afterwards (not timed)."""
    import psycopg

    with schema() as source, schema() as copy:
        statements = _recorded_appends(source, copy, n)
        options = f"-c search_path={copy} -c synchronous_commit=on"
        with psycopg.connect(server(), autocommit=True, options=options) as conn:
            cursor = psycopg.RawCursor(conn)
            start = time.perf_counter()
            for sql, params in statements:
                cursor.execute(sql, params, prepare=True)
            rate = n / (time.perf_counter() - start)
            if _hashes(conn, copy) != _hashes(conn, source):
                raise RuntimeError("pg_rows: the replayed statements did not store the source's rows")
        return rate
