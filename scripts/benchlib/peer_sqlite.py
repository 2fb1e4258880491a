"""The floors: plain ``sqlite3`` with turnlog's durability (WAL, synchronous=FULL, BEGIN IMMEDIATE)
storing each message as OpenAI chat JSON, without and with tiktoken counting inside the commit."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, ClassVar

from benchlib.base import SESSION, Peer
from benchlib.counting import PRIME, count_message, dumps, to_chat
from benchlib.workload import Msg

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL,
    tokens INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS messages_session ON messages (session_id, version);
"""


class SqlitePeer(Peer):
    name: ClassVar[str] = "sqlite"
    label: ClassVar[str] = "sqlite3 floor"
    durability: ClassVar[str] = "WAL, synchronous=FULL, BEGIN IMMEDIATE (set by the benchmark)"
    strategy: ClassVar[str] = "tail read, newest first, counting each message until the budget is full"
    count_in_commit: ClassVar[bool] = False

    def open(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                self.conn.execute(statement)
        row = self.conn.execute("SELECT max(version) FROM messages WHERE session_id = ?", (SESSION,))
        self.version = row.fetchone()[0] or 0

    def close(self) -> None:
        self.conn.close()

    def _row(self, msg: Msg, version: int) -> tuple[Any, ...]:
        chat = to_chat(msg)
        tokens = count_message(chat) if self.count_in_commit else None
        return (SESSION, version, dumps(chat), tokens)

    def append_one(self, msg: Msg) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "INSERT INTO messages (session_id, version, payload, tokens) VALUES (?, ?, ?, ?)",
            self._row(msg, self.version + 1),
        )
        self.conn.execute("COMMIT")
        self.version += 1

    def append_batch(self, msgs: list[Msg]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO messages (session_id, version, payload, tokens) VALUES (?, ?, ?, ?)",
            [self._row(m, self.version + i) for i, m in enumerate(msgs, 1)],
        )
        self.conn.execute("COMMIT")
        self.version += len(msgs)

    def load(self) -> list[Any]:
        rows = self.conn.execute(
            "SELECT payload FROM messages WHERE session_id = ? ORDER BY version", (SESSION,)
        )
        return [json.loads(payload) for (payload,) in rows]

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        """The system message, then the newest messages read from the tail in growing chunks."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            first = conn.execute(
                "SELECT version, payload, tokens FROM messages WHERE session_id = ? ORDER BY version LIMIT 1",
                (SESSION,),
            ).fetchone()
            system = json.loads(first[1]) if first and json.loads(first[1])["role"] == "system" else None
            used = PRIME + (self._tokens(system, first[2]) if system else 0)
            floor = first[0] if system else 0
            kept: list[dict[str, Any]] = []
            upper, size, full = 2**62, 16, False
            while not full:
                rows = conn.execute(
                    "SELECT version, payload, tokens FROM messages WHERE session_id = ? AND version < ? "
                    "AND version > ? ORDER BY version DESC LIMIT ?",
                    (SESSION, upper, floor, size),
                ).fetchall()
                if not rows:
                    break
                for version, payload, tokens in rows:
                    message = json.loads(payload)
                    cost = self._tokens(message, tokens)
                    if used + cost > budget:
                        full = True
                        break
                    used += cost
                    kept.append(message)
                    upper = version
                size = min(size * 2, 256)
        finally:
            conn.execute("COMMIT")
        kept.reverse()
        return ([system] if system else []) + kept, used

    @staticmethod
    def _tokens(message: dict[str, Any], stored: int | None) -> int:
        return stored if stored is not None else count_message(message)


class SqliteCountingPeer(SqlitePeer):
    name: ClassVar[str] = "sqlite-tiktoken"
    label: ClassVar[str] = "sqlite3 floor + tiktoken in the commit"
    strategy: ClassVar[str] = "tail read over the stored counts (no counting at build time)"
    count_in_commit: ClassVar[bool] = True
    counts_at_append: ClassVar[bool] = True
