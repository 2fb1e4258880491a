"""``append`` for every backend: the arguments checked, the batch prepared by the backend-neutral
rules (store.append_rules), then the backend's own transaction, and a refused batch looked up in
case it is a retry of one already stored. A backend implements the few steps that touch its
database."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from turnlog.store.append_rules import Prepared, append_or_stored, check_arguments, check_unique_ids
from turnlog.store.base import ANY, EventStore, Expected, RecordedEvent
from turnlog.store.events import Event
from turnlog.store.rows import gc_paused


class BatchAppender(EventStore):
    """The shape of an append; subclasses give its steps."""

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: Expected = ANY,
        recorded_at: Sequence[str] | None = None,
        bounded: bool = True,
    ) -> list[RecordedEvent]:
        times = check_arguments(session_id, len(events), expected_version, recorded_at, bounded)
        with gc_paused():  # a batch makes many objects that all survive (see records_from_rows)
            prepared = [self._prepare(event, i) for i, event in enumerate(events, 1)]
        check_unique_ids(prepared)
        self._check_batch(prepared)
        if not prepared:
            return []
        records, fresh = append_or_stored(
            lambda: self._append_batch(session_id, prepared, expected_version, times),
            lambda: self._stored_batch(session_id, prepared),
            self._store_name(),
        )
        if fresh:
            self._appended(records)
        return records

    @abc.abstractmethod
    def _prepare(self, event: Any, index: int) -> Prepared:
        """The ``index``-th event of the batch checked and serialized (store.append_rules.prepare_event)."""

    @abc.abstractmethod
    def _append_batch(
        self, session_id: str, prepared: list[Prepared], expected_version: Expected, times: list[str] | None
    ) -> list[RecordedEvent]:
        """Store the batch in one transaction, or raise (StoredEventId for an event id already stored)."""

    @abc.abstractmethod
    def _stored_batch(self, session_id: str, prepared: list[Prepared]) -> list[RecordedEvent] | None:
        """The stored records of a batch already stored whole, None when none of it is (see is_retry)."""

    @abc.abstractmethod
    def _store_name(self) -> str:
        """The store, as messages name it."""

    def _check_batch(self, prepared: list[Prepared]) -> None:
        """What this backend cannot store, refused before any transaction (nothing by default)."""

    def _appended(self, records: list[RecordedEvent]) -> None:
        """After a commit that stored ``records`` (not after a retry that found them stored)."""
