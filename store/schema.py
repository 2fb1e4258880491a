"""The SQLite schema of the log, as numbered migrations recorded in the file itself.

Tables are created explicitly (``STRICT``, named constraints), never inferred from a first insert.
Migrations are append-only: a released one is never edited, a change is a new one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from turnlog.store.errors import CorruptStoreError


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str
    relink: bool = False
    """Re-hash the log under the v2 chain after ``sql`` (store.chain_migration), then run ``after``."""
    after: str = ""


_IMMUTABLE_EVENTS = """
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'turnlog: events are immutable; DELETE is refused');
END;

-- The one update allowed: filling in a token count that was deferred at append time.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN NOT (
    OLD.tokens IS NULL AND NEW.tokens IS NOT NULL
    AND NEW.position IS OLD.position AND NEW.session_id IS OLD.session_id
    AND NEW.version IS OLD.version AND NEW.event_id IS OLD.event_id
    AND NEW.type IS OLD.type AND NEW.schema_version IS OLD.schema_version
    AND NEW.payload IS OLD.payload AND NEW.blob_id IS OLD.blob_id
    AND NEW.recorded_at IS OLD.recorded_at AND NEW.prev_hash IS OLD.prev_hash
    AND NEW.hash IS OLD.hash
)
BEGIN
    SELECT RAISE(ABORT, 'turnlog: events are immutable; UPDATE is refused');
END;

"""

_IMMUTABLE_BLOBS = """
CREATE TRIGGER blobs_no_delete BEFORE DELETE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'turnlog: content blobs are immutable; DELETE is refused');
END;

CREATE TRIGGER blobs_no_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'turnlog: content blobs are immutable; UPDATE is refused');
END;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event log",
        """
CREATE TABLE turnlog_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE blobs (
    id TEXT PRIMARY KEY,                -- sha256 hex of the UTF-8 text
    size INTEGER NOT NULL,              -- bytes of the UTF-8 text
    codec TEXT NOT NULL CHECK (codec IN ('raw', 'zlib')),
    data BLOB NOT NULL
) STRICT;

CREATE TABLE events (
    position INTEGER PRIMARY KEY,       -- explicit rowid alias: VACUUM cannot renumber it
    session_id TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    payload TEXT NOT NULL,              -- JSON, without the envelope columns
    blob_id TEXT REFERENCES blobs(id),  -- content kept apart (large tool output, artifact)
    tokens INTEGER,                     -- NULL until counted (deferred counting)
    recorded_at TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    UNIQUE (session_id, version)
) STRICT;
"""
        + _IMMUTABLE_EVENTS
        + _IMMUTABLE_BLOBS,
    ),
    # zstd for large blobs: about 3x faster than zlib both ways here, and smaller. SQLite cannot
    # change a CHECK constraint in place, so the table is rebuilt (rowids kept) and its triggers
    # made anew; zlib blobs already stored stay readable.
    Migration(
        2,
        "zstd blob codec",
        """
CREATE TABLE blobs_v2 (
    id TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    codec TEXT NOT NULL CHECK (codec IN ('raw', 'zlib', 'zstd')),
    data BLOB NOT NULL
) STRICT;

INSERT INTO blobs_v2 (rowid, id, size, codec, data) SELECT rowid, id, size, codec, data FROM blobs;

DROP TABLE blobs;

ALTER TABLE blobs_v2 RENAME TO blobs;
"""
        + _IMMUTABLE_BLOBS,
    ),
)

