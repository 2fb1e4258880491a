"""A third side for the floor's append figures: turnlog's own rows, replayed by plain ``sqlite3``.

The same messages are first appended to a scratch turnlog store (not timed); the rows it stored
(every column, and the content blobs they point to) are then inserted by plain ``sqlite3`` into an
empty copy of that store (its salt: the rows verify) at the same durability (WAL,
synchronous=FULL), one INSERT + COMMIT an event or ``executemany`` + COMMIT a batch. This side
pays for turnlog's schema (its wider rows, the unique indexes on the event id and the session's
version, the immutability triggers, the blob table) and for nothing of turnlog's Python (the
public event objects, validation, JSON, the chain's keyed hashes): turnlog ÷ it is the share of
the gap that is turnlog's code, it ÷ the floor the schema's.

Beside it: :class:`LeastWork`, what an append's client cannot skip, timed apart; :func:`in_place`,
that work and the rows' insert done together as an append must run them, whose time gives the
bound (:func:`best`) the report prints beside each append figure (:func:`rows_line`); the
PostgreSQL section uses :class:`LeastWork` too (benchlib/pg_rows.py)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    "position, session_id, version, event_id, type, schema_version, payload, blob_id, tokens, "
    "recorded_at, prev_hash, hash, payload_digest, order_hash"
)
_INSERT = f"INSERT INTO events ({COLUMNS}) VALUES ({', '.join('?' * 14)})"
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (id, size, codec, data) VALUES (?, ?, ?, ?)"

Row = tuple[tuple[Any, ...], tuple[Any, ...] | None]
"""An event's row and the blob row it points to (or None)."""


def stored_rows(path: Path) -> list[Row]:
    """Every event row of the turnlog store at ``path`` in position order, each with its blob row."""
    conn = sqlite3.connect(path)
    try:
        blobs = {row[0]: row for row in conn.execute("SELECT id, size, codec, data FROM blobs")}
        return [
            (row, blobs[row[7]] if row[7] is not None else None)
            for row in conn.execute(f"SELECT {COLUMNS} FROM events ORDER BY position")
        ]
    finally:
        conn.close()


