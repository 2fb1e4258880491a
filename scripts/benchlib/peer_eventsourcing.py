"""The ``eventsourcing`` library's SQLite infrastructure: ``SQLiteApplicationRecorder`` on a
``SQLiteDatastore``, one stored event per message (its state is the message's chat JSON)."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from benchlib.base import SESSION, Peer
from benchlib.counting import dumps, to_chat, trim_tail
from benchlib.workload import Msg

ORIGINATOR = uuid.uuid5(uuid.NAMESPACE_URL, f"turnlog-bench:{SESSION}")
TOPIC = "turnlog_bench.messages:MessageAppended"


class EventsourcingPeer(Peer):
    name: ClassVar[str] = "eventsourcing"
    label: ClassVar[str] = "eventsourcing SQLite recorder"
    packages: ClassVar[tuple[str, ...]] = ("eventsourcing",)
    durability: ClassVar[str] = (
        "WAL set by the library; synchronous=FULL is SQLite's compiled default here (the library "
        "has no setting for it)"
    )
    strategy: ClassVar[str] = "select_events() (whole session), then the newest messages while they fit"

    def open(self) -> None:
        self.datastore = SQLiteDatastore(str(self.path))
        self.recorder = SQLiteApplicationRecorder(self.datastore)
        self.recorder.create_table()
        last = self.recorder.select_events(ORIGINATOR, desc=True, limit=1)
        self.version = last[0].originator_version if last else 0

    def close(self) -> None:
        self.datastore.close()

    def _stored(self, msg: Msg, version: int) -> StoredEvent:
        return StoredEvent(
            originator_id=ORIGINATOR,
            originator_version=version,
            topic=TOPIC,
            state=dumps(to_chat(msg)).encode(),
        )

    def append_one(self, msg: Msg) -> None:
        self.recorder.insert_events([self._stored(msg, self.version + 1)])
        self.version += 1

    def append_batch(self, msgs: list[Msg]) -> None:
        self.recorder.insert_events([self._stored(m, self.version + i) for i, m in enumerate(msgs, 1)])
        self.version += len(msgs)

    def load(self) -> list[Any]:
        return [json.loads(e.state) for e in self.recorder.select_events(ORIGINATOR)]

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        return trim_tail(self.load(), budget)
