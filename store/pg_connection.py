"""Opening a PostgreSQL store: the server's URL, one schema per store, the connection pool its
threads share, the schema migrations, the transactions, and the translation of driver errors into
StoreErrors (callers never import psycopg)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Self

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from turnlog.store import determinism
from turnlog.store.append_rules import Segments, event_tokens
from turnlog.store.base import EventStore, TokenCounting, check_token_counting
from turnlog.store.chain import now
from turnlog.store.chain_migration import relink
from turnlog.store.errors import CorruptStoreError, StoreClosedError, StoreError, TokenizerError
from turnlog.store.events import Event
from turnlog.store.pg_chain import PgRelink
from turnlog.store.pg_schema import MIGRATIONS
from turnlog.store.schema import pending
from turnlog.store.tokenizer import DEFAULT_ENCODING, Tokenizer, lazy_tokenizer, load_tokenizer

# The pool logs a warning for each broken connection it discards: the StoreError the caller gets says
# it already, in one line. Without a handler of the application's, these would go to stderr.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

Connection = psycopg.Connection[tuple[Any, ...]]


def describe_server(url: str) -> str:
    """``PostgreSQL at HOST:PORT/DBNAME``: the server a URL names, without its password."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StoreError(f"{url.split('@')[-1]!r} is not a PostgreSQL URL: {_first_line(exc)}") from exc
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"PostgreSQL at {host}:{port}/{info.get('dbname') or info.get('user') or ''}"


