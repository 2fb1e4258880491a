"""Token counts on PostgreSQL made after the commit, as on SQLite (``token_counting="deferred"``;
counting before the transaction stays PostgreSQL's default). Such an append's durable commit is its
rows alone, with NULL counts; the next catch-up (the writer's own, from the records it kept in
memory, or any process's read) counts what waits, outside any transaction, and fills the counts in
once (the update trigger allows nothing else). No watermark is kept: "every placed event up to here
has its count" is the position before the first row still waiting for one, a probe of the partial
index of such rows (empty when every append counts inline, so the default pays nothing for it).

Deferring took about a tenth of a single-event append's client CPU (116 µs against 128, the
tokenizer's tables being cold after each wait for the server, whatever the tokenizer) but cost an
agent's turn (an append, then a build) more: filling a count in is a new row version on the server.
A read that finds events still waiting gives them their counts in memory
(PgReadingStore.with_counts: the same counts, which depend only on the event and the tokenizer)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from turnlog.store.errors import CorruptStoreError
from turnlog.store.log_ops import PG_COUNTED_THROUGH, catch_up_in_batches
from turnlog.store.pg_qmark import QmarkConnection
from turnlog.store.pg_reading import PgReadingStore, select_records

_COUNTED_AND_HEAD = f"SELECT ({PG_COUNTED_THROUGH}), (SELECT coalesce(max(position), 0) FROM events)"

_FILL = (
    "UPDATE event_log SET tokens = v.tokens "
    "FROM unnest(?::bigint[], ?::bigint[]) AS v (tokens, position) "
    "WHERE event_log.position = v.position AND event_log.tokens IS NULL"
)

BATCH = 2000
"""Events counted per transaction by :meth:`PgTokenCounting.catch_up_tokens`."""


def pg_write_token_counts(conn: QmarkConnection, counts: Sequence[tuple[int, int]]) -> None:
    """Store counts made by :meth:`PgTokenCounting.count_pending` (``(tokens, position)`` pairs) inside
    the caller's transaction; a count another process filled in meanwhile is kept."""
    if counts:
        conn.execute(_FILL, ([tokens for tokens, _ in counts], [position for _, position in counts]))


class PgTokenCounting(PgReadingStore):
    """Counting the tokens of events stored without a count."""

    if TYPE_CHECKING:

        def atomic(
            self, *, durable: bool = True, wait: bool = True
        ) -> AbstractContextManager[QmarkConnection]: ...  # store.pg_storage

    def pending_token_counts(self) -> int:
        """How many placed events wait for their token count."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM event_log WHERE tokens IS NULL AND position IS NOT NULL"
            ).fetchone()
        return int(row[0]) if row else 0

    def count_pending(self, limit: int = BATCH) -> tuple[list[tuple[int, int]], int] | None:
        """Count the tokens of up to ``limit`` events stored without a count, outside any
        transaction: (``[(tokens, position), ...]``, the position every event up to which is then
        counted), for :func:`pg_write_token_counts`; None when nothing waits."""
        with self.connection() as conn:
            start, head = conn.execute(_COUNTED_AND_HEAD).fetchone() or (0, 0)
            if start >= head:
                return None
            where = "WHERE e.position > %s AND e.position <= %s AND e.tokens IS NULL ORDER BY e.position"
            try:
                pending = select_records(conn, f"{where} LIMIT %s", (start, head, limit))
                positions = [r.position for r in pending]
            except CorruptStoreError:
                # A row that cannot be decoded stays uncounted (verify reports it) instead of
                # stopping every read of every session here: the others are read one by one.
                pending = []
                positions = [
                    position
                    for (position,) in conn.execute(
                        "SELECT position FROM events WHERE position > %s AND position <= %s "
                        "AND tokens IS NULL ORDER BY position LIMIT %s",
                        (start, head, limit),
                    ).fetchall()
                ]
                for position in positions:
                    try:
                        pending += select_records(conn, "WHERE e.position = %s", (position,))
                    except CorruptStoreError:
                        continue
        counts = [(self.count_event_tokens(r.event), r.position) for r in pending]
        # A full batch reaches its last row looked at (a damaged one included), so that the
        # catch-up goes on past it; a short one, the head.
        return counts, (int(positions[-1]) if len(positions) == limit else int(head))

    def catch_up_tokens(self) -> int:
        """Count and store the counts of the events waiting for one; returns how many."""

        def write(counts: list[tuple[int, int]], _through: int) -> None:
            with self.atomic(durable=False) as conn:
                pg_write_token_counts(conn, counts)

        return catch_up_in_batches(self.count_pending, self.head_position, write, BATCH)

    def counted_position(self) -> int:
        """Every event at or below this position has its token count."""
        with self.connection() as conn:
            row = conn.execute(PG_COUNTED_THROUGH).fetchone()
        return int(row[0]) if row else 0


__all__ = ["PgTokenCounting", "pg_write_token_counts"]
