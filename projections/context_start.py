"""The first read of a warm build on a server (PostgreSQL): one statement, prepared on the server, that
says whether the projections are current and where the session's head is, answers the header
(context_header) and reads the retained messages and the newest rows the budget can take. A warm
build of a typical session then makes that one round trip and no other (no BEGIN, no ROLLBACK: one
statement sees one snapshot). Everything a build reads is as of its position, so what it reads
after that, in a snapshot of its own, agrees with it."""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Sequence
from typing import Any

from turnlog.projections.context_header import Header, leave_ahead
from turnlog.projections.context_reader import ITEMS, ROW_COLUMNS, first_rows_reads
from turnlog.projections.context_types import PER_MESSAGE, ContextPolicy
from turnlog.projections.store_cache import StoreCache
from turnlog.store import Store
from turnlog.store.dialect import Connection
from turnlog.store.rows import PAYLOAD_COLUMNS

_part = operator.itemgetter(0)


_version = operator.itemgetter(1)


def _order(row: tuple[Any, ...]) -> tuple[int, int]:
    return row[0], -(row[1] or 0)


def _in_order(rows: list[tuple[Any, ...]]) -> bool:
    """Whether the rows are in part order, each part's newest first (the header first)."""
    parts = list(map(_part, rows))
    if not parts or parts[0] != 0 or parts != sorted(parts):
        return False
    split = bisect.bisect_left(parts, 2, lo=1)
    for low, high in ((1, split), (split, len(rows))):
        versions = list(map(_version, rows[low:high]))
        if versions != sorted(versions, reverse=True):
            return False
    return True


TAIL_CAP = 2048
"""The most rows the statement reads of the tail (the walk back reads on from there if needs be)."""

MARGIN = 8
"""Rows read below the first the budget cannot take."""

_INT_MAX = 2**31 - 1 - PER_MESSAGE
"""The most a message's capped tokens count in the tail's running sum (a term of it an INTEGER)."""

assert ROW_COLUMNS.endswith(PAYLOAD_COLUMNS)
# Each row with its event's payload, but for the versions the store remembers the items of (the
# range given): there the event is not looked up at all (the lateral join's condition is on the
# row alone) and the payload columns are NULL. A warm build of a session built before reads only
# its new messages' payloads: less for the server to join and send, and for the driver to decode.
_PAYLOAD = (
    "LEFT JOIN LATERAL (SELECT e.type, e.schema_version, e.payload, b.codec, b.data FROM events e "
    "LEFT JOIN blobs b ON b.id = e.blob_id AND c.whole = 1 WHERE e.position = c.position "
    "AND (c.version < ? OR c.version > ?)) p ON TRUE"
)
_ROWS = (
    f"SELECT {{part}}, {ROW_COLUMNS.removesuffix(PAYLOAD_COLUMNS)}"
    "p.type, p.schema_version, p.payload, p.codec, p.data "
    f"FROM ctx_messages c {_PAYLOAD} WHERE c.session_id = ? AND c.version <= (SELECT hv FROM h) "
)
_SEEN = "SELECT 1 FROM {table} WHERE session_id = ? AND {column} <= h.at LIMIT 1"
_FLAGS = (
    ("live_gaps", "dead_at"),
    ("ctx_pins", "pinned_at"),
    ("ctx_summaries", "position"),
    ("rt_condensed", "position"),
)
_ARTIFACT = (
    "(SELECT {column} FROM artifacts WHERE session_id = ? AND position <= h.at "
    "ORDER BY position DESC LIMIT 1)"
)


_LAST_TAIL: StoreCache[str, list[tuple[Any, ...]]] = StoreCache(256)
"""Per store, by session: the tail rows the last warm build's statement read (ROW_COLUMNS), newest
first; which of their items the store still remembers (context_reader.ITEMS) says which payloads
the next build need not read."""


def remembered_range(store: Store, session_id: str) -> tuple[int, int]:
    """The versions, newest first from the last tail read, down to the first whose item the store
    does not remember: (lowest, highest), or (0, -1) for none. Only a hint: a row the statement
    reads without its payload whose item was forgotten meanwhile is read again by the build."""
    last = _LAST_TAIL.get(store, session_id)
    if not last:
        return 0, -1
    table = ITEMS.table(store)
    low = high = -1
    for row in last:
        if (row[8], bool(row[10])) not in table:  # event_id, whole
            break
        if high < 0:
            high = row[0]
        low = row[0]
    return (0, -1) if high < 0 else (low, high)


def _capped(cap: str) -> str:
    return f"CASE WHEN tokens > {cap} THEN {cap} ELSE tokens END"


def _text(expressions: Sequence[str]) -> str:
    """Numbers as one text, comma-separated, empty for NULL (an expression of text already is
    taken as it is: it says two numbers)."""
    return " || ',' || ".join(
        e if e.startswith("(SELECT coalesce(") else f"coalesce(CAST({e} AS TEXT), '')" for e in expressions
    )


