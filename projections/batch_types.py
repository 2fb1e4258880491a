"""A catch-up's batch of records split by event type for each projection (projections.materialize)."""

from __future__ import annotations

from collections.abc import Iterable

from turnlog.store import RecordedEvent


class TypeFilter:
    """A batch of records, and each one's type read once: every projection takes its own types from
    it (a rebuild's batch is read once for all of them)."""

    __slots__ = ("present", "records", "types")

    def __init__(self, records: list[RecordedEvent]) -> None:
        self.records = records
        self.types = [r.event.type for r in records]
        self.present = frozenset(self.types)

    def after(self, types: tuple[str, ...] | None, own: int, start: int) -> list[RecordedEvent]:
        """The records a projection at checkpoint ``own`` takes from the batch read after ``start``:
        most often all of them (a rebuild, a catch-up), passed on without a filtering pass."""
        records = self.records
        if own <= start and types is None:
            return records
        if own <= start:
            wanted = frozenset(types or ())
            if self.present <= wanted:  # every type of the batch is the projection's: no pass
                return records
            if self.present.isdisjoint(wanted):
                return []
            return [r for r, t in zip(records, self.types, strict=True) if t in wanted]
        return [r for r in records if r.position > own and (types is None or r.event.type in types)]


def union_types(type_sets: Iterable[tuple[str, ...] | None]) -> tuple[str, ...] | None:
    wanted: set[str] = set()
    for types in type_sets:
        if types is None:
            return None
        wanted.update(types)
    return tuple(sorted(wanted))


__all__ = ["TypeFilter", "union_types"]