class PostgresBase(EventStore):
    """The pool a store holds, its opening and closing, and its transactions; the layers of
    :class:`store.postgres.PostgresStore` (reading, appending) build on it."""

    def __init__(
        self, pool: ConnectionPool[Connection], where: str, schema: str, tokenizer: Tokenizer
    ) -> None:
        self._pool: ConnectionPool[Connection] | None = pool
        self.where = where
        self.path = where
        """Where the store is, as :class:`Store` names it (the server and schema, never the password)."""
        """The server and schema, for messages (never the password)."""
        self.schema = schema
        self.tokenizer = tokenizer
        self.lock_key = lock_key(schema)
        self.place_key = lock_key(f"{schema}/order")
        """The lock under which rows are placed in the global order (store.pg_chain)."""
        self.token_counting: TokenCounting = "inline"
        """When token counts are made: before the append's transaction, or after its commit
        ("deferred", store.pg_tokens)."""
        self.session_lock_space = self.lock_key & 0x7FFFFFFF
        """The first key of the sessions' advisory locks (the second is the session id's hashtext)."""
        self._lineages: dict[str, Segments] = {}
        self._close_lock = threading.Lock()
        self._salt: bytes | None = None

    @property
    def salt(self) -> bytes:
        """The store's salt (the key of its payload digests: store.chain)."""
        if self._salt is None:
            with self.connection() as conn:
                row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'salt'").fetchone()
            if row is None:
                raise CorruptStoreError(f"{self.where}: the store records no salt; run `turnlog verify`")
            self._salt = bytes.fromhex(row[0])
        return self._salt

    def adopt_salt(self, salt: bytes) -> None:
        with self.connection() as conn, translate(self.where), conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
            if conn.execute("SELECT 1 FROM event_log LIMIT 1").fetchone() is not None:
                raise StoreError(f"{self.where} holds events: its salt cannot change")
            conn.execute("UPDATE turnlog_meta SET value = %s WHERE key = 'salt'", (salt.hex(),))
        self._salt = salt

    @classmethod
    def open(
        cls,
        url: str,
        *,
        schema: str = "turnlog",
        create: bool = True,
        tokenizer: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        token_counting: TokenCounting = "inline",
    ) -> Self:
        """Open (and, with ``create``, create or migrate) the store in ``schema`` of the database
        ``url`` names (``postgresql://USER@HOST:PORT/DBNAME``).

        One PostgreSQL schema holds one store; the threads of a process share the store object and
        its pool of up to ``pool_size`` connections, and many processes may open the same store.
        ``tokenizer`` is as for SQLiteStore: a new store records it, an existing one must be opened
        with the same one or with None. ``token_counting``: ``"inline"`` (the default) counts an
        event's tokens before its append's transaction, so every row has its count from the start;
        ``"deferred"`` after the commit, at the next catch-up (store.pg_tokens): a durable append a
        few percent faster, for a writer that appends far more than it reads (a turn that appends
        then builds pays more on the server for filling the counts in than the append saves)."""
        check_token_counting(token_counting)
        if not isinstance(schema, str) or _SCHEMA.fullmatch(schema) is None:
            raise StoreError(
                f"schema name {schema!r} is invalid: use 1 to 63 lowercase letters, digits or _, "
                "not starting with a digit"
            )
        if pool_size < 1:
            raise StoreError(f"pool_size must be 1 or more, not {pool_size}")
        where = f"{describe_server(url)} (schema {schema})"
        kwargs: dict[str, Any] = {
            "autocommit": True,  # transactions are explicit: BEGIN ... COMMIT
            "connect_timeout": max(1, int(connect_timeout)),
            "application_name": "turnlog",
            # Every statement names its tables unqualified; commits wait for the WAL flush.
            "options": f"-c search_path={schema} -c synchronous_commit=on",
        }
        with translate(where):
            conn = psycopg.connect(url, **kwargs)
        try:
            with translate(where):
                recorded = _migrate(conn, where, schema, tokenizer or DEFAULT_ENCODING, create)
                salt = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'salt'").fetchone()
        finally:
            conn.close()
        if tokenizer is not None and tokenizer != recorded:
            raise TokenizerError(
                f"{where} counts tokens with {recorded!r}, not {tokenizer!r}; stored counts "
                f"would not match. Open it with tokenizer={recorded!r} (or none), or use a new schema"
            )
        loaded = lazy_tokenizer(recorded)
        pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            kwargs=kwargs,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            check=_check_if_idle,  # a connection the server ended is replaced
            name=f"turnlog-{schema}",
        )
        try:
            with translate(where):
                pool.open(wait=True, timeout=connect_timeout)
        except BaseException:
            pool.close()  # its workers stop: nothing is left trying to connect
            raise
        store = cls(pool, where, schema, loaded)
        store.token_counting = token_counting
        store._salt = bytes.fromhex(salt[0]) if salt else None
        return store

    def count_event_tokens(self, event: Event) -> int:
        """The tokens an event adds, with this store's tokenizer (see store.append_rules.event_tokens)."""
        return event_tokens(self.tokenizer, event)

    def close(self) -> None:
        with self._close_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    @property
    def pool(self) -> ConnectionPool[Connection]:
        if self._pool is None:
            raise StoreClosedError("the store is closed")
        return self._pool

    # --- connections and transactions ----------------------------------------------------------

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection of the pool, in autocommit mode (one statement, one transaction)."""
        with translate(self.where), self.pool.connection() as conn:
            try:
                yield conn
            finally:
                _LAST_USED[conn] = time.monotonic()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A consistent read (one snapshot) across several statements."""
        with self.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.execute("ROLLBACK")


CHECK_AFTER_IDLE = 2.0
"""A pooled connection idle for longer than this (seconds) is checked before it is handed out."""

_LAST_USED: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()


def _check_if_idle(conn: Connection) -> None:
    """The pool's check of a connection before it hands it out: a round trip, so only for one
    idle long enough that the server may have ended it (a restart, pg_terminate_backend, an idle
    timeout); a connection lost in use fails that use with a clear StoreError, and is replaced."""
    if time.monotonic() - _LAST_USED.get(conn, 0.0) > CHECK_AFTER_IDLE:
        ConnectionPool.check_connection(conn)


