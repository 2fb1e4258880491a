"""A batch append's stored bytes and hashes (issue 20, batch append at the floor): whatever route the
append takes to make them (blobs hashed and compressed on a worker thread, the chain's material made
per batch), the rows, blobs and records are exactly what the chain format's reference functions
(store.chain.event_hash, payload_digest, order_hash) and the serializer give, and a fixed batch gives
the same bytes as before the change (golden digests, taken on main at 461f65f)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from turnlog.store import MessageAppended, SessionStarted, ToolCall, ToolReturned
from turnlog.store.append_rules import Prepared, prepare_event
from turnlog.store.chain import Heads, LinkedBatch, link_batch
from turnlog.store.events import ArtifactWritten
from turnlog.store.events_loop import StateRecorded
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
