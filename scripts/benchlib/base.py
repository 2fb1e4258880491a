"""What every measured store offers the benchmark: append one message per transaction, append a
batch in one transaction, load a whole session, and build the next model context under a budget."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from benchlib.workload import Msg

SESSION = "bench-session"


class Peer:
    """One store, used through its own normal public API."""

    name: ClassVar[str]
    """Short name (``--only``, worker tasks)."""
    label: ClassVar[str]
    """Name in the tables."""
    packages: ClassVar[tuple[str, ...]] = ()
    """Distributions whose versions the results list."""
    durability: ClassVar[str] = ""
    """What the benchmark set (or could not set) for durability."""
    strategy: ClassVar[str] = ""
    """How it builds a context under the budget."""
    counts_at_append: ClassVar[bool] = False
    """True when the store keeps token counts, so a build needs no counting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = 0

    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def append_one(self, msg: Msg) -> None:
        """Append one message in its own durable transaction."""
        raise NotImplementedError

    def append_batch(self, msgs: list[Msg]) -> None:
        """Append messages in one transaction."""
        raise NotImplementedError

    def after_bulk(self) -> None:
        """Work a store does once after a bulk load before builds (turnlog: count, index)."""

    def load(self) -> list[Any]:
        """The whole session, decoded."""
        raise NotImplementedError

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        """The next model context (OpenAI chat messages) and its token count."""
        raise NotImplementedError

    def files(self) -> list[Path]:
        """The files the store keeps."""
        base = str(self.path)
        return [Path(p) for p in (base, base + "-wal", base + "-shm", base + "-journal") if os.path.exists(p)]

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files())