def lock_key(schema: str) -> int:
    """The advisory lock key of a store: a signed 64-bit number from its schema name."""
    return int.from_bytes(hashlib.sha256(f"turnlog:{schema}".encode()).digest()[:8], "big", signed=True)


def _first_line(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def translated(exc: psycopg.Error, where: str, lost: str = "retry") -> StoreError:
    """A driver error as the StoreError callers see: one line naming the server."""
    text = _first_line(exc)
    if isinstance(exc, PoolTimeout):
        return StoreError(
            f"{where}: no connection of the pool came free in time ({text}); retry, or open the store "
            "with a larger pool_size"
        )
    if "turnlog:" in text and "immutable" in text:  # the refusal of the log's own triggers
        return StoreError(text)
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled):
        return StoreError(f"{where}: the connection to the server failed or was lost ({text}); {lost}")
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return CorruptStoreError(f"{where} is not a turnlog store, or was damaged: {text}")
    if isinstance(exc, (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)):
        return StoreError(f"{where}: {text}; {_WRITES_TO_READ}")
    return StoreError(f"{where}: {text}")


_WRITES_TO_READ = (
    "turnlog writes to its schema even to read (opening checks its tables with CREATE TABLE IF NOT "
    "EXISTS, and a read catches the projections and token counts up in the database), so it needs a "
    "role that may create tables in the schema and write to them, on a server that accepts writes "
    "(not a read-only standby or transaction)"
)


class translate:
    """Driver errors become StoreErrors here, at the boundary; ``lost`` says what to do when the
    connection is lost (what the caller was doing decides)."""

    __slots__ = ("lost", "where")

    def __init__(self, where: str, lost: str = "retry") -> None:
        self.where = where
        self.lost = lost

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, psycopg.Error):
            raise translated(exc, self.where, self.lost) from exc


def _migrate(conn: Connection, where: str, schema: str, tokenizer: str, create: bool) -> str:
    """Create or upgrade the store's schema under its advisory lock (several processes may open a
    new store at once); return the tokenizer the store records."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        tables = {
            row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        }
        if tables and "turnlog_migrations" not in tables:
            raise CorruptStoreError(
                f"{where} holds tables that are not a turnlog store ({', '.join(sorted(tables)[:5])}); "
                "choose another schema"
            )
        if not tables and not create:
            raise StoreError(f"{where} holds no turnlog store; open it with create=True to make one")
        if exists is None:
            conn.execute(f"CREATE SCHEMA {schema}")  # the name was checked: lowercase, digits, _
            conn.execute(f"COMMENT ON SCHEMA {schema} IS 'turnlog: one event store'")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS turnlog_migrations (version integer "
            "CONSTRAINT turnlog_migrations_pkey PRIMARY KEY, name text NOT NULL, applied_at text NOT NULL)"
        )
        applied = [row[0] for row in conn.execute("SELECT version FROM turnlog_migrations")]
        for migration in pending(MIGRATIONS, applied, where):
            conn.execute(migration.sql.encode())  # no parameters: the simple protocol runs them all
            if migration.relink:
                relink(PgRelink(conn), where)
            if migration.after:
                conn.execute(migration.after.encode())
            conn.execute(
                "INSERT INTO turnlog_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.name, now()),
            )
        row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokenizer'").fetchone()
        if row is None:
            load_tokenizer(tokenizer)  # raises (and rolls back) before an unusable name is recorded
            conn.execute(
                "INSERT INTO turnlog_meta (key, value) VALUES ('tokenizer', %s), ('created_at', %s), "
                "('store_id', %s)",
                (tokenizer, now(), determinism.token_hex(16)),
            )
            recorded = tokenizer
        else:
            recorded = row[0]
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed:
            conn.execute("ROLLBACK")
        raise
    return str(recorded)


def suppress_closed(function: Callable[[], object]) -> None:
    """Run ``function``, ignoring a connection that is already gone (cleanup after a failure)."""
    with contextlib.suppress(psycopg.Error):
        function()
