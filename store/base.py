"""The store's public contract, independent of any database: what an event log must do, and the
records it returns. The SQLite log implements it; other backends must pass the same contract tests."""

from __future__ import annotations

import abc
import contextlib
import difflib
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from turnlog.store.errors import StoreError, UnknownSessionError
from turnlog.store.events import Event
from turnlog.store.tokenizer import Tokenizer

TokenCounting = Literal["deferred", "inline"]
"""When a store counts an event's tokens: after the commit (the next catch-up), or before it."""


def check_token_counting(value: object) -> None:
    """StoreError unless ``value`` is a :data:`TokenCounting` (checked before a store is opened, so
    a bad value leaves nothing behind)."""
    if value not in ("deferred", "inline"):
        raise StoreError(f"token_counting must be 'deferred' or 'inline', not {value!r}")


class ExpectedVersion(enum.Enum):
    """Special values for ``expected_version``."""

    ANY = "any version"
    """Append whatever the session's head is (no concurrency check)."""
    NO_SESSION = "no session (a new one)"
    """The session must not exist yet."""

    def __str__(self) -> str:
        return self.value


ANY = ExpectedVersion.ANY
NO_SESSION = ExpectedVersion.NO_SESSION

Expected = ExpectedVersion | int


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored: the event and the columns the store assigned to it."""

    position: int
    """Global position in the log, 1, 2, 3, ... with no gaps."""
    session_id: str
    """The session it belongs to."""
    version: int
    """Its version within the session, 1, 2, 3, ..."""
    event: Event
    """The event itself (upcast to the current schema)."""
    tokens: int | None
    """Tokens of its text with the store's tokenizer. Readers count deferred events first, so only
    the records returned by append itself can still say None (counting runs after the commit)."""
    recorded_at: str
    """When the store committed it (UTC, ISO 8601)."""
    prev_hash: str
    """Hash of the session's previous event (for a fork's first event, its parent's event at the fork
    version; for a session's first event, 64 zeros): the session's chain that verify checks."""
    hash: str
    """This event's hash (store.chain: its fields, prev_hash and the salted digest of its payload)."""

    @property
    def event_id(self) -> str:
        return self.event.event_id

    @property
    def type(self) -> str:
        return self.event.type

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON data: envelope columns plus the event's fields."""
        return {
            "position": self.position,
            "session_id": self.session_id,
            "version": self.version,
            "event_id": self.event.event_id,
            "type": self.event.type,
            "schema_version": self.event.schema_version,
            "tokens": self.tokens,
            "recorded_at": self.recorded_at,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
            "event": self.event.model_dump(
                mode="json", exclude={"type", "schema_version", "event_id"}, exclude_none=True
            ),
        }


@dataclass(frozen=True, slots=True)
class OriginItem:
    """Where a stored event sits and the framework item its ``origin`` carries, read without
    decoding the event: what an adapter's full read needs (see :meth:`EventStore.read_origins`)."""

    position: int
    """Global position in the log."""
    version: int
    """Its version within the session."""
    type: str
    """The event's type."""
    framework: str | None
    """Its ``origin.framework``; None when the event has no origin."""
    item: Any
    """Its ``origin.item`` (None when it has no origin)."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session as the log sees it."""

    session_id: str
    head_version: int
    event_count: int
    tokens: int
    """Sum of the stored token counts of its events."""
    first_position: int
    last_position: int
    first_recorded_at: str
    last_recorded_at: str


@dataclass(frozen=True, slots=True)
class Blob:
    """Stored content, addressed by the sha256 of its UTF-8 bytes."""

    id: str
    size: int
    text: str