# Migration 3 makes immutability airtight. REPLACE (``INSERT OR REPLACE``, ``REPLACE INTO``) deletes the
# row it conflicts with without firing DELETE triggers (unless the writer turned recursive_triggers
# on), so a BEFORE INSERT trigger refuses any insert that would meet a stored position, event id or
# session version (append never does: it reads the head inside its write transaction, and an event
# id already stored is an idempotent retry it handles; the message names events.event_id for it). A
# blob insert that meets a stored id is ignored (RAISE(IGNORE)), as append's INSERT OR IGNORE wants:
# a REPLACE cannot swap a blob's bytes. The deferred token count may go from NULL to a count in range,
# and nothing else may change. verify compares the stored trigger SQL with TRIGGERS.
_TRIGGERS_V3: dict[str, str] = {
    "events_no_delete": """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'turnlog: events are immutable; DELETE is refused');
END""",
    "events_no_update": """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN NOT (
    OLD.tokens IS NULL AND NEW.tokens IS NOT NULL
    AND typeof(NEW.tokens) = 'integer' AND NEW.tokens BETWEEN 0 AND 4294967295
    AND NEW.position IS OLD.position AND NEW.session_id IS OLD.session_id
    AND NEW.version IS OLD.version AND NEW.event_id IS OLD.event_id
    AND NEW.type IS OLD.type AND NEW.schema_version IS OLD.schema_version
    AND NEW.payload IS OLD.payload AND NEW.blob_id IS OLD.blob_id
    AND NEW.recorded_at IS OLD.recorded_at AND NEW.prev_hash IS OLD.prev_hash
    AND NEW.hash IS OLD.hash
)
BEGIN
    SELECT RAISE(ABORT,
        'turnlog: events are immutable; UPDATE is refused (only a missing token count may be filled in)');
END""",
    "events_no_replace_id": """CREATE TRIGGER events_no_replace_id BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE event_id = NEW.event_id)
BEGIN
    SELECT RAISE(ABORT,
        'turnlog: events are immutable; an event with this id (events.event_id) is stored');
END""",
    "events_no_replace": """CREATE TRIGGER events_no_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE position = NEW.position)
    OR EXISTS (SELECT 1 FROM events WHERE session_id = NEW.session_id AND version = NEW.version)
BEGIN
    SELECT RAISE(ABORT,
        'turnlog: events are immutable; an event at this position or session version is stored');
END""",
    "blobs_no_delete": """CREATE TRIGGER blobs_no_delete BEFORE DELETE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'turnlog: content blobs are immutable; DELETE is refused');
END""",
    "blobs_no_update": """CREATE TRIGGER blobs_no_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'turnlog: content blobs are immutable; UPDATE is refused');
END""",
    "blobs_no_replace": """CREATE TRIGGER blobs_no_replace BEFORE INSERT ON blobs
WHEN EXISTS (SELECT 1 FROM blobs WHERE id = NEW.id)
BEGIN
    SELECT RAISE(IGNORE);
END""",
}
"""The triggers migration 3 created (released: never edited)."""

MIGRATIONS += (
    Migration(
        3,
        "immutability against REPLACE",
        "\n".join(f"DROP TRIGGER IF EXISTS {name};" for name in _TRIGGERS_V3)
        + "\n"
        + "".join(f"\n{sql};\n" for sql in _TRIGGERS_V3.values()),
    ),
)

# Migration 4 (the v2 chain): the payload's digest and the order chain get columns of their own, and
# no UPDATE may change them (nor any other column but a missing token count).
TRIGGERS: dict[str, str] = dict(
    _TRIGGERS_V3,
    events_no_update="""CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN NOT (
    OLD.tokens IS NULL AND NEW.tokens IS NOT NULL
    AND typeof(NEW.tokens) = 'integer' AND NEW.tokens BETWEEN 0 AND 4294967295
    AND NEW.position IS OLD.position AND NEW.session_id IS OLD.session_id
    AND NEW.version IS OLD.version AND NEW.event_id IS OLD.event_id
    AND NEW.type IS OLD.type AND NEW.schema_version IS OLD.schema_version
    AND NEW.payload IS OLD.payload AND NEW.blob_id IS OLD.blob_id
    AND NEW.recorded_at IS OLD.recorded_at AND NEW.prev_hash IS OLD.prev_hash
    AND NEW.hash IS OLD.hash AND NEW.payload_digest IS OLD.payload_digest
    AND NEW.order_hash IS OLD.order_hash
)
BEGIN
    SELECT RAISE(ABORT,
        'turnlog: events are immutable; UPDATE is refused (only a missing token count may be filled in)');
END""",
)
"""Every trigger of a current store, by name, exactly as created (verify checks them)."""

MIGRATIONS += (
    Migration(
        4,
        "v2 hash chain: per-session chains, payload digests, the order chain",
        "DROP TRIGGER IF EXISTS events_no_update;\n"
        "ALTER TABLE events ADD COLUMN payload_digest TEXT;\n"
        "ALTER TABLE events ADD COLUMN order_hash TEXT;\n",
        relink=True,
        after=f"\n{TRIGGERS['events_no_update']};\n",
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def pending(migrations: Sequence[Migration], applied: Iterable[int], where: str) -> list[Migration]:
    """The migrations a store still needs, in order; CorruptStoreError for a store of a newer
    schema than ``migrations`` know (the same rule for every backend)."""
    done = set(applied)
    newest, latest = max(done, default=0), migrations[-1].version
    if newest > latest:
        raise CorruptStoreError(
            f"{where} has schema version {newest}, newer than this turnlog knows ({latest}); upgrade turnlog"
        )
    return [migration for migration in migrations if migration.version not in done]
