"""A batch append's stored bytes and hashes (issue 20, batch append at the floor): whatever route the
append takes to make them (the short paths of prepare_event, the chain's material made per batch),
the rows, blobs and records are exactly what the chain format's reference functions
(store.chain.event_hash, payload_digest, order_hash) and the serializer give, and a fixed batch gives
the same bytes as before the change (golden digests, taken on main at 461f65f)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog
from turnlog.store import MessageAppended, SessionStarted, ToolCall, ToolReturned
from turnlog.store.append_rules import Prepared, prepare_event
from turnlog.store.base import RecordedEvent
from turnlog.store.chain import Heads, LinkedBatch, event_hash, link_batch, order_hash, payload_digest
from turnlog.store.errors import InvalidEventError
from turnlog.store.events import ArtifactWritten
from turnlog.store.events_loop import StateRecorded
from turnlog.store.rows_plain import decode_blob
from turnlog.store.tokenizer import load_tokenizer

SALT = bytes(range(32))
AT = "2026-05-01T12:34:56.789012+00:00"


def _text(rng: random.Random, size: int) -> str:
    """Text that compresses like a real tool output (repeated words) with some non-ASCII in it."""
    words = ["alpha", "beta", "gamma", "délta", "漢字", "😀", "line\n", '"q"', "\\", "\t"]
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)[:size]


def fixed_events() -> list[Any]:
    """A batch of every shape an append stores differently, with fixed ids and contents."""
    rng = random.Random(20)
    noise = "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(40_000))  # does not compress
    events: list[Any] = [
        SessionStarted(event_id="e-start", title="golden", metadata={"k": [1, "é"]}),
        MessageAppended(event_id="e-system", role="system", content=_text(rng, 3000)),
        MessageAppended(event_id="e-user", role="user", content="plain"),
        MessageAppended(
            event_id="e-call",
            role="assistant",
            tool_calls=(ToolCall(id="c1", name="grep", arguments='{"pattern": "x"}'),),
        ),
        ToolReturned(event_id="e-small", tool_call_id="c1", tool_name="grep", content="small"),
        ToolReturned(event_id="e-mid", tool_call_id="c1", content=_text(rng, 5000)),
        ToolReturned(event_id="e-big", tool_call_id="c1", content=_text(rng, 100_000), is_error=True),
        ToolReturned(event_id="e-noise", tool_call_id="c1", content=noise),
        ToolReturned(event_id="e-again", tool_call_id="c1", content=_text(random.Random(1), 5000)),
        ToolReturned(event_id="e-same", tool_call_id="c1", content=_text(random.Random(1), 5000)),
        MessageAppended(event_id="e-long", role="assistant", content=_text(rng, 50_000)),
        ArtifactWritten(event_id="e-artifact", name="a.txt", content=_text(rng, 40_000)),
        StateRecorded(
            event_id="e-state",
            framework="f",
            namespace="n",
            key="k",
            media_type="text/plain",
            content=_text(rng, 70_000),
        ),
    ]
    events += [
        MessageAppended(event_id=f"e-{i}", role="user" if i % 2 else "assistant", content=_text(rng, i * 37))
        for i in range(40)
    ]
    return events


def _digest_of(batch: LinkedBatch) -> tuple[str, str, str]:
    """Digests of the rows, the blobs and the records of a linked batch."""
    rows = hashlib.sha256(repr(batch.rows).encode("utf-8", "surrogateescape")).hexdigest()
    blobs = hashlib.sha256(repr(sorted(batch.blobs.items())).encode()).hexdigest()
    made = [(r.position, r.version, r.hash, r.prev_hash, r.event.model_dump_json()) for r in batch.records]
    records = hashlib.sha256(repr(made).encode()).hexdigest()
    return rows, blobs, records


def link_fixed(prepared: list[Prepared]) -> LinkedBatch:
    heads = Heads(7, "ab" * 32, 41, "cd" * 32)
    return link_batch("golden-session", prepared, heads, salt=SALT, recorded_at=AT)


GOLDEN = (
    "2a3f81a1131ddf98e2ac8d3fd79a4a5778f19dbc2ed2dac708b2ee722149043d",
    "e807d675101040453c23b88fd70698c276bdb1d86d2dac8fb5dd4aa375d77c70",
    "227bd6d4bfa23b84bc3b257c72452e60b9b989b5f402e3fb98bcb80f42f1ed84",
)
"""_digest_of the fixed batch's link, computed by main at 461f65f (before this change)."""


def test_a_fixed_batch_links_to_the_bytes_main_stored() -> None:
    tokenizer = load_tokenizer()
    prepared = [prepare_event(e, i, tokenizer, None) for i, e in enumerate(fixed_events(), 1)]
    assert _digest_of(link_fixed(prepared)) == GOLDEN


# --- every route against the chain format's reference functions -----------------------------------


