"""The LangGraph checkpoints of each session, materialized: which checkpoints and pending writes a
thread holds and at which session version their ``state_recorded`` events are, so the LangGraph saver
(``turnlog.integrations.langgraph``) finds the latest checkpoint, one by id, or a filtered list with
one indexed query instead of reading the thread.

The rules are SqliteSaver's: a checkpoint stored again under the same id replaces the first; a
``put_writes`` whose writes all go to special channels replaces earlier writes with the same keys,
any other keeps them; a rewind to version 0 (``delete_thread``) forgets the session's rows. Other
rewinds (LangGraph time travel) change nothing here: LangGraph still lists every checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from turnlog.projections.materialize import Projection
from turnlog.store import RecordedEvent, SessionRewound, StateRecorded
from turnlog.store.dialect import Connection, dialect_of

__all__ = [
    "CHECKPOINT_MEDIA",
    "FRAMEWORK",
    "SPECIAL_CHANNELS",
    "WRITES_MEDIA",
    "CheckpointRow",
    "LangGraphIndex",
    "WriteRow",
    "checkpoint_row",
    "find_checkpoints",
    "has_rows",
    "indexed_through",
    "write_rows",
    "writes_from",
    "writes_of",
]

FRAMEWORK = "langgraph"
"""The ``framework`` of LangGraph's state events."""

CHECKPOINT_MEDIA = "application/x-langgraph-checkpoint"
"""The media type (before its parameters) of a checkpoint's ``state_recorded``."""

WRITES_MEDIA = "application/x-langgraph-writes+json"
"""The media type of the ``state_recorded`` holding one ``put_writes`` call."""

SPECIAL_CHANNELS = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}
"""LangGraph's WRITES_IDX_MAP: channels whose writes replace earlier ones, with their fixed index."""

CheckpointRow = tuple[str, str, str, str | None, int, str]
"""(session id, namespace, checkpoint id, parent id, version of its event, metadata as JSON text)."""

WriteRow = tuple[str, str, int, int, str, int]
"""(task id, channel, version of its writes event, item in that event, task path, idx)."""


