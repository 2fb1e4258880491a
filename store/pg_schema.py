"""The PostgreSQL schema of the log, as numbered migrations recorded in the store's own schema
(``turnlog_migrations``), the same mechanism as store.schema for SQLite.

One PostgreSQL schema holds one store. The tables mirror SQLite's, with what a DBA expects: named
constraints, ``bigint`` positions and versions, comments, and immutability enforced by the database
itself (triggers refusing UPDATE, DELETE and TRUNCATE on events and blobs; verify checks that they
are all there and enabled). Token counts are made before the append's transaction, so an event row
is complete when inserted and never changes. Migrations are append-only: a released one is never
edited, a change is a new one."""

from __future__ import annotations

from turnlog.store.limits import MAX_TOKENS
from turnlog.store.schema import Migration

TRIGGERS: dict[str, tuple[str, str]] = {
    "events_no_update": ("events", "UPDATE"),
    "events_no_delete": ("events", "DELETE"),
    "events_no_truncate": ("events", "TRUNCATE"),
    "blobs_no_update": ("blobs", "UPDATE"),
    "blobs_no_delete": ("blobs", "DELETE"),
    "blobs_no_truncate": ("blobs", "TRUNCATE"),
}
"""Every immutability trigger of a current store: name -> (table, operation refused)."""

REFUSE_FUNCTION = "turnlog_refuse_change"


def _trigger(name: str, table: str, operation: str) -> str:
    what = "events" if table == "events" else "content blobs"
    each = "STATEMENT" if operation == "TRUNCATE" else "ROW"
    return (
        f"CREATE TRIGGER {name} BEFORE {operation} ON {table} FOR EACH {each} "
        f"EXECUTE FUNCTION {REFUSE_FUNCTION}('{what}');\n"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event log",
        f"""
CREATE TABLE turnlog_meta (
    key text CONSTRAINT turnlog_meta_pkey PRIMARY KEY,
    value text NOT NULL
);
COMMENT ON TABLE turnlog_meta IS 'turnlog: facts of the store (tokenizer, store id, creation time)';

CREATE TABLE blobs (
    id text CONSTRAINT blobs_pkey PRIMARY KEY
        CONSTRAINT blobs_id_is_sha256 CHECK (id ~ '^[0-9a-f]{{64}}$'),
    size bigint NOT NULL CONSTRAINT blobs_size_not_negative CHECK (size >= 0),
    codec text NOT NULL CONSTRAINT blobs_codec_known CHECK (codec IN ('raw', 'zlib', 'zstd')),
    data bytea NOT NULL
);
COMMENT ON TABLE blobs IS
    'turnlog: content kept apart from events (large tool outputs, artifacts, state), addressed by '
    'the sha256 of its UTF-8 text; immutable';

-- Ids and types compare and sort by code point (COLLATE "C"), as on SQLite, whatever the
-- database's locale: listings ordered by them read the same on both backends.
CREATE TABLE events (
    position bigint CONSTRAINT events_pkey PRIMARY KEY
        CONSTRAINT events_position_positive CHECK (position >= 1),
    session_id text COLLATE "C" NOT NULL,
    version bigint NOT NULL CONSTRAINT events_version_positive CHECK (version >= 1),
    event_id text COLLATE "C" NOT NULL CONSTRAINT events_event_id_key UNIQUE,
    type text COLLATE "C" NOT NULL,
    schema_version integer NOT NULL,
    payload text NOT NULL,
    blob_id text CONSTRAINT events_blob_id_fkey REFERENCES blobs (id),
    tokens bigint NOT NULL CONSTRAINT events_tokens_in_range CHECK (tokens BETWEEN 0 AND {MAX_TOKENS}),
    recorded_at text NOT NULL,
    prev_hash text NOT NULL,
    hash text NOT NULL,
    -- Also the index of every read by session (session_id, version ranges).
    CONSTRAINT events_session_version_key UNIQUE (session_id, version)
);
COMMENT ON TABLE events IS
    'turnlog: the append-only, hash-chained event log; immutable (see turnlog verify)';
COMMENT ON COLUMN events.position IS 'global position, 1, 2, 3, ... with no gaps';
COMMENT ON COLUMN events.payload IS
    'the event as JSON text, without its envelope columns: the exact text that is hashed';
COMMENT ON COLUMN events.recorded_at IS 'UTC, ISO 8601 with microseconds, as hashed';
COMMENT ON COLUMN events.hash IS 'sha256 of the event and prev_hash (the chain verify checks)';

CREATE FUNCTION {REFUSE_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'turnlog: % are immutable; % is refused', TG_ARGV[0], TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
COMMENT ON FUNCTION {REFUSE_FUNCTION}() IS 'turnlog: refuses every change to the log';
"""
        + "".join(_trigger(name, table, op) for name, (table, op) in TRIGGERS.items()),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version
