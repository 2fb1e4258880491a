"""The PostgreSQL schema of the log, as numbered migrations recorded in the store's own schema
(``turnlog_migrations``), the same mechanism as store.schema for SQLite.

One PostgreSQL schema holds one store. The tables mirror SQLite's, with what a DBA expects: named
constraints, ``bigint`` positions and versions, comments, and immutability enforced by the database
itself (triggers refusing UPDATE, DELETE and TRUNCATE on events and blobs; verify checks that they
are all there and enabled). A row changes at most twice, each once and each checked by the update
trigger: placed in the global order (position and order hash), and given its token count when that
was deferred past the commit (migration 4), as on SQLite. Migrations are append-only: a released one is never
edited, a change is a new one."""

from __future__ import annotations

from turnlog.store.limits import MAX_TOKENS
from turnlog.store.schema import Migration

_TRIGGERS_V1: dict[str, tuple[str, str]] = {
    "events_no_update": ("events", "UPDATE"),
    "events_no_delete": ("events", "DELETE"),
    "events_no_truncate": ("events", "TRUNCATE"),
    "blobs_no_update": ("blobs", "UPDATE"),
    "blobs_no_delete": ("blobs", "DELETE"),
    "blobs_no_truncate": ("blobs", "TRUNCATE"),
}

REFUSE_FUNCTION = "turnlog_refuse_change"
ORDER_ONLY_FUNCTION = "turnlog_order_only"
PLACE_FUNCTION = "turnlog_place"
APPEND_PROCEDURE = "turnlog_append_sequenced"
ROW_FIELDS = 12
"""The fields of a row :data:`APPEND_PROCEDURE` takes, in store.chain.INSERT_COLUMNS' order without
the position and the order hash (the server's), as text."""

TRIGGERS: dict[str, tuple[str, str, str]] = {
    "events_no_update": ("event_log", "UPDATE", ORDER_ONLY_FUNCTION),
    "events_no_delete": ("event_log", "DELETE", REFUSE_FUNCTION),
    "events_no_truncate": ("event_log", "TRUNCATE", REFUSE_FUNCTION),
    "blobs_no_update": ("blobs", "UPDATE", REFUSE_FUNCTION),
    "blobs_no_delete": ("blobs", "DELETE", REFUSE_FUNCTION),
    "blobs_no_truncate": ("blobs", "TRUNCATE", REFUSE_FUNCTION),
}
"""Every immutability trigger of a current store: name -> (table, operation refused, its function)."""

EVENT_TABLE = "event_log"
"""The table appends insert into; readers read the view ``events`` (the events placed in the order)."""


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
        + "".join(_trigger(name, table, op) for name, (table, op) in _TRIGGERS_V1.items()),
    ),
)

_COLUMNS = (
    "position, session_id, version, event_id, type, schema_version, payload, blob_id, tokens, "
    "recorded_at, prev_hash, hash, payload_digest, order_hash"
)

