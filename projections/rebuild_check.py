"""A materializer's check of its projections against a fresh rebuild of each (what ``turnlog
verify`` reports of them): the rebuild is made in the temp schema on the same connection, inside one
read snapshot, compared with the stored rows (a read-only store's: its temp shadow), and dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnlog.projections.projection import Projection
from turnlog.store import Store
from turnlog.store.dialect import Connection, dialect_of
from turnlog.store.log_ops import records_between

BATCH = 5000
"""Events applied per transaction while catching up (and per step of a fresh rebuild)."""


class RebuildCheck:
    """:meth:`differences`, for projections.materialize.Materializer."""

    store: Store
    projections: list[Projection]
    _folded: dict[str, int]

    if TYPE_CHECKING:

        def catch_up(self) -> int: ...

        def _position(self, conn: Connection, projection: Projection) -> int: ...

    def differences(self) -> list[str]:
        """Compare every projection, caught up, with a fresh rebuild of it; return one line per
        projection whose rows differ (empty when all agree). The rebuild is made in SQLite's temp
        schema on the same connection, inside one read snapshot, and dropped afterwards."""
        head = self.catch_up()
        problems = []
        with self.store.reading() as conn:
            dialect = dialect_of(conn)
            scratch = dialect.scratch
            for projection in self.projections:
                if self._position(conn, projection) != head:
                    problems.append(f"projection {projection.name}: behind the log")
                    continue
                # A read-only store's caught-up rows are its temp shadow: kept aside, and the
                # shadow made again by the next catch-up.
                shadowed = self._folded.pop(projection.name, None) is not None
                materialized = projection.snapshot(conn, scratch if shadowed else dialect.main)
                if shadowed:
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE {scratch}.{table}")
                try:
                    projection.create(conn, scratch)
                    for start in range(0, head, BATCH):
                        end = min(head, start + BATCH)
                        projection.apply(conn, records_between(conn, start, end, projection.types))
                    if projection.snapshot(conn, scratch) != materialized:
                        problems.append(
                            f"projection {projection.name}: rows differ from a fresh rebuild; "
                            "run `turnlog rebuild`"
                        )
                except BaseException:
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE IF EXISTS {scratch}.{table}")
                    raise
                if shadowed:
                    # The fresh rebuild is the shadow now: a later projection's rebuild may read it
                    # (stable_cuts reads rt_policies), so it is kept, not dropped.
                    self._folded[projection.name] = head
                else:
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE {scratch}.{table}")
        return problems


__all__ = ["BATCH", "RebuildCheck"]
