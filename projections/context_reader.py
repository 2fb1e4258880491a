"""What the context builder reads: light rows of the context index, the retained messages, the
active summaries and the session's tail, walked back from the head in growing chunks. Only these
are read, never the whole session."""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from turnlog.projections.context_header import Header, read_header, take_ahead
from turnlog.projections.context_rows import Item, item_of, item_of_event
from turnlog.projections.context_types import ContextPolicy, role_costs
from turnlog.projections.live_index import DEAD_RANGES, dead_ranges, is_dead
from turnlog.projections.store_cache import StoreCache
from turnlog.store import MessageAppended, RecordedEvent, Store, ToolReturned
from turnlog.store.dialect import dialect_of
from turnlog.store.rows import PAYLOAD_COLUMNS, PAYLOAD_JOIN, payload_fields


@dataclass(slots=True)
class Row:
    """A light ctx_messages row."""

    version: int
    role: str
    first_user: bool
    has_name: bool
    n_calls: int
    call_version: int | None
    tokens: int
    event_id: str
    length: int
    whole: bool
    payload: tuple[Any, ...]
    """Its event's type, schema version and payload, and its content blob's codec and data when the
    build reads the text with the row (store.rows.PAYLOAD_COLUMNS)."""


@dataclass(slots=True)
class SummaryRow:
    """An active summary_recorded, as the index has it."""

    version: int
    event_id: str
    first: int
    last: int
    level: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Retained:
    """What ``_retained`` read as of position ``at``: kept with the header of an unchanged
    database (projections.context), so a warm build does not read the same rows again."""

    at: int
    rows: tuple[Row, ...]
    pinned: frozenset[int]
    cums: dict[int, tuple[int, int]]
    """The running totals below each of the rows, as ``_rows`` noted them."""


ROW_COLUMNS = (
    "c.version, c.position, c.role, c.first_user, c.has_name, c.n_calls, c.call_version, c.tokens, "
    f"c.event_id, c.length, c.whole, c.cum_messages, c.cum_tokens, {PAYLOAD_COLUMNS}"
)
LIGHT_COLUMNS = (
    "c.version, c.role, c.first_user + 2 * c.has_name + 4 * c.whole + 8 * c.n_calls, c.call_version, "
    "c.tokens, c.event_id, c.length, c.cum_messages, c.cum_tokens"
)
"""The columns of a row read without its payload, the flags and the count of calls in one: each
column a row has costs the driver a release and a take of the interpreter's lock."""
# Each row with its event's payload, and the content blob of a text read with the row: the index
# keeps no copy of the log's texts.
_JOIN = PAYLOAD_JOIN.format(table="c", wanted="c.whole = 1")
_PAYLOADS = (
    f"SELECT c.version, {PAYLOAD_COLUMNS} FROM ctx_messages c {_JOIN} "
    "WHERE c.session_id = ? AND c.version IN "
)
"""The payloads of rows read without them (their items not remembered), by version."""
_WHOLE = (
    f"SELECT {PAYLOAD_COLUMNS} FROM ctx_messages c {PAYLOAD_JOIN.format(table='c', wanted='c.whole = 0')} "
    "WHERE c.session_id = ? AND c.version = ?"
)
"""A row's payload with its content blob, for a text not read with the row (one to cap)."""

ITEMS: StoreCache[tuple[str, bool], Item] = StoreCache(2048)
"""Per store, the items decoded from events' payloads, by event id (and whether the text is read
with the row): an event never changes, so a warm build on SQLite reads the index's rows alone and
decodes only the payloads of rows it has not seen (a turn's new messages)."""

# The reads of a build, named so that the ones it makes first can be sent together (_first_reads).
_RETAINED = "AND c.version <= ? AND (c.role = 'system' OR c.first_user = 1)"
_CHUNK = "AND c.version <= ? AND c.version >= ? ORDER BY c.version DESC LIMIT ?"
_FIRST_CHUNK = 32
_PINS = (
    "SELECT target_version FROM ctx_pins WHERE session_id = ? AND pinned_at <= ? "
    "AND (unpinned_at IS NULL OR unpinned_at > ?)"
)
_OPEN_RUN = (
    "SELECT started_version FROM ctx_runs WHERE session_id = ? AND started_position <= ? "
    "AND (finished_position IS NULL OR finished_position > ?) ORDER BY started_position DESC LIMIT 1"
)
_CUMULATIVE = (
    "SELECT cum_messages, cum_tokens FROM ctx_messages WHERE session_id = ? AND "
    "version < ? ORDER BY version DESC LIMIT 1"
)
# Two index ranges rather than an OR, which would read every summary ever written.
_SUMMARIES = (
    "SELECT version, event_id, first_version, last_version, level, tokens FROM ctx_summaries "
    "{hint} WHERE session_id = ? AND superseded_at IS NULL AND position <= ? UNION ALL "
    "SELECT version, event_id, first_version, last_version, level, tokens FROM ctx_summaries "
    "{hint} WHERE session_id = ? AND superseded_at > ? AND position <= ?"
)
ARTIFACT_WATERMARK = (
    "SELECT position, event_id FROM artifacts WHERE session_id = ? AND position <= ? "
    "ORDER BY position DESC LIMIT 1"
)
"""The newest artifact row of a session at or before a position (context_preamble's watermark)."""