@dataclass(slots=True)
class VerifyReport:
    """What verify found. ``ok`` is True when nothing is wrong."""

    events: int = 0
    head_hash: str = ""
    first_bad_position: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class EventStore(abc.ABC):
    """An append-only, hash-chained log of agent-session events."""

    tokenizer: Tokenizer

    @property
    @abc.abstractmethod
    def salt(self) -> bytes:
        """The store's salt: the key of its payload digests (store.chain). A copy carries it."""

    @abc.abstractmethod
    def adopt_salt(self, salt: bytes) -> None:
        """Take another store's salt (``turnlog copy`` into an empty store, so hashes stay alike);
        refused once the store holds an event."""

    @abc.abstractmethod
    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: Expected = ANY,
        recorded_at: Sequence[str] | None = None,
        bounded: bool = True,
    ) -> list[RecordedEvent]:
        """Append a batch atomically: all of it or nothing. Returns the recorded events.

        A retried batch whose ids are all stored with the same content returns the stored records
        and writes nothing; a batch of which only part is stored raises DuplicateEventError. A stale
        ``expected_version`` raises VersionConflictError.

        ``recorded_at`` gives each event its original time (ISO 8601 with a UTC offset), for an
        import that restores an export; by default every event gets the time of the append.
        ``bounded=False`` lifts the backend's limit on the events of one batch (an import stores
        each session in one transaction, whatever its size).
        """

    @abc.abstractmethod
    def read_session(
        self, session_id: str, *, from_version: int = 1, to_version: int | None = None, own: bool = False
    ) -> list[RecordedEvent]:
        """The session's events with from_version <= version <= to_version, in order. A fork's
        history includes its parent's events up to the fork version, unless ``own``."""

    @abc.abstractmethod
    def first_event(self, session_id: str) -> RecordedEvent | None:
        """The session's own first event, if it has any."""

    @abc.abstractmethod
    def read_versions(self, session_id: str, versions: Sequence[int]) -> list[RecordedEvent]:
        """The session's events with these versions, in order (missing versions are left out)."""

    @abc.abstractmethod
    def read_origins(self, session_id: str, *, newest: int | None = None) -> list[OriginItem]:
        """The session's events (a fork's shared prefix included; only the ``newest`` ones when
        given), oldest first, as their place and the framework item each carries in its
        ``origin``. Rows are trusted as written (no event is validated: ``verify`` checks them),
        so a framework's full read costs about what its own backend's does."""

    @abc.abstractmethod
    def version_at(self, session_id: str, position: int) -> int:
        """The session's last version at or before a global position (0 if none)."""

    @abc.abstractmethod
    def read_tail(self, session_id: str, limit: int) -> list[RecordedEvent]:
        """The session's newest ``limit`` events, in log order."""

    @abc.abstractmethod
    def iter_after(
        self, position: int = 0, *, types: Sequence[str] | None = None, batch: int = 1000
    ) -> Iterator[RecordedEvent]:
        """Every event after a global position, in order (optionally only some types)."""

    @abc.abstractmethod
    def get_event(self, event_id: str) -> RecordedEvent:
        """One event by id, or UnknownEventError."""

    @abc.abstractmethod
    def find_event(self, session_id: str, ref: str) -> RecordedEvent:
        """An event of the session by its id or a unique prefix of it (6 characters or more)."""

    @abc.abstractmethod
    def head_version(self, session_id: str) -> int:
        """The session's last version; 0 when it has no events."""

    @abc.abstractmethod
    def head_position(self) -> int:
        """The last global position; 0 for an empty store."""

    @abc.abstractmethod
    def sessions(self) -> list[SessionSummary]:
        """Every session with its head version, event count and token total."""

    @abc.abstractmethod
    def get_blob(self, blob_id: str) -> Blob:
        """Content by sha256 id, or UnknownArtifactError."""

    @abc.abstractmethod
    def catch_up_tokens(self) -> int:
        """Count the tokens of events stored without a count; returns how many were counted."""

    @abc.abstractmethod
    def verify(self, *, quick: bool = False) -> VerifyReport:
        """Check the hash chain, the content blobs and the database's integrity (``quick``: the
        database's faster check, where it has one)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources."""

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the store is closed, before its connection goes (work left for later,
        such as a deferred catch-up of the projections). A backend without such hooks refuses."""
        raise NotImplementedError(f"{type(self).__name__} has no close hooks")

    def require_session(self, session_id: str) -> int:
        """The session's head version, or UnknownSessionError naming the closest session ids."""
        head = self.head_version(session_id)
        if head == 0:
            names = [s.session_id for s in self.sessions()]
            close = difflib.get_close_matches(session_id, names, n=3, cutoff=0.5)
            raise UnknownSessionError(session_id, close)
        return head

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Store(EventStore):
    """An event log that also holds the projections' tables, in the same database: what everything
    above ``store/`` works with (a backend implements it; the projections never see which). Reads
    and writes of projection rows go through connections whose dialect :func:`store.dialect.dialect_of`
    names; projections write portable SQL and the neutral DDL form."""

    path: str
    """Where the store is (a file path, or a server's URL without its password)."""
    readonly: bool
    """Opened for reading only: nothing is ever written; what is not materialized yet is folded in
    the reader's own scratch space."""

    @abc.abstractmethod
    def reading(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for a consistent read (one snapshot) across several statements."""

    def reading_on(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """Inside the block, this thread's readings (and the log's reads) use ``conn``, a
        transaction of this store this thread has open: so a projection's apply can build from
        rows not committed yet. SQLite's readings inside its transaction already do."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def atomic(self, *, durable: bool = True, wait: bool = True) -> contextlib.AbstractContextManager[Any]:
        """A connection in a write transaction: committed when the block ends, rolled back if it
        raises. ``wait=False``: raise LockBusy at once when another writer holds the store's lock
        (a backend whose lock is only ever held for a commit may wait anyway)."""

    @abc.abstractmethod
    def within_append(self, hook: Callable[[Any, Sequence[RecordedEvent]], None]) -> None:
        """Call ``hook(connection, records)`` inside every append's transaction, before its commit."""

    @abc.abstractmethod
    def on_append(self, hook: Callable[[Sequence[RecordedEvent]], None]) -> None:
        """Call ``hook(records)`` after every append that stored events has committed."""

    @abc.abstractmethod
    def counted_position(self) -> int:
        """The position up to which every event has its token count."""

    @abc.abstractmethod
    def count_pending(self, limit: int = 2000) -> tuple[list[tuple[int, int]], int] | None:
        """Count up to ``limit`` events stored without a token count (outside any transaction)."""

    @abc.abstractmethod
    def count_event_tokens(self, event: Event) -> int:
        """The tokens an event adds, with this store's tokenizer."""
