"""A quick read-only view of a SQLite store file, for the commands that must start at once (``turnlog
log``, ``turnlog sessions``): it loads neither the event models (pydantic) nor the tokenizer nor the
projections' machinery. It serves a read only where the file alone gives exactly what the full
read-only store would: every token count is stored, the projections it reads have applied every
event at this code's version, and each row is at its type's current schema version. Anywhere else it
declines (None), and the caller opens the full store, which folds, upcasts or says what is wrong."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from turnlog.store.event_fields import StoredEvent, stored_fields
from turnlog.store.readonly import connect_readonly, remove_scratch, schema_for_reading
from turnlog.store.rows_plain import EVENT_SELECT, decode_blob, lineage_from

BUSY_TIMEOUT = 30.0
"""Seconds to wait for a lock, as SQLiteStore.open's default (a reader seldom waits at all)."""

MAX_TOKENS = 2**32 - 1
"""store.limits.MAX_TOKENS, which loads pydantic (a test checks that the two agree)."""

_LAST = 2**62
"""Beyond every version a store can hold (store.limits.MAX_VERSION + 1)."""


class QuickView:
    """One read snapshot of a store file, opened read-only (see the module's doc)."""

    def __init__(self, conn: sqlite3.Connection, scratch: str | None) -> None:
        self._conn = conn
        self._scratch = scratch
        self._head = 0
        self._lineages: dict[str, list[tuple[str, int, int]]] = {}

    @classmethod
    def open(cls, path: str) -> QuickView | None:
        """The view of the store file at ``path``, or None when it cannot serve (the file is not a
        store this code reads as it is, or events wait for their token counts)."""
        try:
            conn, scratch = connect_readonly(path, BUSY_TIMEOUT)
        except Exception:  # the full store reports what is wrong with the file
            return None
        view = cls(conn, scratch)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            schema_for_reading(conn, path)
            conn.execute("BEGIN")  # every read of the view sees one snapshot
            view._head = int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])
            row = conn.execute(
                "SELECT value FROM turnlog_meta WHERE key = 'tokens_counted_through'"
            ).fetchone()
            if (int(row[0]) if row else 0) < view._head:
                raise LookupError("events wait for their token counts")
        except Exception:
            view.close()
            return None
        return view

    def head_position(self) -> int:
        """The last position of the log, as of the view's snapshot."""
        return self._head

    def current(self, projection: str, version: int) -> bool:
        """Whether the file's rows of the materialized projection named ``projection``, written at
        ``version`` (this code's), have applied every event of the snapshot."""
        try:
            row = self._conn.execute(
                "SELECT version, position FROM projection_checkpoints WHERE name = ?", (projection,)
            ).fetchone()
        except sqlite3.OperationalError:  # no projection was ever materialized in this file
            return False
        return row is not None and row[0] == version and row[1] >= self._head

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The view's connection, inside its snapshot, for a projection's reader."""
        yield self._conn

    def session_events(
        self, session_id: str, *, from_version: int = 1, to_version: int | None = None
    ) -> list[StoredEvent] | None:
        """The session's events from ``from_version`` to ``to_version`` (a fork's shared prefix
        included), as :meth:`turnlog.store.EventStore.read_session` reads them; None when the session
        does not exist or a row needs the full mapper."""
        conn = self._conn
        upper = min(to_version if to_version is not None else _LAST, _LAST)
        lower = min(from_version, _LAST)
        try:
            if (
                conn.execute("SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)).fetchone()
                is None
            ):
                return None  # the full store names the sessions it could have been
            found: list[StoredEvent] = []
            for sid, lo, hi in lineage_from(self._first_row, session_id, self._lineages):
                if max(lo, lower) <= min(hi, upper):
                    rows = conn.execute(
                        f"{EVENT_SELECT} WHERE e.session_id = ? AND e.version BETWEEN ? AND ? "
                        "ORDER BY e.version",
                        (sid, max(lo, lower), min(hi, upper)),
                    )
                    for row in rows:
                        event = _event(row)
                        if event is None:
                            return None
                        found.append(event)
        except Exception:  # text that is not UTF-8, JSON that does not parse: the full mapper says
            return None
        return found

    def _first_row(self, sid: str) -> tuple[str, str] | None:
        row = self._conn.execute(
            "SELECT type, payload FROM events WHERE session_id = ? ORDER BY version LIMIT 1", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        remove_scratch(self._scratch)

    def __enter__(self) -> QuickView:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _event(row: Any) -> StoredEvent | None:
    (pos, sid, version, event_id, etype, sv, payload, blob_id, tokens, at, prev, digest, codec, data) = row
    if not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
        return None
    content = None if blob_id is None else decode_blob(codec, data).decode("utf-8")
    fields = stored_fields(etype, sv, payload, content)
    if fields is None:
        return None
    return StoredEvent(pos, sid, version, event_id, etype, sv, tokens, at, prev, digest, fields)
