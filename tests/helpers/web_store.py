"""A store for the viewer's tests: the demo coding session with a recorded manifest on its last call,
a summary, a fork, and a session whose every text is hostile HTML."""

from __future__ import annotations

from pathlib import Path

from turnlog.actions import fork_session
from turnlog.compaction import CompactionOptions, compact
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.store import (
    ArtifactWritten,
    MessageAppended,
    SessionStarted,
    Store,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    parse_events_json,
)

SAMPLE = Path(__file__).parent.parent.parent / "scripts" / "data" / "coding_session.jsonl"
SCRIPT = "<script>alert(1)</script>"
HOSTILE = "evil<b>"
"""A session id holding HTML (ids may hold anything but whitespace)."""
RECORDED_BUDGET = 4000


def fill(store: Store) -> None:
    """Sessions ``fix`` (8 calls, the last built and recorded with a 4,000-token budget, then a
    summary and a 9th call), ``fix-retry`` (a fork of it) and :data:`HOSTILE`."""
    store.append("fix", parse_events_json(SAMPLE.read_text()))
    store.append("fix", [MessageAppended(role="user", content="Add the changelog entry too.")])
    build_context(store, "fix", ContextPolicy(budget=RECORDED_BUDGET, max_tool_tokens=200), record=True,
                  run_id="run-4", model="gpt-4o")  # fmt: skip
    store.append(
        "fix",
        [
            MessageAppended(role="assistant", content="Added under Unreleased."),
            UsageRecorded(model="gpt-4o", input_tokens=1900, output_tokens=12, run_id="run-4"),
        ],
    )
    compact(store, "fix", ContextPolicy(budget=1200, max_tool_tokens=200),
            options=CompactionOptions(keep_last=4, allow_open_run=True))  # fmt: skip
    store.append(
        "fix",
        [
            MessageAppended(role="assistant", content="Done."),
            UsageRecorded(model="gpt-4o", input_tokens=900, output_tokens=3),
        ],
    )
    fork_session(store, "fix", 16, "fix-retry")
    store.append("fix-retry", [MessageAppended(role="user", content="Try another way.")])
    store.append(
        HOSTILE,
        [
            SessionStarted(title=f"title {SCRIPT}", model="gpt-4o"),
            MessageAppended(role="user", content=f"user says {SCRIPT}"),
            MessageAppended(
                role="assistant",
                content="",
                tool_calls=(ToolCall(id="c1", name="shell", arguments=f'{{"cmd": "{SCRIPT}"}}'),),
            ),
            ToolReturned(tool_call_id="c1", tool_name="shell", content=f"tool says {SCRIPT}"),
            ArtifactWritten(name=f"page{SCRIPT}.html", content=f"artifact says {SCRIPT}"),
            MessageAppended(role="assistant", content=f"answer {SCRIPT}"),
            UsageRecorded(model="gpt-4o", input_tokens=120, output_tokens=9),
        ],
    )