def _reference_check(session_id: str, prepared: list[Prepared], batch: LinkedBatch, heads: Heads) -> None:
    """Each row, blob and record of ``batch`` is what the format's reference functions make."""
    prev, order = heads.prev_hash, heads.order_hash
    assert len(batch.rows) == len(batch.records) == len(prepared)
    for offset, (row, record, item) in enumerate(zip(batch.rows, batch.records, prepared, strict=True), 1):
        event = item.event
        content = getattr(event, "content", None)
        blob_id = row[7]
        if blob_id is not None:
            assert isinstance(content, str)
            data = content.encode()
            assert blob_id == hashlib.sha256(data).hexdigest() == event.artifact_id
            stored_id, size, codec, packed = batch.blobs[blob_id]
            assert (stored_id, size) == (blob_id, len(data))
            assert decode_blob(codec, packed) == data
            assert codec == ("zstd" if len(data) >= 32 * 1024 and len(packed) < len(data) * 0.9 else "raw")
            if codec == "zstd":
                assert packed == zstandard.ZstdCompressor(level=1).compress(data)
        exclude = {"type", "schema_version", "event_id"} | ({"content"} if blob_id else set())
        assert row[6] == event.model_dump_json(exclude=exclude, exclude_none=True)
        digest = payload_digest(SALT, row[6])
        expected = event_hash(
            session_id, heads.version + offset, prev, event.event_id, event.type, event.schema_version,
            digest, blob_id, AT,
        )  # fmt: skip
        assert heads.position is not None
        order = order_hash(order, heads.position + offset, expected)
        assert row == (
            heads.position + offset, session_id, heads.version + offset, event.event_id, event.type,
            event.schema_version, row[6], blob_id, item.tokens, AT, prev, expected, digest, order,
        )  # fmt: skip
        assert record == RecordedEvent(
            heads.position + offset,
            session_id,
            heads.version + offset,
            event,
            item.tokens,
            AT,
            prev,
            expected,
        )
        prev = expected


_SIZES = st.sampled_from([0, 5, 1024, 1025, 4096, 20_000, 32 * 1024 - 1, 32 * 1024, 70_000])


@st.composite
def _events(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["message", "tool", "artifact"]))
    size = draw(_SIZES)
    alphabet = draw(st.sampled_from(["ab\n", 'aé漢😀 "\\', "xyz0123456789"]))
    seed = draw(st.integers(0, 2**16))
    text = "".join(random.Random(seed).choice(alphabet) for _ in range(size))
    if kind == "message":
        return MessageAppended(role="user", content=text)
    if kind == "tool":
        return ToolReturned(tool_call_id="c1", tool_name="t", content=text, is_error=draw(st.booleans()))
    return ArtifactWritten(name="a.txt", content=text)


@settings(max_examples=40, deadline=None)
@given(st.lists(_events(), min_size=1, max_size=12))
def test_every_route_makes_the_reference_rows(events: list[Any]) -> None:
    tokenizer = load_tokenizer()
    prepared = [prepare_event(e, i, tokenizer, lambda _: 3) for i, e in enumerate(events, 1)]
    heads = Heads(2, "ef" * 32, 10, "12" * 32)
    batch = link_batch("s", prepared, heads, salt=SALT, recorded_at=AT)
    _reference_check("s", prepared, batch, heads)


def test_given_times_and_a_batch_without_positions_link_as_the_reference_says() -> None:
    """link_batch's two other routes: each event recorded at its own given time (an import), and a
    batch placed in no order yet (PostgreSQL stamps positions after its commit): rows and records
    as event_hash and RecordedEvent's own ``__init__`` make them."""
    tokenizer = load_tokenizer()
    events = fixed_events()[:6]
    prepared = [prepare_event(e, i, tokenizer, lambda _: 3) for i, e in enumerate(events, 1)]
    times = [f"2026-05-0{i}T00:00:00.00000{i}+00:00" for i in range(1, len(prepared) + 1)]
    batch = link_batch("s", prepared, Heads(4, "ef" * 32), salt=SALT, recorded_at=AT, times=times)
    prev = "ef" * 32
    for offset, (row, record, item, at) in enumerate(
        zip(batch.rows, batch.records, prepared, times, strict=True), 1
    ):
        event = item.event
        digest = payload_digest(SALT, item.payload)
        expected = event_hash(
            "s", 4 + offset, prev, event.event_id, event.type, event.schema_version, digest, row[7], at
        )
        assert row[0] is None and row[13] is None  # no position, no order hash
        assert row[9:13] == (at, prev, expected, digest)
        assert record == RecordedEvent(0, "s", 4 + offset, event, 3, at, prev, expected)
        prev = expected


def test_refused_large_content_is_refused_in_prepare() -> None:
    """Text the serializer refuses, a wrong artifact_id or size: refused before any transaction."""
    tokenizer = load_tokenizer()
    big = "x" * 50_000
    with pytest.raises(InvalidEventError, match="lone surrogate"):
        prepare_event(ToolReturned(tool_call_id="c1", tool_name="bad\udc80", content=big), 1, tokenizer, None)
    with pytest.raises(InvalidEventError, match="is not the sha256"):
        prepare_event(ToolReturned(tool_call_id="c1", content=big, artifact_id="0" * 64), 1, tokenizer, None)
    with pytest.raises(InvalidEventError, match="does not match"):
        prepare_event(ArtifactWritten(name="a", content=big, size=3), 1, tokenizer, None)


def test_a_batch_of_large_outputs_is_stored_verified_and_retried(tmp_path: Path) -> None:
    """Through the public API: stored, read back as given, verify passes, and the same batch sent
    again returns what was stored (its deferred payloads compared with the stored ones)."""
    store = turnlog.open_store(tmp_path / "t.db")
    events = fixed_events()
    first = store.append("golden", events, expected_version=0)
    again = store.append("golden", events, expected_version=0)
    assert [r.hash for r in again] == [r.hash for r in first]
    read = store.read_session("golden")
    assert [r.event for r in read] == [r.event for r in first]
    large = [r.event for r in read if isinstance(r.event, ToolReturned) and len(r.event.content) > 1024]
    assert len(large) == 5 and all(e.artifact_id for e in large)
    assert store.verify().ok
    store.close()