def _rows_sql(where: str, hint: str, *, light: bool = False) -> str:
    if light:
        return f"SELECT {LIGHT_COLUMNS} FROM ctx_messages c {hint} WHERE c.session_id = ? {where}"
    return f"SELECT {ROW_COLUMNS} FROM ctx_messages c {hint} {_JOIN} WHERE c.session_id = ? {where}"


def first_rows_reads(session_id: str, head_version: int, size: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The reads of rows a build makes first, as a build on a server sends them: the retained rows,
    and the walk back's first chunk of ``size`` rows (context_start reads their answers ahead)."""
    return [
        (_rows_sql(_RETAINED, ""), (session_id, head_version)),
        (_rows_sql(_CHUNK, ""), (session_id, head_version, 1, size)),
    ]


class ContextReader:
    """Reads for one build of one session as of one position."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        policy: ContextPolicy,
        at: int,
        head_version: int,
        *,
        snapshot: Any = None,
        header: Header | None = None,
        retained: Retained | None = None,
    ) -> None:
        """``snapshot``: the connection of a reading the caller holds open for the whole build
        (``store.reading()``), read through directly instead of entering a nested reading per read.
        ``header``: what an earlier build's first statement said of this session as of ``at``, in
        a database that has not changed since (on SQLite; read again when not given). ``retained``:
        what an earlier build's ``_retained`` read as of ``at`` in that same unchanged database."""
        self.store = store
        self._held: contextlib.AbstractContextManager[Any] | None = (
            None if snapshot is None else contextlib.nullcontext(snapshot)
        )
        self.sid = session_id
        self.policy = policy
        self.at = at
        self.head_version = head_version
        self.tok = store.tokenizer
        self.costs = role_costs(self.tok)
        self.events: dict[int, RecordedEvent] = {}
        self.items: dict[int, Item] = {}
        self.expected_rows = 0
        """How many rows the walk back is expected to use (0: not known); sizes its second chunk."""
        self._unread: dict[int, Row] = {}
        """Rows read without their payloads whose items are not remembered (see _remembered)."""
        self._cums: dict[int, tuple[int, int]] = {}
        """Running totals below a version (``_raw_cumulative``), known from the rows read."""
        self.header: Header | None = None
        """What the build's first statement said of the session as of ``at`` (on a server: when
        a warm build read it ahead)."""
        self.retained: Retained | None = retained
        """The retained rows as of ``at`` (given, or once ``_retained`` has read them)."""
        self.first_chunk = 0
        """On a server: the rows of the walk's first chunk, read ahead with the header (0: none)."""
        # Versions a rewind or a removal took out of the live set as of ``at``: never shown.
        with self.reading() as conn:
            self.dialect = dialect_of(conn)
            """The store's dialect (one look-up a build: on SQLite it costs a failed attribute
            look-up each time)."""
            if self.dialect.remote:
                # A warm build's first statement read the header and the first rows (context_start).
                ahead = take_ahead(conn, session_id, at, head_version)
                if ahead is not None:
                    self.header, self.first_chunk = ahead
                    # The reads the header says this session needs, together (one round trip).
                    dead, _, pins, _, _, summaries, _, _ = self._first_reads()
                    known = self.header
                    needed = ((dead, known.gaps), (pins, known.pins), (summaries, known.summaries))
                    wanted = [read for read, asked in needed if asked]
                    if wanted:
                        conn.prefetch(wanted)
                elif hasattr(conn, "prefetch"):
                    conn.prefetch(self._first_reads())
            else:
                if header is None or header.at != at:
                    header = read_header(conn, session_id, at, head_version)
                self.header = header
            if self.header is not None:
                self._cums[head_version + 1] = self.header.cumulative
            if self.header is not None and not self.header.gaps:
                self.dead = []
            else:
                self.dead = dead_ranges(conn, session_id, at)

    def reading(self) -> contextlib.AbstractContextManager[Any]:
        """The snapshot the caller holds, or a reading of the store's own."""
        held = self._held
        return self.store.reading() if held is None else held

    def known(self) -> Header | None:
        """The header, when it speaks of this reader's position (a copy made for an earlier
        position, as the cache-stable build makes, reads for itself)."""
        header = self.header
        return header if header is not None and header.at == self.at else None

    def _first_reads(self) -> list[tuple[str, tuple[Any, ...]]]:
        """The reads every build makes first, none depending on another's answer: on a server,
        sent together (one round trip instead of eight), each then answered from what was read."""
        sid, at = self.sid, self.at
        return [
            (DEAD_RANGES, (sid, at, at)),
            (_rows_sql(_RETAINED, ""), (sid, self.head_version)),
            (_PINS, (sid, at, at)),
            (_OPEN_RUN, (sid, at, at)),
            (_CUMULATIVE, (sid, self.head_version + 1)),
            (_SUMMARIES.format(hint=""), (sid, at, sid, at, at)),
            (ARTIFACT_WATERMARK, (sid, at)),
            (_rows_sql(_CHUNK, ""), (sid, self.head_version, 1, _FIRST_CHUNK)),
        ]

    # -- reading ------------------------------------------------------------------------------

    def _rows(self, where: str, params: Sequence[Any], *, index: str | None = None) -> list[Row]:
        with self.reading() as conn:
            dialect = self.dialect
            hint = dialect.hint(index) if index else ""
            # On a server the payloads come with the rows (a round trip saved); in process, the
            # rows alone, then the payloads of the rows whose items are not remembered.
            light = not dialect.remote
            found = conn.execute(_rows_sql(where, hint, light=light), (self.sid, *params)).fetchall()
            cums = self._cums
            rows = []
            if light:
                for v, r, flags, cv, t, e, length, cm, ct in found:
                    # The running totals below this row, as _raw_cumulative would read them.
                    cums[v] = (cm - 1, ct - t)
                    if not self.dead or not is_dead(self.dead, v):
                        rows.append(
                            Row(
                                v,
                                r,
                                flags & 1 != 0,
                                flags & 2 != 0,
                                flags >> 3,
                                cv,
                                t,
                                e,
                                length,
                                flags & 4 != 0,
                                (),
                            )
                        )
            else:
                for v, _, r, f, n, c, cv, t, e, length, whole, cm, ct, *payload in found:
                    cums[v] = (cm - 1, ct - t)
                    if not self.dead or not is_dead(self.dead, v):
                        # No event type: a warm build's statement left the payload out, the
                        # store remembering the row's item (context_start).
                        kept = tuple(payload) if payload[0] is not None else ()
                        rows.append(Row(v, r, bool(f), bool(n), c, cv, t, e, length, bool(whole), kept))
            if rows:
                self._remembered(rows)
        return rows

    def _remembered(self, rows: Sequence[Row]) -> None:
        """The items of rows read without their payloads, from those the store remembers; the
        others wait in ``_unread`` until an item of one is wanted."""
        table = ITEMS.table(self.store)
        items = self.items
        for row in rows:
            if row.version in items:
                continue
            key = (row.event_id, row.whole)
            found = table.get(key)
            if found is None:
                # (A row read with its payload, on a server, is decoded when its item is wanted:
                # looked up here first, it is not decoded again.)
                if not row.payload:
                    self._unread[row.version] = row
                continue
            items[row.version] = found
            try:
                table.move_to_end(key)
            except KeyError:  # another thread's build trimmed it meanwhile (the item still holds)
                continue

    def _read_payloads(self) -> None:
        """The payloads of every row waiting for one, in one statement (per 500): the rows a build
        read are mostly shown, and rows at the end of a chunk it does not show are never read."""
        unread, self._unread = self._unread, {}
        wanted = list(unread)
        with self.reading() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                sql = f"{_PAYLOADS}({','.join('?' * len(chunk))})"
                for version, *payload in conn.execute(sql, (self.sid, *chunk)):
                    unread[version].payload = tuple(payload)

    def _item(self, row: Row) -> Item:
        """What the row's event says, from its payload read with the row (decoded once a build)."""
        found = self.items.get(row.version)
        if found is None:
            if not row.payload:
                self._read_payloads()
            fields = payload_fields(*row.payload)
            if fields is None:  # an older schema's payload: the store upcasts it
                self._load([row.version])
                event = self.events[row.version].event
                assert isinstance(event, (MessageAppended, ToolReturned))
                found = item_of_event(row.event_id, event, row.whole)
            else:
                found = item_of(row.event_id, row.length, row.whole, fields, tool=row.role == "tool")
            self.items[row.version] = found
            table = ITEMS.table(self.store)
            table[(row.event_id, row.whole)] = found
            ITEMS.trim(table)
        return found

    def _content(self, row: Row) -> str:
        """The row's whole text: read with the row, or from its event when it was not."""
        content = self._item(row).content
        if content is None and row.version not in self.events:
            # In the build's snapshot, without the store's record read (its token catch-up check and
            # the validation of the whole event): the payload and its blob, decoded as with a row.
            with self.reading() as conn:
                found = conn.execute(_WHOLE, (self.sid, row.version)).fetchone()
            fields = None if found is None else payload_fields(*found)
            if fields is not None and isinstance(fields.get("content"), str):
                return str(fields["content"])
        if content is None:
            self._load([row.version])
            event = self.events[row.version].event
            assert isinstance(event, (MessageAppended, ToolReturned))
            content = event.content
        return content

    def _load(self, versions: Sequence[int]) -> None:
        missing = [v for v in versions if v not in self.events]
        if missing:
            for record in self.store.read_versions(self.sid, missing):
                self.events[record.version] = record

    def _retained(self) -> tuple[list[Row], set[int]]:
        """System messages, the first user message and pinned messages, each with its whole unit
        (a call with its returns): as an earlier build of the same unchanged database read them
        (``retained``), or read."""
        known = self.retained
        if known is not None and not self.dead and known.at == self.at:
            self._cums.update(known.cums)
            self._remembered(known.rows)
            return list(known.rows), set(known.pinned)
        rows, pinned = self._read_retained()
        if not self.dead:
            cums = {r.version: self._cums[r.version] for r in rows if r.version in self._cums}
            self.retained = Retained(self.at, tuple(rows), frozenset(pinned), cums)
        return rows, pinned

    def _read_retained(self) -> tuple[list[Row], set[int]]:
        # The index named: SQLite does not choose a partial index for an OR on its own, and the
        # primary key would read every row of the session.
        retained = self._rows(_RETAINED, (self.head_version,), index="ctx_messages_retained")
        versions = {r.version for r in retained}
        if self.dead and not any(r.first_user for r in retained):
            # The first user message was rewound or removed: the first live one takes its place.
            first = self._first_live()
            if first is not None:
                versions.add(first)
        with self.reading() as conn:
            known = self.known()
            pinned = (
                set()
                if known is not None and not known.pins
                else {v for (v,) in conn.execute(_PINS, (self.sid, self.at, self.at))}
            )
            pinned = {v for v in pinned if not is_dead(self.dead, v)}
            versions |= pinned
            rows = {r.version: r for r in retained if r.version in versions}
            rows.update((r.version, r) for r in self._rows_in(versions - rows.keys()))
            # A pinned return keeps its call; a kept call keeps all its returns.
            calls = {r.call_version for r in rows.values() if r.role == "tool" and r.call_version}
            calls |= {r.version for r in rows.values() if r.n_calls}
            for call in calls:
                versions.add(call)
                versions |= {
                    v
                    for (v,) in conn.execute(
                        "SELECT return_version FROM ctx_calls WHERE session_id = ? AND "
                        "call_version = ? AND return_version IS NOT NULL AND return_position <= ?",
                        (self.sid, call, self.at),
                    )
                }
        # Only the rows not read yet (those of the calls' units), in version order.
        rows.update((r.version, r) for r in self._rows_in(versions - rows.keys()))
        all_rows = [rows[v] for v in sorted(versions) if v in rows]
        return all_rows, pinned

    def _first_live(self, role: str = "= 'user'") -> int | None:
        """The first message whose role is ``role`` (an SQL condition on it; default: the first user
        message) not in a range that is not live: one seek per such range."""
        known = self.known()
        if known is not None and not self.dead and role == "!= 'system'":
            return known.first_not_system
        start = 1
        with self.reading() as conn:
            while True:
                row = conn.execute(
                    f"SELECT version FROM ctx_messages WHERE session_id = ? AND role {role} "
                    "AND version >= ? AND version <= ? ORDER BY version LIMIT 1",
                    (self.sid, start, self.head_version),
                ).fetchone()
                if row is None:
                    return None
                gap = next((g for g in self.dead if g[0] <= row[0] <= g[1]), None)
                if gap is None:
                    return int(row[0])
                start = gap[1] + 1

    def _rows_in(self, versions: set[int]) -> list[Row]:
        found: list[Row] = []
        ordered = sorted(versions)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            found += self._rows(f"AND c.version IN ({','.join('?' * len(chunk))})", chunk)
        return found

    def _open_run_start(self) -> int | None:
        known = self.known()
        if known is not None:
            return known.open_run
        with self.reading() as conn:
            row = conn.execute(_OPEN_RUN, (self.sid, self.at, self.at)).fetchone()
        return int(row[0]) if row else None

    def _walk_back(self, skip: set[int], summaries: list[SummaryRow]) -> Iterator[Row | SummaryRow]:
        """From the head version down: ctx rows in growing chunks, and in place of each range an
        active summary covers, the summary (its rows are never read)."""
        starts = [summary.first for summary in summaries]
        dead_starts = [lo for lo, _ in self.dead]
        upper = self.head_version
        size = _FIRST_CHUNK
        first = True
        if self.known() is not None and self.expected_rows:
            # No prefetched first chunk to match (SQLite): sized for the rows the budget left, with
            # room for the outputs capped below their stored counts.
            # (None left — pinned rows over the budget — still reads a first chunk: never 0 rows.)
            size = min(max(self.expected_rows, 0) * 5 // 4 + 8, 512)
        if self.first_chunk:
            size = self.first_chunk  # as read ahead (the rows the budget can take at their stored counts)
        while upper >= 1:
            d = bisect.bisect_right(dead_starts, upper) - 1
            if d >= 0 and self.dead[d][1] >= upper:
                upper = self.dead[d][0] - 1  # a range that is not live: skipped, never read
                continue
            i = bisect.bisect_right(starts, upper) - 1
            if i >= 0 and summaries[i].last >= upper:
                yield summaries[i]
                upper = summaries[i].first - 1
                continue
            lower = summaries[i].last + 1 if i >= 0 else 1
            if d >= 0:
                lower = max(lower, self.dead[d][1] + 1)
            rows = self._rows(_CHUNK, (upper, lower, size))
            for row in rows:
                if row.version not in skip:
                    yield row
            upper = rows[-1].version - 1 if len(rows) == size else lower - 1
            wanted = self.expected_rows - size if first else 0
            size = min(max(size * 2, wanted + wanted // 4), 512)
            first = False

    def _active_summaries(self) -> list[SummaryRow]:
        """The summaries a context shows as of ``at``: not replaced by a later one, the highest
        level first, then the newest, never two over the same versions; in version order."""
        known = self.known()
        if known is not None and not known.summaries:
            return []
        with self.reading() as conn:
            hint = self.dialect.hint("ctx_summaries_active")
            found = [
                SummaryRow(*row)
                for row in conn.execute(
                    _SUMMARIES.format(hint=hint), (self.sid, self.at, self.sid, self.at, self.at)
                )
            ]
            if self.dead:
                # A summary replaced by one that a rewind or a removal undid counts again: only
                # sessions with ranges that are not live pay for this read.
                found += [
                    SummaryRow(*row[:6])
                    for row in conn.execute(
                        "SELECT s.version, s.event_id, s.first_version, s.last_version, s.level, s.tokens, "
                        "r.version FROM ctx_summaries s JOIN ctx_summaries r ON r.session_id = s.session_id "
                        "AND r.position = s.superseded_at WHERE s.session_id = ? AND s.superseded_at <= ? "
                        "AND s.position <= ?",
                        (self.sid, self.at, self.at),
                    )
                    if is_dead(self.dead, row[6])
                ]
        # A summary whose covered range is not wholly live (or that was itself rewound) is not shown.
        found = [
            s
            for s in found
            if not is_dead(self.dead, s.version) and all(hi < s.first or lo > s.last for lo, hi in self.dead)
        ]
        chosen: list[SummaryRow] = []
        for summary in sorted(found, key=lambda s: (-s.level, -s.version)):
            if all(summary.last < c.first or summary.first > c.last for c in chosen):
                chosen.append(summary)
        return sorted(chosen, key=lambda s: s.first)

    def _cumulative(self, before_version: int) -> tuple[int, int]:
        """Live messages and their stored tokens of the session below a version: the running
        totals, less those of each range that is not live (two lookups a range)."""
        messages, tokens = self._raw_cumulative(before_version)
        for lo, hi in self.dead:
            if lo >= before_version:
                break
            upper_messages, upper_tokens = self._raw_cumulative(min(hi, before_version - 1) + 1)
            lower_messages, lower_tokens = self._raw_cumulative(lo)
            messages -= upper_messages - lower_messages
            tokens -= upper_tokens - lower_tokens
        return messages, tokens

    def _raw_cumulative(self, before_version: int) -> tuple[int, int]:
        found = self._cums.get(before_version)
        if found is not None:
            return found
        with self.reading() as conn:
            row = conn.execute(_CUMULATIVE, (self.sid, before_version)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)