@functools.lru_cache(maxsize=8)
def start_sql(projections: int) -> str:
    """The statement, for a check of that many projections. One row per part: 0 the header (its
    numbers in the payload column, as text: a row of the same columns as the others), 1 the
    retained rows (system messages, the first user message), 2 the tail from the head down to the
    first row the budget cannot take (at the least each message can cost) and a few more: the build
    reads on only when that was not enough. Portable SQL (a server is where it pays)."""
    names = ", ".join("?" * projections)
    header = [
        "h.at",
        "h.hv",
        # Two numbers of one scan: the applied position, and how many of the projections have
        # a checkpoint at all (a subquery fewer for the server).
        f"(SELECT coalesce(CAST(min(position) AS TEXT), '') || ',' || CAST(count(*) AS TEXT) "
        f"FROM projection_checkpoints WHERE name IN ({names}))",
        *(f"({_SEEN.format(table=table, column=column)})" for table, column in _FLAGS),
        "(SELECT started_version FROM ctx_runs WHERE session_id = ? AND started_position <= h.at "
        "AND (finished_position IS NULL OR finished_position > h.at) ORDER BY started_position DESC LIMIT 1)",
        _ARTIFACT.format(column="position"),
        "(SELECT version FROM ctx_messages WHERE session_id = ? AND role != 'system' AND version >= 1 "
        "AND version <= h.hv ORDER BY version LIMIT 1)",
        "(SELECT version FROM below)",
    ]
    return (
        "WITH h AS (SELECT (SELECT coalesce(max(position), 0) FROM events) AS at, "
        "(SELECT coalesce(max(version), 0) FROM events WHERE session_id = ?) AS hv), "
        # The newest row at which what the tail costs at least (each message's overhead and its
        # stored tokens within the policy's caps) passes the budget: the build can fit no row
        # below it; and a few rows more (the call of an output squeezed in at the end, its other
        # outputs).
        f"below AS (SELECT version FROM (SELECT version, sum(CAST({PER_MESSAGE} + CASE WHEN role = 'tool' "
        f"THEN {_capped('?')} ELSE {_capped('?')} END AS INTEGER)) "
        # Rows, not the default range: no look for peers (versions are unique); an integer sum
        # (a bigint one is a numeric).
        "OVER (ORDER BY version DESC ROWS UNBOUNDED PRECEDING) AS cost "
        "FROM ctx_messages WHERE session_id = ? AND version <= (SELECT hv FROM h) "
        f"ORDER BY version DESC) AS tail WHERE cost > ? LIMIT 1 OFFSET {MARGIN}) "
        f"SELECT 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {_ARTIFACT.format(column='event_id')}, "
        f"NULL, NULL, NULL, NULL, NULL, NULL, {_text(header)}, NULL, NULL FROM h "
        "UNION ALL "
        + _ROWS.format(part=1)
        + "AND (c.role = 'system' OR c.first_user = 1) UNION ALL SELECT * FROM ("
        + _ROWS.format(part=2)
        + "AND c.version >= coalesce((SELECT version FROM below), 0) "
        f"ORDER BY c.version DESC LIMIT {TAIL_CAP}) AS tail"
    )


def read_start(
    conn: Connection, session_id: str, watched: Sequence[str], policy: ContextPolicy, store: Store
) -> tuple[int, int] | None:
    """(the head position, ``session_id``'s version there) when every projection of ``watched`` has
    applied every event, read with one statement; the header and the first rows of the build as of
    there are left on ``conn`` for its reader. None when a catch-up may have work."""
    sid, names = session_id, list(watched)
    # The caps as the sum of integers takes them: a message that alone costs more than the budget
    # passes it whatever its tokens (the first row past the budget is the same), and no term
    # overflows (a larger budget sees fewer rows past it: the tail reads more rows, never fewer).
    most = min(policy.budget, _INT_MAX)
    caps = (min(policy.max_tool_tokens, most),) * 2 + (min(policy.max_message_tokens, most),) * 2
    low, high = remembered_range(store, sid)
    params = (sid, *caps, sid, policy.budget, sid, *names, *(sid,) * 7)
    params += (low, high, sid) * 2
    rows = conn.alone(start_sql(len(names)), params)
    numbers = [int(n) if n else None for n in rows[0][16].split(",")]
    at, head_version, applied, known, gaps, pins, summaries, condensed, run, artifact, first, below = numbers
    assert at is not None and head_version is not None and known is not None
    if known < len(names) or applied is None or applied < at:
        return None
    if head_version > 0:
        # In part order, newest first: as the server sends them (an append of the parts in their
        # order), which SQL does not promise; checked here (two passes in C), sorted only if not,
        # rather than sorted by the server every time.
        if not _in_order(rows):
            rows.sort(key=_order)
        split = bisect.bisect_left(rows, 2, lo=1, key=_part)
        retained = [row[1:] for row in rows[1:split]]
        tail = [row[1:] for row in rows[split:]]
        # The running totals at the head: the tail's newest row's (the tail starts at the head).
        messages, tokens = (tail[0][11], tail[0][12]) if tail else (0, 0)
        header = Header(
            at,
            gaps is not None,
            pins is not None,
            summaries is not None,
            condensed is not None,
            run,
            (messages, tokens),
            None if artifact is None else (artifact, str(rows[0][9])),
            first,
        )
        _LAST_TAIL.put(store, sid, tail)
        # The whole history read (nothing below the tail): a chunk asked for one row more, which
        # says the walk back has nothing left to read.
        size = len(tail) + 1 if below is None and len(tail) < TAIL_CAP else len(tail)
        for (sql, params), found in zip(
            first_rows_reads(sid, head_version, size), (retained, tail), strict=True
        ):
            conn.remember(sql, params, found)
        leave_ahead(conn, sid, at, head_version, header, size)
    return at, head_version