class LangGraphIndex(Projection):
    """LangGraph checkpoints and pending writes per session and namespace."""

    name: ClassVar[str] = "langgraph"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("lg_checkpoints", "lg_writes")
    types: ClassVar[tuple[str, ...] | None] = ("state_recorded", "session_rewound")

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.lg_checkpoints (
                session_id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                parent_id TEXT,
                version INTEGER NOT NULL,      -- of the checkpoint's state_recorded
                metadata TEXT NOT NULL,        -- LangGraph's metadata, JSON (what list() filters on)
                PRIMARY KEY (session_id, namespace, checkpoint_id)
            );
            CREATE TABLE {schema}.lg_writes (
                session_id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                checkpoint_id TEXT NOT NULL,
                task_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                channel TEXT NOT NULL,
                version INTEGER NOT NULL,      -- of the writes' state_recorded
                item INTEGER NOT NULL,         -- the write's index in that event
                task_path TEXT NOT NULL,
                PRIMARY KEY (session_id, namespace, checkpoint_id, task_id, idx)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        for record in records:
            event, sid = record.event, record.session_id
            if isinstance(event, SessionRewound):
                if event.to_version == 0:
                    conn.execute("DELETE FROM lg_checkpoints WHERE session_id = ?", (sid,))
                    conn.execute("DELETE FROM lg_writes WHERE session_id = ?", (sid,))
                continue
            row = checkpoint_row(record)
            if row is not None:
                conn.execute(
                    "INSERT INTO lg_checkpoints VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (session_id, namespace, checkpoint_id) DO UPDATE SET "
                    "parent_id = excluded.parent_id, version = excluded.version, "
                    "metadata = excluded.metadata",
                    row,
                )
            found = write_rows(record)
            if found is not None:
                namespace, checkpoint_id, replace, rows = found
                on_conflict = (
                    "DO UPDATE SET channel = excluded.channel, version = excluded.version, "
                    "item = excluded.item, task_path = excluded.task_path"
                    if replace
                    else "DO NOTHING"
                )
                conn.executemany(
                    "INSERT INTO lg_writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    f"ON CONFLICT (session_id, namespace, checkpoint_id, task_id, idx) {on_conflict}",
                    [
                        (sid, namespace, checkpoint_id, task, idx, channel, version, item, path)
                        for task, channel, version, item, path, idx in rows
                    ],
                )


def checkpoint_row(record: RecordedEvent) -> CheckpointRow | None:
    """The row a LangGraph checkpoint's ``state_recorded`` stores (None for any other event)."""
    event = record.event
    if not (
        isinstance(event, StateRecorded)
        and event.framework == FRAMEWORK
        and event.media_type.startswith(CHECKPOINT_MEDIA)
    ):
        return None
    meta: Mapping[str, Any] = event.metadata or {}
    return (
        record.session_id,
        event.namespace,
        event.key,
        event.parent_key,
        record.version,
        json.dumps(meta, ensure_ascii=False),
    )


def write_rows(record: RecordedEvent) -> tuple[str, str, bool, list[WriteRow]] | None:
    """The namespace, checkpoint id, rule and rows of a ``put_writes`` event (None for any other):
    SqliteSaver's rule is that writes all to special channels replace earlier ones with the same
    (task id, idx) (``replace`` True), any other keeps the first."""
    event = record.event
    if not (
        isinstance(event, StateRecorded)
        and event.framework == FRAMEWORK
        and event.media_type == WRITES_MEDIA
        and event.parent_key is not None
    ):
        return None
    meta: Mapping[str, Any] = event.metadata or {}
    channels = [str(c) for c in meta.get("channels") or []]
    task_id, task_path = str(meta.get("task_id", "")), str(meta.get("task_path", ""))
    rows: list[WriteRow] = [
        (task_id, channel, record.version, item, task_path, SPECIAL_CHANNELS.get(channel, item))
        for item, channel in enumerate(channels)
    ]
    return event.namespace, event.parent_key, all(c in SPECIAL_CHANNELS for c in channels), rows


def find_checkpoints(
    conn: Connection,
    *,
    session_id: str | None,
    namespace: str | None = None,
    checkpoint_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> list[CheckpointRow]:
    """Checkpoints, greatest id first, as SqliteSaver's ``list`` selects them (``session_id`` None:
    every session; ``metadata`` keys are dotted paths, already checked by the caller)."""
    wheres: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("session_id", session_id),
        ("namespace", namespace),
        ("checkpoint_id", checkpoint_id),
    ):
        if value is not None:
            wheres.append(f"{column} = ?")
            params.append(value)
    for key, value in (metadata or {}).items():
        clause, bound = dialect_of(conn).json_field_equals("metadata", key, value)
        wheres.append(clause)
        params.extend(bound)
    if before is not None:
        wheres.append("checkpoint_id < ?")
        params.append(before)
    sql = "SELECT session_id, namespace, checkpoint_id, parent_id, version, metadata FROM lg_checkpoints"
    if wheres:
        sql += " WHERE " + " AND ".join(wheres)
    sql += " ORDER BY checkpoint_id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [tuple(row) for row in conn.execute(sql, params)]


def writes_of(conn: Connection, session_id: str, namespace: str, checkpoint_id: str) -> list[WriteRow]:
    """A checkpoint's pending writes (unordered: the caller sorts them as LangGraph does)."""
    return [
        tuple(row)
        for row in conn.execute(
            "SELECT task_id, channel, version, item, task_path, idx FROM lg_writes "
            "WHERE session_id = ? AND namespace = ? AND checkpoint_id = ?",
            (session_id, namespace, checkpoint_id),
        )
    ]


def writes_from(
    conn: Connection, session_id: str, namespace: str, checkpoint_id: str | None
) -> list[tuple[str, WriteRow]]:
    """The pending writes of checkpoint ``checkpoint_id`` and of every greater id in the namespace
    (of every checkpoint when None), each with its checkpoint id: what the saver keeps in memory
    beside a thread's latest checkpoint."""
    sql = (
        "SELECT checkpoint_id, task_id, channel, version, item, task_path, idx FROM lg_writes "
        "WHERE session_id = ? AND namespace = ?"
    )
    params: list[Any] = [session_id, namespace]
    if checkpoint_id is not None:
        sql += " AND checkpoint_id >= ?"
        params.append(checkpoint_id)
    return [(row[0], tuple(row[1:])) for row in conn.execute(sql, params)]


def indexed_through(conn: Connection) -> int:
    """The last log position the index has applied (in the store's own tables)."""
    row = conn.execute(
        "SELECT position FROM projection_checkpoints WHERE name = ?", (LangGraphIndex.name,)
    ).fetchone()
    return int(row[0]) if row else 0


def has_rows(conn: Connection, session_id: str) -> bool:
    """Whether the session holds any checkpoint or pending write (what ``delete_thread`` forgets)."""
    return any(
        conn.execute(f"SELECT 1 FROM {table} WHERE session_id = ? LIMIT 1", (session_id,)).fetchone()
        for table in ("lg_checkpoints", "lg_writes")
    )
