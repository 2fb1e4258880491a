"""The run-time loop's projection: each session's policy (``policy_set``) and the condensed views of
long tool outputs (``output_condensed``), so a build finds the policy as of its position and the
condensed text of an output with one indexed query each, and the write path knows which outputs are
done. A fork starts with its parent's rows up to the fork; rewound or removed rows stop counting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from turnlog.projections.live_index import live_condition
from turnlog.projections.materialize import Projection, copy_rows, fork_of
from turnlog.store import OutputCondensed, PolicySet, RecordedEvent, SessionPolicy, Store
from turnlog.store.dialect import Connection, dialect_of


@dataclass(frozen=True, slots=True)
class Condensed:
    """A condensed view of one tool output, as the projection lists it."""

    target_event_id: str
    mode: str
    """``auto`` or ``custom``."""
    name: str
    """The summarizer's or custom handler's name."""
    key: str
    version: int
    """The ``output_condensed`` event's session version (load it for the text)."""
    event_id: str


class RuntimeProjection(Projection):
    """``rt_policies``: one row per ``policy_set``; ``rt_condensed``: one row per ``output_condensed``."""

    name: ClassVar[str] = "runtime"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("rt_policies", "rt_condensed")
    types: ClassVar[tuple[str, ...] | None] = ("policy_set", "output_condensed", "session_started")

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.rt_policies (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                version INTEGER NOT NULL,
                policy TEXT NOT NULL,           -- the SessionPolicy as JSON
                PRIMARY KEY (session_id, position)
            )
            """,
            schema,
        )
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.rt_condensed (
                session_id TEXT NOT NULL,
                target_event_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                version INTEGER NOT NULL,
                mode TEXT NOT NULL,
                name TEXT NOT NULL,
                key TEXT NOT NULL,
                event_id TEXT NOT NULL,
                PRIMARY KEY (session_id, target_event_id, position)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        for record in records:
            event = record.event
            fork = fork_of(conn, record)
            if fork is not None:
                for table in self.tables:
                    copy_rows(conn, table, fork[0], record.session_id, "position <= ?", (fork[2],))
            elif isinstance(event, PolicySet):
                conn.execute(
                    "INSERT INTO rt_policies (session_id, position, version, policy) VALUES (?, ?, ?, ?)",
                    (record.session_id, record.position, record.version, event.policy.model_dump_json()),
                )
            elif isinstance(event, OutputCondensed):
                conn.execute(
                    "INSERT INTO rt_condensed (session_id, target_event_id, position, version, mode, name, "
                    "key, event_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.session_id,
                        event.target_event_id,
                        record.position,
                        record.version,
                        event.condenser.mode,
                        event.condenser.name,
                        event.key,
                        record.event_id,
                    ),
                )


def session_policy(store: Store, session_id: str, at: int | None = None) -> SessionPolicy:
    """The session's policy as its newest live ``policy_set`` at or before ``at`` left it (all fields
    unset when there is none)."""
    rows = _live(store, "rt_policies", "policy", session_id, at, "version DESC LIMIT 1")
    return SessionPolicy() if not rows else SessionPolicy.model_validate_json(rows[0][0])


def condensed_outputs(
    store: Store, session_id: str, at: int | None = None, *, caught_up: bool = False
) -> dict[str, list[Condensed]]:
    """The live condensed views of the session's outputs at or before ``at``, by output event id,
    oldest first (``caught_up``: the caller, a build, has just caught the projections up)."""
    columns = "target_event_id, mode, name, key, version, event_id"
    found: dict[str, list[Condensed]] = {}
    for target, mode, name, key, version, event_id in _live(
        store, "rt_condensed", columns, session_id, at, "position", caught_up=caught_up
    ):
        found.setdefault(target, []).append(Condensed(target, mode, name, key, int(version), event_id))
    return found


def _live(
    store: Store,
    table: str,
    columns: str,
    session_id: str,
    at: int | None,
    order: str,
    *,
    caught_up: bool = False,
) -> list[tuple[Any, ...]]:
    """``columns`` of the session's live rows of ``table`` at or before global position ``at``."""
    if not caught_up:
        _caught_up(store)
    through = 2**62 if at is None else at
    with store.reading() as conn:
        rows: list[tuple[Any, ...]] = conn.execute(
            f"SELECT {columns} FROM {table} t WHERE session_id = ? AND position <= ? "
            f"AND {live_condition('t')} ORDER BY {order}",
            (session_id, through, through, through),
        ).fetchall()
    return rows


def _caught_up(store: Store) -> None:
    from turnlog.projections.registry import materializer  # the registry imports this module

    materializer(store).catch_up()


__all__ = ["Condensed", "RuntimeProjection", "condensed_outputs", "session_policy"]
