"""Reading the live index (projections.live_index): the ranges of a session's versions that a rewind or
a removal made not live as of a position. Loads neither the event models nor the materializer, so a
reader that only needs the ranges (``turnlog log``) starts at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from turnlog.store.dialect import Connection

LIVE_PROJECTION = "live"
"""The live index's name (its checkpoint's key)."""
LIVE_VERSION = 1
"""The live index's version: bump it when its tables or its logic change."""

COMPENSATING_TYPES = ("session_rewound", "message_removed")
"""The event types that change which events are live; they are never live themselves."""

Gap = tuple[int, int]
"""A range of versions (first, last), both included."""


class _Versioned(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def version(self) -> int: ...


DEAD_RANGES = (
    "SELECT first_version, last_version FROM live_gaps WHERE session_id = ? AND dead_at <= ? "
    "AND (alive_at IS NULL OR alive_at > ?)"
)
"""The ranges not live as of a position (session id, at, at): what :func:`dead_ranges` reads."""


def dead_ranges(conn: Connection, session_id: str, at: int) -> list[Gap]:
    """The session's versions that are not live as of position ``at``, as sorted disjoint ranges."""
    found = sorted((int(lo), int(hi)) for lo, hi in conn.execute(DEAD_RANGES, (session_id, at, at)))
    merged: list[Gap] = []
    for lo, hi in found:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def is_dead(ranges: Sequence[Gap], version: int) -> bool:
    """Whether ``version`` lies in one of the sorted disjoint ``ranges``."""
    lo, hi = 0, len(ranges)
    while lo < hi:
        mid = (lo + hi) // 2
        if ranges[mid][1] < version:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(ranges) and ranges[lo][0] <= version


def live_condition(alias: str) -> str:
    """SQL true when the row ``alias`` (with ``session_id`` and ``version`` columns) is live as of a
    position; binds that position twice, after the query's earlier parameters."""
    return (
        f"NOT EXISTS (SELECT 1 FROM live_gaps g WHERE g.session_id = {alias}.session_id "
        f"AND g.first_version <= {alias}.version AND g.last_version >= {alias}.version "
        "AND g.dead_at <= ? AND (g.alive_at IS NULL OR g.alive_at > ?))"
    )


def marks(conn: Connection, session_id: str, at: int, records: Sequence[_Versioned]) -> list[bool]:
    """For records of one session: whether each is live as of position ``at``, by the live index's
    rows (which must have applied every event up to ``at``)."""
    dead = dead_ranges(conn, session_id, at)
    return [r.type not in COMPENSATING_TYPES and not is_dead(dead, r.version) for r in records]