# Migration 2, the v2 chain: writers of different sessions no longer share a head. A row is inserted
# without a place in the global order (position and order_hash NULL) when another writer is placing
# rows; the writer places it right after its commit (store.pg_append). The physical table becomes
# event_log; the view events shows the placed rows only, so every reader sees a gapless prefix.
MIGRATIONS += (
    Migration(
        2,
        "v2 hash chain: per-session chains, payload digests, the order chain placed after commit",
        f"""
DROP TRIGGER events_no_update ON events;
ALTER TABLE events RENAME TO event_log;
ALTER TABLE event_log
    ADD COLUMN payload_digest text,
    ADD COLUMN order_hash text,
    ADD COLUMN row_id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE event_log DROP CONSTRAINT events_pkey;
ALTER TABLE event_log ALTER COLUMN position DROP NOT NULL;
ALTER TABLE event_log ADD CONSTRAINT event_log_pkey PRIMARY KEY (row_id);
ALTER TABLE event_log ADD CONSTRAINT events_position_key UNIQUE (position);
CREATE INDEX event_log_unplaced ON event_log (row_id) WHERE position IS NULL;
COMMENT ON TABLE event_log IS
    'turnlog: the append-only, hash-chained event log; immutable but for placing a row in the order '
    'once (see turnlog verify). Read the view events';
COMMENT ON COLUMN event_log.position IS
    'global position, 1, 2, 3, ... with no gaps; NULL for the moment between a commit and its placing';
COMMENT ON COLUMN event_log.prev_hash IS 'hash of the session''s previous event (a fork: its parent''s)';
COMMENT ON COLUMN event_log.hash IS 'sha256 of the event''s fields, payload_digest and prev_hash (v2)';
COMMENT ON COLUMN event_log.payload_digest IS 'HMAC-SHA256 of the payload under the store''s salt';
COMMENT ON COLUMN event_log.order_hash IS 'sha256 of the previous position''s order_hash, position and hash';
COMMENT ON COLUMN event_log.row_id IS 'insertion order: rows are placed in it';
CREATE VIEW events AS SELECT {_COLUMNS} FROM event_log WHERE position IS NOT NULL;
COMMENT ON VIEW events IS 'turnlog: the events placed in the global order (what every reader reads)';
""",
        relink=True,
        after=f"""
ALTER TABLE event_log ALTER COLUMN payload_digest SET NOT NULL;
ALTER TABLE event_log ADD CONSTRAINT event_log_placed_whole
    CHECK ((position IS NULL) = (order_hash IS NULL));
CREATE FUNCTION {ORDER_ONLY_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.position IS NULL AND NEW.position IS NOT NULL
        AND (NEW.row_id, NEW.session_id, NEW.version, NEW.event_id, NEW.type, NEW.schema_version,
             NEW.payload, NEW.blob_id, NEW.tokens, NEW.recorded_at, NEW.prev_hash, NEW.hash,
             NEW.payload_digest)
        IS NOT DISTINCT FROM
            (OLD.row_id, OLD.session_id, OLD.version, OLD.event_id, OLD.type, OLD.schema_version,
             OLD.payload, OLD.blob_id, OLD.tokens, OLD.recorded_at, OLD.prev_hash, OLD.hash,
             OLD.payload_digest)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'turnlog: events are immutable; UPDATE is refused (only an unplaced row may be placed)'
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
COMMENT ON FUNCTION {ORDER_ONLY_FUNCTION}() IS
    'turnlog: refuses every change to the log but placing a row in the order once';
CREATE TRIGGER events_no_update BEFORE UPDATE ON event_log FOR EACH ROW
    EXECUTE FUNCTION {ORDER_ONLY_FUNCTION}();
CREATE FUNCTION {PLACE_FUNCTION}(place_key bigint, ids text[])
    RETURNS TABLE (placed_id text, placed_position bigint, placed_order text) LANGUAGE plpgsql AS $$
DECLARE
    last_position bigint;
    last_order text;
    waiting record;
BEGIN
    PERFORM pg_advisory_xact_lock(place_key);
    SELECT l.position, l.order_hash INTO last_position, last_order FROM event_log l
        WHERE l.position IS NOT NULL ORDER BY l.position DESC LIMIT 1;
    IF last_position IS NULL THEN
        last_position := 0;
        last_order := repeat('0', 64);
    END IF;
    FOR waiting IN SELECT l.row_id, l.hash FROM event_log l WHERE l.position IS NULL ORDER BY l.row_id LOOP
        last_position := last_position + 1;
        last_order := encode(sha256(convert_to(
            'turnlog-order-v2;' || length(last_order) || ':' || last_order || ';'
            || length(last_position::text) || ':' || last_position || ';'
            || length(waiting.hash) || ':' || waiting.hash || ';', 'UTF8')), 'hex');
        UPDATE event_log SET position = last_position, order_hash = last_order
            WHERE row_id = waiting.row_id;
    END LOOP;
    RETURN QUERY SELECT l.event_id::text, l.position, l.order_hash FROM event_log l
        WHERE l.event_id = ANY(ids);
    RETURN QUERY SELECT NULL::text, last_position, last_order;
END
$$;
COMMENT ON FUNCTION {PLACE_FUNCTION}(bigint, text[]) IS
    'turnlog: places every committed unplaced row in the order (under the placing lock), as '
    'store/pg_chain.py describes; returns the rows of ids, then the last position and order hash';
""",
    ),
)

