"""Which events of a session are live (docs/events.md): a pure fold over the session's events in
version order, in which a ``session_rewound`` returns to the live set of an earlier version and a
``message_removed`` takes messages out. Every projection that shows the conversation reads this.

The fold keeps the states as a tree (each version is a node; a rewind makes its version an alias of
the node it returns to), so moving between two states costs the path between them: a rewind pays
for what it undoes and brings back, and an ordinary event pays O(1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from turnlog.projections.live_ranges import COMPENSATING_TYPES as COMPENSATING_TYPES
from turnlog.projections.live_ranges import marks
from turnlog.store import (
    Event,
    MessageAppended,
    MessageRemoved,
    OriginItem,
    RecordedEvent,
    SessionRewound,
    Store,
    ToolReturned,
)


@dataclass(slots=True)
class _Node:
    parent: int
    depth: int
    added: int | None  # the version this node adds to its parent's live set, or
    removed: frozenset[int]  # the versions it takes out of it


@dataclass(frozen=True, slots=True)
class Change:
    """How one event changed the live set."""

    dead: frozenset[int]
    """Versions that stopped being live."""
    revived: frozenset[int]
    """Versions that became live again (a rewind past a removal or an earlier rewind)."""
    added: int | None
    """The event's own version when it became live (any event but a compensating one)."""


class LiveFold:
    """The live set of one session, advanced one event at a time in version order."""

    def __init__(self) -> None:
        self._nodes: list[_Node] = [_Node(parent=-1, depth=0, added=None, removed=frozenset())]
        self._node_of: dict[int, int] = {0: 0}
        self._current = 0
        self.live: set[int] = set()
        """The versions live after the last event applied."""
        self.head = 0
        """The last version applied."""
        self._calls: dict[int, tuple[str, ...]] = {}  # assistant version -> its call ids
        self._latest_call: dict[str, int] = {}  # call id -> latest assistant version with it
        self._answers: dict[int, list[int]] = {}  # assistant version -> tool returns answering it
        self._version_of: dict[str, int] = {}  # event id -> version, for removals

    def apply(self, version: int, event: Event) -> Change:
        """Apply the event stored at ``version`` (the next one: versions come in order)."""
        if version <= self.head:
            raise ValueError(f"version {version} applied after version {self.head}: versions go in order")
        self.head = version
        self._version_of[event.event_id] = version
        if isinstance(event, SessionRewound):
            target = self._node_of.get(event.to_version)
            if target is None or event.to_version >= version:
                raise ValueError(f"version {version}: rewind to unknown version {event.to_version}")
            dead, revived = self._move(target)
            self._node_of[version] = target
            return Change(frozenset(dead), frozenset(revived), None)
        if isinstance(event, MessageRemoved):
            removed: set[int] = set()
            for event_id in event.target_event_ids:
                target_version = self._version_of.get(event_id)
                if target_version is None or target_version not in self.live:
                    continue  # a target that is not live is ignored
                removed.add(target_version)
                removed.update(v for v in self._answers.get(target_version, ()) if v in self.live)
            self._push(version, None, frozenset(removed))
            self.live -= removed
            return Change(frozenset(removed), frozenset(), None)
        if isinstance(event, MessageAppended) and event.tool_calls:
            ids = tuple(call.id for call in event.tool_calls)
            self._calls[version] = ids
            for call_id in ids:
                self._latest_call[call_id] = version
        elif isinstance(event, ToolReturned):
            call = self._latest_call.get(event.tool_call_id)
            if call is not None:
                self._answers.setdefault(call, []).append(version)
        self._push(version, version, frozenset())
        self.live.add(version)
        return Change(frozenset(), frozenset(), version)

    def live_at(self, version: int) -> set[int]:
        """The live set as it was after ``version`` (0: the empty set). Costs the path between the
        two states, twice; the fold's own state is unchanged."""
        target = self._node_of.get(version)
        if target is None:
            raise ValueError(f"version {version} has not been applied (head is {self.head})")
        current = self._current
        self._move(target)
        result = set(self.live)
        self._move(current)
        return result

    def _push(self, version: int, added: int | None, removed: frozenset[int]) -> None:
        parent = self._nodes[self._current]
        self._nodes.append(_Node(self._current, parent.depth + 1, added, removed))
        self._current = len(self._nodes) - 1
        self._node_of[version] = self._current

    def _move(self, target: int) -> tuple[set[int], set[int]]:
        """Make ``target`` the current state; returns (versions no longer live, versions live again)."""
        before = set(self.live)
        up, down = self._current, target
        downs: list[_Node] = []
        while up != down:
            if self._nodes[up].depth >= self._nodes[down].depth:
                node = self._nodes[up]
                if node.added is not None:
                    self.live.discard(node.added)
                self.live |= node.removed
                up = node.parent
            else:
                node = self._nodes[down]
                downs.append(node)
                down = node.parent
        for node in reversed(downs):
            if node.added is not None:
                self.live.add(node.added)
            self.live -= node.removed
        self._current = target
        return before - self.live, self.live - before


def live_versions(records: Iterable[RecordedEvent]) -> set[int]:
    """The versions of a session's records (given in version order, from its first version) that
    are live after the last of them."""
    fold = LiveFold()
    for record in records:
        fold.apply(record.version, record.event)
    return fold.live


def live_events(store: Store, session_id: str, *, at_version: int | None = None) -> list[RecordedEvent]:
    """The session's live events (a fork's shared prefix included), in version order, as of the
    session's version ``at_version`` (default: its head)."""
    records = store.read_session(session_id, to_version=at_version)
    live = live_versions(records)
    return [r for r in records if r.version in live]


def live_marks(
    store: Store, session_id: str, records: Sequence[RecordedEvent] | Sequence[OriginItem]
) -> list[bool]:
    """For records of one session: whether each is live now (the materialized live index, so the
    cost is the records given and the session's ranges that are not live, not its length)."""
    from turnlog.projections.registry import materializer  # here: the registry imports the live index

    materializer(store).catch_up()
    with store.reading() as conn:
        return marks(conn, session_id, store.head_position(), records)
