"""``turnlog copy``: every event of one store into another — SQLite or PostgreSQL, either direction —
keeping event ids, positions, versions, ``recorded_at``, hashes and the store's salt (the key of its
payload digests, so that the same events hash alike on both ends). The destination must be empty or
hold a prefix of the source (same positions, same hashes): then the copy resumes after it. Anything
else is refused before a single event is written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from turnlog.store import ANY, RecordedEvent, Store, StoreError

BATCH = 500
"""Events per append (a run of one session's consecutive events, at most this many)."""


class CopyError(StoreError):
    """The destination is not empty and not a prefix of the source, or the copy diverged."""


@dataclass
class CopyResult:
    """What a copy did."""

    source_events: int
    already: int
    """Events the destination held before (a verified prefix)."""
    copied: int
    head_hash: str
    """The hash of the last event, the same on both ends."""


def copy_store(
    source: Store,
    destination: Store,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> CopyResult:
    """Copy every event of ``source`` that ``destination`` does not hold yet (see the module)."""
    if source.tokenizer.name != destination.tokenizer.name:
        raise CopyError(
            f"the stores count tokens with different tokenizers ({source.tokenizer.name} and "
            f"{destination.tokenizer.name}): create the destination with --tokenizer {source.tokenizer.name}"
        )
    total = source.head_position()
    held = destination.head_position()
    if held > total:
        raise CopyError(
            f"the destination holds {held:,} events, more than the source's {total:,}: it is not a copy of it"
        )
    if held == 0 and destination.salt != source.salt:
        destination.adopt_salt(source.salt)  # the payload digests, so the hashes, come out alike
    elif held and destination.salt != source.salt:
        raise CopyError(
            "the destination is not a prefix of the source: it was not made by a copy of it (another "
            "salt, so other hashes); copy into an empty store"
        )
    head_hash = ""
    if held:
        theirs = _event_at(destination, held)
        ours = _event_at(source, held)
        if theirs.hash != ours.hash or theirs.event_id != ours.event_id:
            raise CopyError(
                f"the destination is not a prefix of the source: their events at position {held:,} differ "
                f"({theirs.event_id} and {ours.event_id}); copy into an empty store"
            )
        head_hash = ours.hash
    copied = 0
    for run in _runs(source.iter_after(held)):
        stored = destination.append(run[0].session_id, [r.event for r in run], expected_version=ANY,
                                    recorded_at=[r.recorded_at for r in run])  # fmt: skip
        for mine, theirs in zip(stored, run, strict=True):
            if (mine.position, mine.version, mine.hash) != (theirs.position, theirs.version, theirs.hash):
                raise CopyError(
                    f"the copy diverged at position {theirs.position:,} (event {theirs.event_id}): the "
                    f"destination stored it at position {mine.position:,}, version {mine.version} with "
                    "another hash; another writer may be appending to it"
                )
        copied += len(run)
        head_hash = run[-1].hash
        if progress is not None:
            progress(held + copied, total)
    return CopyResult(total, held, copied, head_hash)


def _event_at(store: Store, position: int) -> RecordedEvent:
    for record in store.iter_after(position - 1, batch=1):
        return record
    raise CopyError(f"no event at position {position:,}")


def _runs(records: Iterator[RecordedEvent]) -> Iterator[list[RecordedEvent]]:
    """Consecutive events of one session, at most BATCH at a time, in log order."""
    run: list[RecordedEvent] = []
    for record in records:
        if run and (record.session_id != run[0].session_id or len(run) >= BATCH):
            yield run
            run = []
        run.append(record)
    if run:
        yield run


__all__ = ["CopyError", "CopyResult", "copy_store"]
