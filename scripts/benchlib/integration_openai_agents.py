"""TurnlogSession against the SDK's own SQLiteSession, in the same run: ``add_items`` throughput (one
item per call, the per-turn pattern, written interleaved), a full ``get_items()``, and the bounded
read ``get_items(limit=50)`` on both (the SDK's own trimming of a full read is the slice).

Both run at the same ``synchronous`` level: SQLiteSession's connections are WAL at SQLite's default
(FULL here) unless a level is set, so its bench subclass sets the PRAGMA on each connection it
opens; turnlog's store is opened with its ``synchronous`` knob. Run from the repository root:
``PYTHONPATH=.:scripts .venv/bin/python -m benchlib.integration_openai_agents [N] [FULL|NORMAL]``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib.integration_common import best_of, interleaved_writes, row

LIMIT = 50


def _item(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}: " + "x" * 200}


def _peer_class(synchronous: str) -> Any:
    from agents import SQLiteSession

    class Peer(SQLiteSession):  # type: ignore[misc]
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute(f"PRAGMA synchronous = {synchronous}")

    return Peer


def bench_openai_agents(
    n: int = 2000, workdir: Path | None = None, synchronous: str = "FULL"
) -> list[dict[str, Any]]:
    """Measure both backends at ``n`` items, each in a fresh file under ``workdir`` (a temp dir)."""
    import turnlog
    from turnlog.integrations.openai_agents import TurnlogSession

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-oai-"))
    root.mkdir(parents=True, exist_ok=True)
    peer = _peer_class(synchronous)("bench", str(root / f"agents-{n}-{synchronous}.db"))
    store = turnlog.open_store(root / f"turnlog-oai-{n}-{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
    ours = TurnlogSession("bench", db=store)
    loop = asyncio.new_event_loop()
    try:
        items = [_item(i) for i in range(n)]

        def writer(session: Any) -> Any:
            def write(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    loop.run_until_complete(session.add_items([items[i]]))

            return write

        peer_w, ours_w = interleaved_writes([writer(peer), writer(ours)], n)
        full_p = loop.run_until_complete(peer.get_items())
        full_o = loop.run_until_complete(ours.get_items())
        tail_o = loop.run_until_complete(ours.get_items(limit=LIMIT))
        assert full_p == full_o == items and tail_o == items[-LIMIT:]  # the same answer, or no figure
        peer_full, ours_full, peer_trim, peer_bounded, ours_bounded = best_of(
            [
                lambda: loop.run_until_complete(peer.get_items()),
                lambda: loop.run_until_complete(ours.get_items()),
                lambda: loop.run_until_complete(peer.get_items())[-LIMIT:],
                lambda: loop.run_until_complete(peer.get_items(limit=LIMIT)),
                lambda: loop.run_until_complete(ours.get_items(limit=LIMIT)),
            ]
        )
    finally:
        peer.close()
        ours.close()
        store.close()
        loop.close()
    bounded = f"get_items(limit={LIMIT})"
    return [
        row(
            "SQLiteSession",
            "peer",
            n,
            f"WAL, synchronous={synchronous}",
            writes_per_s=peer_w,
            full_read_ms=peer_full,
            bounded_read_ms=peer_bounded,
            bounded=f"get_items() + last {LIMIT}",
            trimmed_read_ms=peer_trim,
        ),
        row(
            "TurnlogSession",
            "turnlog",
            n,
            f"WAL, synchronous={synchronous}",
            writes_per_s=ours_w,
            full_read_ms=ours_full,
            bounded_read_ms=ours_bounded,
            bounded=bounded,
        ),
    ]


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for line in bench_openai_agents(size, synchronous=sys.argv[2] if len(sys.argv) > 2 else "FULL"):
        print(line)
