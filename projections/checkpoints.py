"""The projections' checkpoints (the ``projection_checkpoints`` table: each projection's name, code
version and the last log position its rows have applied) as the materializer's catch-up reads and
moves them, with the token-count watermark it reads beside them."""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.projections.projection import Projection
from turnlog.store.dialect import Connection, dialect_of
from turnlog.store.log_ops import counted_through, counted_through_expr

POSITIONS = "SELECT name, position FROM projection_checkpoints"
HEAD = "SELECT coalesce(max(position), 0) FROM events"


def watermark_and_checkpoints(conn: Connection) -> tuple[int, dict[str, tuple[int, int]]]:
    """The token-count watermark (see :func:`counted_through`) and each stored checkpoint as
    (position, version) by name: one statement on SQLite, where a turn's catch-up reads them."""
    if dialect_of(conn).remote:
        # As before on a server, where the reading check prefetches these two statements (no
        # version read: the checkpoints are then written one by one, as before).
        counted = counted_through(conn)
        return counted, {str(n): (int(p), -1) for n, p in conn.execute(POSITIONS).fetchall()}
    rows = conn.execute(
        "SELECT name, position, version FROM projection_checkpoints "
        f"UNION ALL SELECT NULL, {counted_through_expr(conn)}, NULL"
    ).fetchall()
    counted = 0
    kept: dict[str, tuple[int, int]] = {}
    for name, position, version in rows:
        if name is None:
            counted = int(position)
        else:
            kept[str(name)] = (int(position), int(version))
    return counted, kept


def set_checkpoints(
    conn: Connection, projections: Sequence[Projection], position: int, kept: dict[str, tuple[int, int]]
) -> None:
    """Move the checkpoints of ``projections`` to ``position``: when each one's row exists at this
    code's version (every catch-up but the first), one statement for all of them."""
    if not projections:
        return
    if all(kept.get(p.name, (0, None))[1] == p.version for p in projections):
        names = [p.name for p in projections]
        conn.execute(
            f"UPDATE projection_checkpoints SET position = ? WHERE name IN ({','.join('?' * len(names))})",
            (position, *names),
        )
        return
    for projection in projections:
        set_checkpoint(conn, projection, position)


def set_checkpoint(conn: Connection, projection: Projection, position: int) -> None:
    conn.execute(
        "INSERT INTO projection_checkpoints (name, version, position) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET version = excluded.version, position = excluded.position",
        (projection.name, projection.version, position),
    )


def stored_checkpoint(conn: Connection, projection: Projection) -> int | None:
    """The position the file's rows of a projection have applied, or None when they cannot be used
    (tables missing, or written by another version of the projection)."""
    dialect = dialect_of(conn)
    names = dialect.tables(conn, dialect.main)
    if "projection_checkpoints" not in names or not set(projection.tables) <= names:
        return None
    row = conn.execute(
        f"SELECT version, position FROM {dialect.main}.projection_checkpoints WHERE name = ?",
        (projection.name,),
    ).fetchone()
    if row is None or row[0] != projection.version:
        return None
    return int(row[1])


def checkpoint_of(conn: Connection, projection: Projection) -> int:
    row = conn.execute(
        "SELECT position FROM projection_checkpoints WHERE name = ?", (projection.name,)
    ).fetchone()
    return int(row[0]) if row else 0


__all__ = [
    "POSITIONS",
    "checkpoint_of",
    "set_checkpoint",
    "set_checkpoints",
    "stored_checkpoint",
    "watermark_and_checkpoints",
]
