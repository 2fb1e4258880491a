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

# Migration 5: read-only SQL views that show the log as text (for Datasette, or any SQL client):
# payloads are JSON text and large contents sit in blobs, so a browser showed JSON and <Binary>.
# Views are no events: the log and its immutability triggers are untouched. Content kept in a blob
# shows as text while raw (under 32 KB); a compressed one (zstd) shows NULL, with its blob id.
_CONTENT = (
    "coalesce(json_extract(e.payload, '$.content'), CASE b.codec WHEN 'raw' THEN CAST(b.data AS TEXT) END)"
)
VIEWS: dict[str, str] = {
    "messages": f"""CREATE VIEW messages AS
SELECT e.position, e.session_id AS session, e.version, json_extract(e.payload, '$.role') AS role,
    {_CONTENT} AS text, json_extract(e.payload, '$.name') AS name,
    json_array_length(e.payload, '$.tool_calls') AS tool_calls, e.tokens, e.recorded_at, e.event_id
FROM events e LEFT JOIN blobs b ON b.id = e.blob_id
WHERE e.type = 'message_appended'""",
    "tool_returns": f"""CREATE VIEW tool_returns AS
SELECT e.position, e.session_id AS session, e.version,
    json_extract(e.payload, '$.tool_call_id') AS tool_call_id,
    json_extract(e.payload, '$.tool_name') AS tool_name,
    coalesce(json_extract(e.payload, '$.is_error'), 0) AS is_error, {_CONTENT} AS text,
    coalesce(b.size, length(CAST(json_extract(e.payload, '$.content') AS BLOB))) AS bytes,
    e.blob_id, e.tokens, e.recorded_at, e.event_id
FROM events e LEFT JOIN blobs b ON b.id = e.blob_id
WHERE e.type = 'tool_returned'""",
    "tool_calls": """CREATE VIEW tool_calls AS
SELECT e.position, e.session_id AS session, e.version, json_extract(c.value, '$.id') AS tool_call_id,
    json_extract(c.value, '$.name') AS tool_name, json_extract(c.value, '$.arguments') AS arguments,
    r.position AS return_position, r.is_error, r.text AS output, r.bytes AS output_bytes,
    e.recorded_at, e.event_id
FROM events e JOIN json_each(e.payload, '$.tool_calls') c
LEFT JOIN tool_returns r ON r.session = e.session_id AND r.tool_call_id = json_extract(c.value, '$.id')
WHERE e.type = 'message_appended' AND json_type(e.payload, '$.tool_calls') = 'array'""",
    "usage": """CREATE VIEW usage AS
SELECT e.position, e.session_id AS session, e.version, json_extract(e.payload, '$.model') AS model,
    json_extract(e.payload, '$.input_tokens') AS input_tokens,
    json_extract(e.payload, '$.output_tokens') AS output_tokens,
    coalesce(json_extract(e.payload, '$.cache_read_tokens'), 0) AS cache_read_tokens,
    coalesce(json_extract(e.payload, '$.cache_write_tokens'), 0) AS cache_write_tokens,
    coalesce(json_extract(e.payload, '$.reasoning_tokens'), 0) AS reasoning_tokens,
    json_extract(e.payload, '$.cost_usd') AS cost_usd,
    coalesce(json_extract(e.payload, '$.scope'), 'call') AS scope,
    json_extract(e.payload, '$.calls') AS calls, json_extract(e.payload, '$.run_id') AS run_id,
    json_extract(e.payload, '$.call_event_id') AS call_event_id,
    json_extract(e.payload, '$.source') AS source, substr(e.recorded_at, 1, 10) AS day, e.recorded_at,
    e.event_id
FROM events e
WHERE e.type = 'usage_recorded'""",
}
"""Every view of a current store, by name, exactly as created (released: never edited)."""

MIGRATIONS += (
    Migration(5, "views showing the log as text", "".join(f"\n{sql};\n" for sql in VIEWS.values())),
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
