"""Token counts: counted once per event with the store's tokenizer, after the commit (deferred)
or before it (inline), stored in the event's row; a read-only store folds them in memory."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from turnlog.store.append_rules import event_tokens
from turnlog.store.events import Event
from turnlog.store.log_ops import catch_up_in_batches
from turnlog.store.readonly import fold_token_counts
from turnlog.store.rows import select_decodable
from turnlog.store.sqlite_connection import SQLiteBase, translate


class TokenCountingStore(SQLiteBase):
    """Counting the tokens of events stored without a count."""

    def count_event_tokens(self, event: Event) -> int:
        """The tokens an event adds, with this store's tokenizer: exact, except for content over
        EXACT_COUNT_LIMIT bytes, which is estimated from its size."""
        return event_tokens(self.tokenizer, event)

    def pending_token_counts(self) -> int:
        """How many events wait for their token count."""
        with self.reading() as conn:
            row = conn.execute(
                "SELECT count(*) FROM events WHERE position > ? AND tokens IS NULL",
                (counted_through(conn),),
            ).fetchone()
            return int(row[0])

    def count_pending(self, limit: int = 2000) -> tuple[list[tuple[int, int]], int] | None:
        """Count the tokens of up to ``limit`` events stored without a count, outside any
        transaction. Returns (``[(tokens, position), ...]``, the position every event up to which is
        then counted), for :func:`write_token_counts`; None when nothing waits."""
        with self.reading() as conn:
            # One statement: every read of a writer's turn asks this first, and most often nothing waits.
            start, head = conn.execute(_WATERMARK_AND_HEAD).fetchone()
            if start >= head:
                return None
            # A row that cannot be decoded stays uncounted (verify reports it) instead of stopping
            # every read of every session here.
            pending, seen, last = select_decodable(
                conn,
                "WHERE e.position > ? AND e.position <= ? AND e.tokens IS NULL ORDER BY e.position LIMIT ?",
                (start, head, limit),
            )
        # Counted outside any transaction, so writers are never kept waiting by tiktoken.
        counts = [(self.count_event_tokens(r.event), r.position) for r in pending]
        return counts, (last if seen == limit and last is not None else head)

    def catch_up_tokens(self) -> int:
        if self.readonly:
            return self._fold_tokens()

        def write(counts: list[tuple[int, int]], through: int) -> None:
            with self.atomic() as conn:
                write_token_counts(conn, counts, through)

        return catch_up_in_batches(self.count_pending, self.head_position, write, 2000)

    def _fold_tokens(self) -> int:
        """A read-only store's catch-up: the counts are made as a writer would make them, but kept
        in this connection's memory (see :func:`store.readonly.fold_token_counts`)."""
        counted = 0
        while True:
            pending = self.count_pending()
            if pending is None:
                return counted
            counts = pending[0]
            with self._lock, translate(self.path):
                fold_token_counts(self.conn, counts)
            counted += len(counts)
            if len(counts) < 2000:
                return counted

    def counted_position(self) -> int:
        """Every event at or below this position has its token count (stored, or folded in memory
        by a read-only store)."""
        with self.reading() as conn:
            start = counted_through(conn)
            row = conn.execute(
                "SELECT min(position) FROM events WHERE position > ? AND tokens IS NULL", (start,)
            ).fetchone()
            if row[0] is not None:
                return int(row[0]) - 1
            return int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])


def write_token_counts(conn: sqlite3.Connection, counts: Sequence[tuple[int, int]], through: int) -> None:
    """Store counts made by :meth:`SQLiteStore.count_pending`, inside the caller's transaction (a
    count another process wrote meanwhile is kept, and the watermark only moves forward)."""
    if counts:
        conn.executemany("UPDATE events SET tokens = ? WHERE position = ? AND tokens IS NULL", counts)
    conn.execute(
        "INSERT INTO turnlog_meta (key, value) VALUES ('tokens_counted_through', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value "
        "WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        (str(through),),
    )


COUNTED_THROUGH_EXPR = (
    "(SELECT coalesce((SELECT CAST(value AS INTEGER) FROM turnlog_meta "
    "WHERE key = 'tokens_counted_through'), 0))"
)
"""What :func:`counted_through` reads, as a scalar subquery."""

_WATERMARK_AND_HEAD = f"SELECT {COUNTED_THROUGH_EXPR}, (SELECT coalesce(max(position), 0) FROM events)"


def counted_through(conn: sqlite3.Connection) -> int:
    """Every event at or below this position has its token count."""
    row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokens_counted_through'").fetchone()
    return int(row[0]) if row else 0
