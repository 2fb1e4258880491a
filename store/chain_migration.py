"""Moving a store's log from the v1 chain (one chain over the whole store, payload bytes hashed) to
the v2 chains (store.chain): the migration both backends run, in the migration's transaction.

The v1 chain is checked first, row by row: a store whose old chain does not check is not migrated
(re-hashing it would launder a change), and the error says where it breaks. Positions, versions,
event ids, payloads and times are kept; ``prev_hash`` and ``hash`` are recomputed, ``payload_digest``
and ``order_hash`` filled in. The old chain's head (hash and position) stays in the store's
metadata (``v1_head_hash``, ``v1_head_position``), so the old chain's end remains checkable against
a copy or a note kept elsewhere."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from turnlog.store.chain import (
    CHAIN_FORMAT,
    GENESIS_HASH,
    event_hash,
    event_hash_v1,
    new_salt,
    order_hash,
    payload_digest,
)
from turnlog.store.errors import CorruptStoreError

V1Row = tuple[int, str, int, str, str, int, str, str | None, str, str, str]
"""position, session_id, version, event_id, type, schema_version, payload, blob_id, recorded_at,
prev_hash, hash: what the migration reads of each row, in position order."""

Update = tuple[str, str, str, str, int]
"""prev_hash, hash, payload_digest, order_hash, position: what it writes back."""

CHUNK = 5000


class RelinkTarget(Protocol):
    """What a backend gives the migration: its rows in chunks, the write-back, lookups."""

    def rows_after(self, position: int, limit: int) -> Sequence[V1Row]: ...

    def write(self, updates: list[Update]) -> None: ...

    def hash_at(self, session_id: str, version: int) -> str | None:
        """The (already migrated) hash of a session's version, following its fork lineage."""

    def meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


def fork_of(event_type: str, payload: str) -> tuple[str, int] | None:
    """The (parent session, version) a session's first event forks at, None when it is no fork or
    cannot be read (verify reports an unreadable event on its own)."""
    if event_type != "session_started":
        return None
    try:
        parent = json.loads(payload).get("parent")
        return (str(parent["session_id"]), int(parent["version"])) if parent else None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def salt_of(target: RelinkTarget) -> bytes:
    """The store's salt, made and recorded (with the chain format) if it has none yet."""
    salt = target.meta("salt")
    if salt is None:
        salt = new_salt()
        target.set_meta("salt", salt)
    if target.meta("chain") is None:
        target.set_meta("chain", CHAIN_FORMAT)
    return bytes.fromhex(salt)


def relink(target: RelinkTarget, where: str) -> int:
    """Check the v1 chain and re-hash every event under v2; returns how many events were re-hashed."""
    salt = salt_of(target)
    v1_prev, expected, order = GENESIS_HASH, 1, GENESIS_HASH
    last_hash: dict[str, str] = {}
    done = 0
    after = 0
    while True:
        rows = target.rows_after(after, CHUNK)
        if not rows:
            break
        updates: list[Update] = []
        for pos, sid, version, event_id, etype, sv, payload, blob_id, at, prev, digest in rows:
            problem = _v1_problem(
                pos, expected, prev, v1_prev, digest, sid, version, event_id, etype, sv, payload, blob_id, at
            )
            if problem:
                raise CorruptStoreError(
                    f"{where}: {problem}; the store was not migrated to the v2 chain and is left as it "
                    "was (re-hashing would hide the change). Inspect it with the turnlog release that "
                    "wrote it (`turnlog verify`)"
                )
            v1_prev, expected = digest, pos + 1
            session_prev = last_hash.get(sid)
            if session_prev is None:
                session_prev = GENESIS_HASH
                parent = fork_of(etype, payload)
                if parent is not None:
                    target.write(updates)  # the parent's rows re-hashed before they are looked up
                    updates = []
                    found = target.hash_at(*parent)
                    session_prev = found if found is not None else GENESIS_HASH
            pd = payload_digest(salt, payload)
            new = event_hash(sid, version, session_prev, event_id, etype, sv, pd, blob_id, at)
            order = order_hash(order, pos, new)
            last_hash[sid] = new
            updates.append((session_prev, new, pd, order, pos))
        target.write(updates)
        done += len(rows)
        after = rows[-1][0]
    if done:
        target.set_meta("v1_head_hash", v1_prev)
        target.set_meta("v1_head_position", str(expected - 1))
    return done


def _v1_problem(
    pos: int,
    expected: int,
    prev: str,
    v1_prev: str,
    digest: str,
    *fields: Any,
) -> str | None:
    if pos != expected:
        return f"position {expected} is missing from the v1 chain"
    if prev != v1_prev:
        return f"position {pos}: prev_hash does not match the previous event (v1 chain)"
    sid, version, event_id, etype, sv, payload, blob_id, at = fields
    if event_hash_v1(prev, pos, sid, version, event_id, etype, sv, payload, blob_id, at) != digest:
        return f"position {pos}: content does not match its v1 hash (tampered)"
    return None


SetMeta = Callable[[str, str], None]
