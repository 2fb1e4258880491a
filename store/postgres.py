"""The event log in a PostgreSQL schema, for many workers on many machines: a pool of connections
shared by a process's threads, appends serialized by an advisory lock and durable at commit, a
hash chain over every event identical to SQLite's, content-addressed blobs, immutability enforced
by the database, and versioned migrations.

The class is built in layers, one module each: the pool, migrations and transactions
(store.pg_connection), reads and verify (store.pg_reading) and appends (store.pg_append). psycopg
is imported only here, in store/: install the ``postgres`` extra."""

from __future__ import annotations

from turnlog.store.pg_append import PgAppendingStore
from turnlog.store.pg_connection import describe_server
from turnlog.store.pg_schema import LATEST_VERSION

__all__ = ["LATEST_VERSION", "PostgresStore", "describe_server"]


class PostgresStore(PgAppendingStore):
    """The event log in one PostgreSQL schema. Open it with :meth:`open`."""
