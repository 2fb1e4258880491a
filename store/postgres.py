"""The event log in a PostgreSQL schema, for many workers on many machines: a pool of connections
shared by a process's threads, appends durable at commit with writers of different sessions side by
side (each session its own hash chain; the global order placed after commit, store.pg_chain), the
same hashes as SQLite's for the same events, content-addressed blobs, immutability enforced by the
database, and versioned migrations.

The class is built in layers, one module each: the pool, migrations and transactions
(store.pg_connection), reads and verify (store.pg_reading) and appends (store.pg_append). psycopg
is imported only here, in store/: install the ``postgres`` extra."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from turnlog.store.base import ANY, Expected, RecordedEvent, Store
from turnlog.store.errors import StoreError
from turnlog.store.pg_append import PgAppendingStore
from turnlog.store.pg_connection import describe_server
from turnlog.store.pg_schema import LATEST_VERSION
from turnlog.store.pg_storage import PgProjectionStorage

__all__ = ["LATEST_VERSION", "PostgresStore", "describe_server"]


class PostgresStore(PgProjectionStorage, PgAppendingStore, Store):
    """The event log in one PostgreSQL schema, and the projections' tables beside it. Open it with
    :meth:`open`."""

    def append(
        self,
        session_id: str,
        events: Sequence[Any],
        *,
        expected_version: Expected = ANY,
        recorded_at: Sequence[str] | None = None,
        bounded: bool = True,
    ) -> list[RecordedEvent]:
        if self.refuse_appends:
            raise StoreError(f"{self.where} is open read-only; open it without readonly=True to append")
        return super().append(
            session_id, events, expected_version=expected_version, recorded_at=recorded_at, bounded=bounded
        )

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the store is closed, before its pool is (a writer's deferred catch-up
        of the projections). A StoreError it raises is not the close's: what it left undone is
        derived state, done by the next read of any process."""
        self.__dict__.setdefault("_before_close", []).append(hook)

    def close(self) -> None:
        hooks: list[Callable[[], None]] = self.__dict__.pop("_before_close", [])
        try:
            for hook in hooks:
                with contextlib.suppress(StoreError):
                    hook()
        finally:
            super().close()