# Migration 3: the contended append in one call (store.pg_sequenced). A procedure may commit: its
# first transaction checks the session's head, places the batch after the order's head under the
# placing lock and commits without waiting for the disk (the lock is held for CPU time only, never
# through a flush); its second writes one WAL record and commits with the session's
# synchronous_commit, so the call returns once both are durable. One round trip and one statement
# where two were sent, and the head is read in a snapshot taken after the session's lock (a
# statement's own snapshot is taken before its locks).
_ROW = [f"r[k + {i}]" for i in range(1, ROW_FIELDS + 1)]
MIGRATIONS += (
    Migration(
        3,
        "the contended append in one call: placed, committed without a flush, then flushed",
        f"""
CREATE PROCEDURE {APPEND_PROCEDURE}(
    session_space integer, sid text, head_version bigint, head_hash text, place_key bigint,
    r text[], blob_fields text[], blob_data bytea[], INOUT first_position bigint, INOUT last_order text)
LANGUAGE plpgsql AS $$
DECLARE
    found_version bigint;
    found_hash text;
    pos bigint;
    ord text;
    k integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF NOT pg_try_advisory_xact_lock(session_space, hashtext(sid)) THEN
        RAISE EXCEPTION 'turnlog: one-round-trip append: the session''s lock is taken'
            USING ERRCODE = 'invalid_text_representation';
    END IF;
    SELECT l.version, l.hash INTO found_version, found_hash FROM event_log l
        WHERE l.session_id = sid ORDER BY l.version DESC LIMIT 1;
    IF found_version IS DISTINCT FROM head_version OR found_hash IS DISTINCT FROM head_hash THEN
        RAISE EXCEPTION 'turnlog: one-round-trip append: the session''s head moved'
            USING ERRCODE = 'invalid_text_representation';
    END IF;
    PERFORM pg_advisory_xact_lock(place_key);
    IF EXISTS (SELECT 1 FROM event_log l WHERE l.position IS NULL) THEN
        SELECT p.placed_position, p.placed_order INTO pos, ord
            FROM {PLACE_FUNCTION}(place_key, '{{}}'::text[]) AS p WHERE p.placed_id IS NULL;
    ELSE
        SELECT l.position, l.order_hash INTO pos, ord FROM event_log l
            WHERE l.position IS NOT NULL ORDER BY l.position DESC LIMIT 1;
        IF pos IS NULL THEN
            pos := 0;
            ord := repeat('0', 64);
        END IF;
    END IF;
    -- The placing lock is waited for before any insert (never while holding a row another
    -- writer's insert, under that lock, could wait for: a blob of the same content).
    IF cardinality(blob_data) > 0 THEN
        INSERT INTO blobs (id, size, codec, data)
            SELECT blob_fields[3 * b - 2], blob_fields[3 * b - 1]::bigint, blob_fields[3 * b], blob_data[b]
            FROM generate_series(1, cardinality(blob_data)) AS b
            ON CONFLICT (id) DO NOTHING;
    END IF;
    first_position := pos + 1;
    k := 0;
    WHILE k < cardinality(r) LOOP
        pos := pos + 1;
        ord := encode(sha256(convert_to(
            'turnlog-order-v2;' || length(ord) || ':' || ord || ';'
            || length(pos::text) || ':' || pos || ';'
            || length(r[k + 11]) || ':' || r[k + 11] || ';', 'UTF8')), 'hex');
        INSERT INTO event_log ({_COLUMNS}) VALUES (pos, {_ROW[0]}, {_ROW[1]}::bigint, {_ROW[2]}, {_ROW[3]},
            {_ROW[4]}::integer, {_ROW[5]}, {_ROW[6]}, {_ROW[7]}::bigint, {_ROW[8]}, {_ROW[9]}, {_ROW[10]},
            {_ROW[11]}, ord);
        k := k + {ROW_FIELDS};
    END LOOP;
    last_order := ord;
    COMMIT;
    PERFORM pg_logical_emit_message(true, 'turnlog', 'placed');
END
$$;
COMMENT ON PROCEDURE {APPEND_PROCEDURE}(integer, text, bigint, text, bigint, text[], text[], bytea[],
    bigint, text) IS
    'turnlog: a contended append (store/pg_sequenced.py): checks the session''s head, places the rows '
    'after the order''s head, commits without a flush, then waits for one; returns the first '
    'position and the last order hash';
""",
    ),
)