class Rows:
    """An empty turnlog store (a copy of the store that made the rows, taken while it was empty: the
    same salt) that plain ``sqlite3`` fills with those rows."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")

    def append_one(self, row: Row) -> None:
        event, blob = row
        if blob is None:
            self.conn.execute(_INSERT, event)  # autocommit: one INSERT, one COMMIT
            return
        self.append([row])

    def append(self, rows: Sequence[Row]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        blobs = [blob for _, blob in rows if blob is not None]
        if blobs:
            self.conn.executemany(_INSERT_BLOB, blobs)
        self.conn.executemany(_INSERT, [event for event, _ in rows])
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class LeastWork:
    """What turnlog's client cannot skip for an event, and nothing else, timed on its own: the public
    event object made (``to_event``), its payload JSON made by the event's own serializer, and the
    three hashes the chain is made of (the payload's HMAC under the store's salt, the event's hash,
    the order's hash; a blob's content also gets its sha256, its id). The hash material around each
    digest is made beforehand (not timed), and every digest is checked against the row the store
    made (so this is the store's own hashing, not a likeness of it). turnlog can at best take its
    rows' insert (:class:`Rows`) plus this: the floor ÷ that sum is the most any code of its design
    can reach, in any language, with these event classes and this chain."""

    def __init__(
        self, to_event: Callable[[Any], Any], rows: Sequence[Row], salt: bytes, order: str | None = None
    ) -> None:
        """``order``: the order hash before the first row's (the genesis hash for a store's first)."""
        from turnlog.store import append_rules, chain

        self.to_event, self.salt = to_event, salt
        self.dump = append_rules._dump
        self.excludes = (append_rules._ENVELOPE, append_rules._ENVELOPE_AND_CONTENT)
        self.inner, self.outer = chain._keyed(salt)
        self.material: list[tuple[str, str, str, str, str]] = []
        order = order or chain.GENESIS_HASH
        for event, _blob in rows:
            pos, sid, version, event_id, etype, schema_version, payload, blob_id = event[:8]
            recorded_at, prev_hash, ev_hash, digest, order_hash = event[9:14]
            head = "turnlog-event-v2;" + "".join(
                chain._part(str(x)) for x in (sid, version, prev_hash, event_id, etype, schema_version)
            )
            tail = ";" + chain._part(blob_id or "") + chain._part(chain.canonical_time(recorded_at))
            order_head = f"turnlog-order-v2;{chain._part(order)}{chain._part(str(pos))}64:"
            self.material.append((head + "64:", payload, tail, order_head, digest + ev_hash + order_hash))
            order = order_hash
        self.blobs = [blob is not None for _, blob in rows]

    def run(self, msgs: Sequence[Any], first: int) -> None:
        """The least work for ``msgs``, the events of rows ``first``, ``first + 1``, ..."""
        sha256, inner, outer, dump = hashlib.sha256, self.inner, self.outer, self.dump
        plain, kept = self.excludes
        for i, msg in enumerate(msgs, first):
            head, payload, tail, order_head, expected = self.material[i]
            event = self.to_event(msg)
            if self.blobs[i]:
                sha256(event.content.encode()).hexdigest()
                dump(event, kept)
            else:
                dump(event, plain)
            h = inner.copy()
            h.update(payload.encode())  # the stored text (a blob's event: its id set by the store)
            o = outer.copy()
            o.update(h.digest())
            digest = o.hexdigest()
            ev_hash = sha256(f"{head}{digest}{tail}".encode()).hexdigest()
            order = sha256(f"{order_head}{ev_hash};".encode()).hexdigest()
            if digest + ev_hash + order != expected:
                raise RuntimeError(f"floor_rows.LeastWork: row {i}'s hashes differ from the store's")


def in_place(
    least: LeastWork, rows: Rows, made: Sequence[Row], msgs: Sequence[Any], first: int, *, each: bool
) -> float:
    """Seconds per event of the least work and the rows' insert done together, as an append must do
    them: each event's least work, then its row's INSERT + COMMIT (``each``), or a batch's least
    work, then its ``executemany`` + COMMIT. Timed apart, the least work runs hot, event after event
    in a tight loop; done between durable commits, after every wait on the disk, it costs two to
    three times as much (measured 2026-11-29: 13 µs an event apart, about 40 µs between commits;
    most likely the caches gone cold while the thread slept, which pinning it to one core does not
    change). No append of this design escapes that: the bound this side gives is what an append of
    these event classes, this chain and this schema can reach at best, as it must run."""
    started = time.perf_counter()
    if each:
        for i, msg in enumerate(msgs, first):
            least.run((msg,), i)
            rows.append_one(made[i])
    else:
        least.run(msgs, first)
        rows.append(made[first : first + len(msgs)])
    return (time.perf_counter() - started) / len(msgs)


def us(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def best(res: dict[str, Any]) -> float:
    """The most turnlog ÷ floor an append can reach: its rows' insert and its least work done in
    place (:func:`in_place`) when measured, else the two timed apart and added."""
    if "in_place_s" in res:
        return float(res["floor_s"] / res["in_place_s"])
    return float(res["floor_s"] / (res["rows_s"] + res["least_s"]))


def rows_line(d: dict[str, Any], b: dict[str, Any]) -> str:
    """Where the append figures' gap lies: turnlog's schema, the least work, or turnlog's own code."""
    parts, least = [], []
    for name, res in (("durable", d), ("batch", b)):
        parts.append(
            f"{name} {1 / res['rows_s']:,.0f}/s (÷ floor {res['floor_s'] / res['rows_s']:.2f}×; turnlog ÷ it "
            f"{res['rows_s'] / res['turnlog_s']:.2f}×)"
        )
        if "least_s" in res:
            apart = res["floor_s"] / (res["rows_s"] + res["least_s"])
            text = f"{name} {us(res['least_s'])} an event timed apart, so at best {apart:.2f}× the floor"
            if "in_place_s" in res:
                above = max(res["in_place_s"] - res["rows_s"], 0.0)
                text += (
                    f"; done in place, {us(above)} an event above the rows' insert, so at best "
                    f"**{best(res):.2f}×**"
                )
            least.append(f"{text} (turnlog {res['floor_s'] / res['turnlog_s']:.2f}×)")
    text = (
        "turnlog's own rows (the same messages appended to a scratch store, not timed) inserted by plain "
        "`sqlite3` into an empty turnlog store at the same durability, taking turns with the others: the "
        "schema's cost (wider rows, unique indexes on the event id and the session's version, the "
        "immutability triggers, the blob table) without turnlog's Python (event objects, validation, JSON, "
        "the chain's keyed hashes): " + "; ".join(parts) + "."
    )
    if least:
        text += (
            "\n\nThe least an append's client must do besides inserting those rows (benchlib/floor_rows.py "
            "`LeastWork`): make the public event objects, their payload JSON (the events' own pydantic "
            "serializer) and the chain's three hashes of each event (the payload's HMAC under the store's "
            "salt, the event's hash, the order's hash; each checked equal to the store's), nothing else. "
            "It is timed twice in the same blocks: apart, in a tight loop, and in place, each event's "
            "least work followed by its row's INSERT + COMMIT (a batch's, by its `executemany` + COMMIT) "
            "into one more empty store, as an append must run it; between durable commits, after each wait "
            "on the disk, the same work costs two to three times as much. "
            + "; ".join(least)
            + ". Where the bound in place is below the target (the table's `met` column then says "
            '"out of reach"), no append of this design (these event classes, this chain, this schema) '
            "reaches the target on this machine, in any language: the floor makes only its JSON."
        )
    return text


__all__ = ["LeastWork", "Rows", "best", "in_place", "rows_line", "stored_rows", "us"]
