"""Reproducible ids, clock and salt for documentation examples and their tests.

Off unless ``TURNLOG_DETERMINISTIC`` names a state file: then every new event id, the ``recorded_at``
clock, a new store's salt and the random parts of names (run and call ids, temporary files) come from
counters kept in that file, so the same commands run twice give byte-identical stores. The counters
live in a file, not in the process, because a README's commands are many processes that must never
repeat an id nor let the clock go back. Never set it for real data: anyone can predict the salt.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta

ENV = "TURNLOG_DETERMINISTIC"
"""The environment variable naming the state file; deterministic mode is on when it is non-empty."""

START = datetime(2026, 1, 1, tzinfo=UTC)
"""The deterministic clock's first reading; each reading after it is one millisecond later."""

_STATE = os.environ.get(ENV) or None


def active() -> bool:
    """Whether deterministic mode is on (the variable was set when turnlog was imported)."""
    return _STATE is not None


def _next(counter: str) -> int:
    """The next value (0, 1, 2, ...) of one counter of the state file, taken under a file lock so
    concurrent processes never get the same value."""
    import fcntl  # POSIX only: imported here so that turnlog itself never needs it

    assert _STATE is not None
    with open(_STATE, "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        text = file.read()
        counters: dict[str, int] = json.loads(text) if text.strip() else {}
        value = counters.get(counter, 0)
        counters[counter] = value + 1
        file.seek(0)
        file.truncate()
        file.write(json.dumps(counters, sort_keys=True))
    return value


def _digest(kind: str, value: int) -> str:
    return hashlib.sha256(f"turnlog-example-{kind}-{value}".encode()).hexdigest()


def event_id() -> str:
    """The next event id: a version 4 UUID in hex (as :func:`store.event_base.new_event_id`), hashed
    from a counter so that ids and their prefixes look as random as real ones."""
    bits = int(_digest("id", _next("ids"))[:32], 16)
    return f"{bits & ~((0xF000 << 64) | (0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48):032x}"


def now() -> str:
    """The next clock reading, in the store's ``recorded_at`` form: :data:`START` plus one millisecond
    per reading, so it only goes forward, across processes too."""
    moment = START + timedelta(milliseconds=_next("clock"))
    return moment.isoformat(timespec="microseconds")


def salt() -> str:
    """The next store salt: 32 bytes, as hex."""
    return _digest("salt", _next("salt"))


def token_hex(nbytes: int) -> str:
    """``secrets.token_hex(nbytes)``, or in deterministic mode the next counter's hash (at most 32
    bytes): the random part of a run or call id or a temporary name."""
    if _STATE is None:
        import secrets

        return secrets.token_hex(nbytes)
    return _digest("token", _next("tokens"))[: 2 * nbytes]