# Migration 4: token counts may be made after the commit, as on SQLite (``token_counting="deferred"``,
# store.pg_tokens; counting before the transaction stays the default here). Such an append's durable
# commit is its rows alone, with NULL counts; the next catch-up (any process's read, or the writer's
# close) counts what waits and fills the counts in. The update trigger lets a row's NULL count become
# a count once, nothing else with it; placing stays as it was.
_ENVELOPE = (
    "row_id",
    "session_id",
    "version",
    "event_id",
    "type",
    "schema_version",
    "payload",
    "blob_id",
    "recorded_at",
    "prev_hash",
    "hash",
    "payload_digest",
)
_SAME_ENVELOPE = (
    f"({', '.join('NEW.' + c for c in _ENVELOPE)})\n        IS NOT DISTINCT FROM "
    f"({', '.join('OLD.' + c for c in _ENVELOPE)})"
)
_PLACED = "OLD.position IS NULL AND NEW.position IS NOT NULL AND NEW.tokens IS NOT DISTINCT FROM OLD.tokens"
"""Placed in the order once, its count as it was."""
_COUNTED = (
    "OLD.tokens IS NULL AND NEW.tokens IS NOT NULL\n"
    "        AND (NEW.position, NEW.order_hash) IS NOT DISTINCT FROM (OLD.position, OLD.order_hash)"
)
"""Its count filled in once, its place as it was."""
MIGRATIONS += (
    Migration(
        4,
        "token counts made after the commit (a NULL count filled in once), as on SQLite",
        f"""
ALTER TABLE event_log ALTER COLUMN tokens DROP NOT NULL;
COMMENT ON COLUMN event_log.tokens IS
    'tokens the event adds to a context, with the store''s tokenizer; with token_counting="deferred", '
    'NULL from the commit until the next catch-up counts it (then set once)';
-- The rows still waiting for their count, and only they: with no count to make (counting inline, the
-- default) it stays empty, and "every event up to here has its count" is one probe of it.
CREATE INDEX event_log_uncounted ON event_log (position) WHERE tokens IS NULL;
CREATE OR REPLACE FUNCTION {ORDER_ONLY_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF {_SAME_ENVELOPE}
        AND (({_PLACED}) OR ({_COUNTED}))
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'turnlog: events are immutable; UPDATE is refused (only placing or counting once)'
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
COMMENT ON FUNCTION {ORDER_ONLY_FUNCTION}() IS
    'turnlog: refuses every change to the log but placing a row in the order once and filling in '
    'its token count once';
-- The allowed updates are told apart by the trigger's WHEN, an expression the server evaluates
-- without calling PL/pgSQL for each row placed or counted; the function, called for every other
-- update, checks the same again and refuses.
DROP TRIGGER events_no_update ON event_log;
CREATE TRIGGER events_no_update BEFORE UPDATE ON event_log FOR EACH ROW
    WHEN (NOT ({_SAME_ENVELOPE}
        AND (({_PLACED}) OR ({_COUNTED}))))
    EXECUTE FUNCTION {ORDER_ONLY_FUNCTION}();
""",
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version
