"""The artifact index in the built context (seed 002, issue 16 item 2): one system message right after
the leading system messages, one line per live artifact path, sorted by path, capped at 32,768
characters and half the budget with a closing line, counted in the budget, kept before older
messages, off with ``index=False`` / ``--no-index``; the same lines as the tool's artifacts.index."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog import tool
from turnlog.actions import rewind_session
from turnlog.cli import cli
from turnlog.projections.artifact_index import INDEX_MAX_CHARS
from turnlog.projections.artifacts import artifact_index, list_artifacts, read_artifact
from turnlog.projections.context import PER_MESSAGE, ContextPolicy, build_context
from turnlog.projections.context_preamble import preamble_header, preamble_omitted
from turnlog.projections.context_types import role_costs
from turnlog.projections.ledger import audit
from turnlog.projections.replay import replay
from turnlog.store import (
    ArtifactWritten,
    ContextBuilt,
    MessageAppended,
    SQLiteStore,
    ToolCall,
    ToolReturned,
)

SID = "s"
HEADER = "Artifacts of this session ("


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    yield s
    s.close()


def start(store: SQLiteStore, sid: str = SID) -> None:
    store.append(
        sid,
        [
            MessageAppended(role="system", content="You are a careful agent."),
            MessageAppended(role="system", content="Answer briefly."),
            MessageAppended(role="user", content="Map the polynomial explorer."),
        ],
    )


def seventy(store: SQLiteStore, sid: str = SID) -> list[ArtifactWritten]:
    """70 artifacts like the real session: files of varying size, a few of them long."""
    written = [
        ArtifactWritten(
            name=f"docs/concepts/permutation-{i:02}.md",
            content=f"# Permutation {i}\n\n" + f"Concept {i} relates roots and coefficients. " * (1 + i % 7),
        )
        for i in range(70)
    ]
    store.append(sid, written)
    return written


def index_of(built: Any) -> Any:
    found = [m for m in built.messages if m.category == "index"]
    assert len(found) <= 1
    return found[0] if found else None


def lines_of(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("- `")]


def shown_ids(text: str) -> list[str]:
    return [re.match(r"- `([0-9a-f]{12})`", line).group(1) for line in lines_of(text)]  # type: ignore[union-attr]


# --- what it lists ---------------------------------------------------------------------------------


def test_seventy_artifacts_all_listed_right_after_the_system_messages(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    store.append(SID, [MessageAppended(role="assistant", content="Indexed.")])
    built = build_context(store, SID, ContextPolicy(budget=30_000))
    index = index_of(built)
    assert [m.category for m in built.messages[:4]] == ["system", "system", "index", "message"]
    assert built.messages[3].content == "Map the polynomial explorer."
    assert index.role == "system" and index.mode == "full" and index.event_ids == ()
    assert index.content.startswith(preamble_header(70))
    assert "not included here" in index.content and 'artifacts.read {"id": ID}' in index.content
    assert "`turnlog artifact ID`" in index.content
    assert len(lines_of(index.content)) == 70 and "more not listed" not in index.content
    # Every id shown fetches its artifact.
    for short in shown_ids(index.content)[:3]:
        assert read_artifact(store, short).text.startswith("# Permutation")
    # Its tokens follow the rule of every system message, and count in the total.
    tok = store.tokenizer
    assert index.tokens == PER_MESSAGE + role_costs(tok)["system"] + tok.count(index.content)
    assert built.total_tokens == 3 + sum(m.tokens for m in built.messages) <= 30_000
    assert built.entries[2].category == "index" and built.entries[2].event_ids == ()


def test_sorted_by_path_in_code_point_order_with_source_and_abstract(store: SQLiteStore) -> None:
    start(store)
    names = ["é.txt", "a.txt", "_x", "B.txt", "b/z.md", "b.txt", "Z"]
    store.append(SID, [ArtifactWritten(name=name, content=f"about {name}") for name in names])
    store.append(
        SID,
        [
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="fetch"),)),
            ToolReturned(tool_call_id="c1", tool_name="fetch", content="ok"),
            ArtifactWritten(name="long.txt", content="word " * 100 + "\n\n  tail", tool_call_id="c1"),
        ],
    )
    index = index_of(build_context(store, SID, ContextPolicy(budget=8000)))
    listed = lines_of(index.content)
    paths = [re.search(r" · `(.*)` — ", line).group(1) for line in listed]  # type: ignore[union-attr]
    assert (
        paths
        == sorted([*names, "long.txt"])
        == ["B.txt", "Z", "_x", "a.txt", "b.txt", "b/z.md", "long.txt", "é.txt"]
    )
    by_path = dict(zip(paths, listed, strict=True))
    assert " · user · `a.txt` — about a.txt" in by_path["a.txt"]
    # source is the artifact's own field: a tool call wrote it.
    long = by_path["long.txt"]
    assert " · tool · `long.txt` — " in long
    abstract = long.split(" — ", 1)[1]
    assert abstract.endswith("…") and len(abstract) <= 121 and "  " not in abstract


def test_newest_live_write_of_a_path_only(store: SQLiteStore) -> None:
    start(store)
    store.append(SID, [ArtifactWritten(name="plan.md", content="first plan")])
    store.append(SID, [ArtifactWritten(name="plan.md", content="second plan")])
    index = index_of(build_context(store, SID, ContextPolicy(budget=4000)))
    assert index.content.startswith(preamble_header(1))
    assert lines_of(index.content) == [lines_of(index.content)[0]]
    assert lines_of(index.content)[0].endswith("— second plan")


def test_the_turnlog_tools_own_results_are_not_listed_other_tool_outputs_are(store: SQLiteStore) -> None:
    start(store)
    store.append(
        SID,
        [
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="g1", name="grep"),)),
            ToolReturned(tool_call_id="g1", tool_name="grep", content="match\n" * 400),
        ],
    )
    big = tool.call(store, SID, {"module": "history", "method": "read", "input": {"mode": "tail", "n": 5}})
    assert len(big.encode()) > 1024  # kept as an artifact by the store
    assert any(a.name.startswith("turnlog output ") for a in list_artifacts(store, SID))
    index = index_of(build_context(store, SID, ContextPolicy(budget=8000)))
    listed = lines_of(index.content)
    assert len(listed) == 1 and listed[0].split(" · ")[2].startswith("`grep output g1` — match match")
    assert "turnlog output" not in index.content


# --- caps -------------------------------------------------------------------------------------------


def test_capped_at_32768_characters_with_the_count_left_out(store: SQLiteStore) -> None:
    start(store)
    store.append(
        SID,
        [
            ArtifactWritten(name=f"data/{'deep/' * 10}file-{i:04}.csv", content=f"row {i}, " * 40)
            for i in range(400)
        ],
    )
    index = index_of(build_context(store, SID, ContextPolicy(budget=200_000)))
    text = index.content
    assert index.mode == "capped" and len(text) <= INDEX_MAX_CHARS
    listed = len(lines_of(text))
    closing = text.split("\n")[-1]
    assert closing.startswith(f"… {400 - listed:,} more not listed") and 100 < listed < 400
    assert "artifacts.list" in closing
    # As many as fit: the first ones in path order.
    expected = sorted(list_artifacts(store, SID), key=lambda a: a.name)[:listed]
    assert shown_ids(text) == [a.short_id for a in expected]


@pytest.mark.parametrize("budget", [1200, 2000, 4000])
def test_never_more_than_half_the_budget(store: SQLiteStore, budget: int) -> None:
    start(store)
    seventy(store)
    built = build_context(store, SID, ContextPolicy(budget=budget))
    index = index_of(built)
    assert index is not None and index.mode == "capped" and index.tokens <= budget // 2
    listed = len(lines_of(index.content))
    assert 0 <= listed < 70
    assert index.content.split("\n")[-1].startswith(f"… {70 - listed:,} more not listed")
    assert built.total_tokens <= budget
    # Whole lines only, and as many as fit: one more line would not have.
    tok = store.tokenizer
    overhead = PER_MESSAGE + role_costs(tok)["system"]
    full = index_of(build_context(store, SID, ContextPolicy(budget=100_000))).content
    more = "\n".join([*full.split("\n")[: 2 + listed], preamble_omitted(69 - listed)])
    assert overhead + tok.count(more) > budget // 2


def test_a_tiny_budget_leaves_the_index_out_and_still_builds(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    built = build_context(store, SID, ContextPolicy(budget=120))
    assert index_of(built) is None
    assert [m.category for m in built.messages] == ["system", "system", "message"]
    assert built.total_tokens <= 120


def test_no_index_option_and_sessions_without_artifacts(store: SQLiteStore) -> None:
    start(store)
    store.append(SID, [MessageAppended(role="assistant", content="Nothing written yet.")])
    with_default = build_context(store, SID, ContextPolicy(budget=2000))
    without = build_context(store, SID, ContextPolicy(budget=2000, index=False))
    # No artifacts: the context is exactly what it was before the index existed.
    assert with_default.rendered == without.rendered and with_default.entries == without.entries
    assert with_default.total_tokens == without.total_tokens
    seventy(store)
    assert index_of(build_context(store, SID, ContextPolicy(budget=20_000))) is not None
    off = build_context(store, SID, ContextPolicy(budget=20_000, index=False))
    assert index_of(off) is None and off.rendered == without.rendered


def test_kept_when_older_messages_must_give_way(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    for i in range(200):
        store.append(
            SID,
            [
                MessageAppended(role="user", content=f"Step {i}: " + "explore the next permutation " * 10),
                MessageAppended(role="assistant", content=f"Done with step {i}. " + "roots moved " * 10),
            ],
        )
    built = build_context(store, SID, ContextPolicy(budget=9000))
    categories = [m.category for m in built.messages]
    assert categories[:4] == ["system", "system", "index", "message"]
    assert "notice" in categories and built.omitted_messages > 0
    index = index_of(built)
    assert len(lines_of(index.content)) == 70  # whole: it fits in half the budget
    assert built.messages[-1].content.startswith("Done with step 199.")
    assert built.total_tokens <= 9000


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.integers(min_value=60, max_value=12_000),
    count=st.integers(min_value=0, max_value=90),
    turns=st.integers(min_value=0, max_value=40),
    length=st.integers(min_value=0, max_value=400),
)
def test_always_within_budget_and_half_of_it(budget: int, count: int, turns: int, length: int) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        store.append(
            SID, [MessageAppended(role="system", content="sys"), MessageAppended(role="user", content="go")]
        )
        if count:
            store.append(
                SID,
                [ArtifactWritten(name=f"f{i:03}.txt", content="x y " * (length + i)) for i in range(count)],
            )
        for i in range(turns):
            store.append(SID, [MessageAppended(role="assistant", content=f"turn {i} " + "z " * length)])
        built = build_context(store, SID, ContextPolicy(budget=budget))
        assert built.total_tokens == 3 + sum(m.tokens for m in built.messages) <= budget
        index = index_of(built)
        if count == 0:
            assert index is None
        if index is not None:
            assert index.tokens <= budget // 2 and len(index.content) <= INDEX_MAX_CHARS
            tok = store.tokenizer
            assert index.tokens == PER_MESSAGE + role_costs(tok)["system"] + tok.count(index.content)
            listed = len(lines_of(index.content))
            if listed < count:
                closing = index.content.split("\n")[-1]
                assert closing.startswith(f"… {count - listed:,} more not listed (")
                assert closing.endswith("artifacts.list lists them all")
            assert [m.category for m in built.messages[:2]] == ["system", "index"]
        # Deterministic: the same log and policy give the same bytes (cached or not).
        again = build_context(store, SID, ContextPolicy(budget=budget))
        assert again.rendered == built.rendered
    finally:
        store.close()


# --- as of a position -------------------------------------------------------------------------------


def test_at_a_position_before_a_write_does_not_list_it(store: SQLiteStore) -> None:
    start(store)
    first = store.append(SID, [ArtifactWritten(name="a.md", content="alpha")])
    store.append(SID, [MessageAppended(role="assistant", content="wrote a")])
    store.append(SID, [ArtifactWritten(name="b.md", content="beta")])
    then = build_context(store, SID, ContextPolicy(budget=4000), at=first[0].position)
    assert [line.split(" · ")[2] for line in lines_of(index_of(then).content)] == ["`a.md` — alpha"]
    before = build_context(store, SID, ContextPolicy(budget=4000), at=first[0].position - 1)
    assert index_of(before) is None
    now = build_context(store, SID, ContextPolicy(budget=4000))
    assert len(lines_of(index_of(now).content)) == 2


def test_a_rewound_write_is_not_listed(store: SQLiteStore) -> None:
    start(store)
    store.append(SID, [ArtifactWritten(name="keep.md", content="kept")])
    head = store.append(SID, [MessageAppended(role="assistant", content="ok")])[0].version
    store.append(
        SID,
        [ArtifactWritten(name="undone.md", content="undone"), ArtifactWritten(name="keep.md", content="v2")],
    )
    before_rewind = build_context(store, SID, ContextPolicy(budget=4000))
    assert [line.split(" · ")[2] for line in lines_of(index_of(before_rewind).content)] == [
        "`keep.md` — v2",
        "`undone.md` — undone",
    ]
    rewind_session(store, SID, head)
    after = build_context(store, SID, ContextPolicy(budget=4000))
    assert [line.split(" · ")[2] for line in lines_of(index_of(after).content)] == ["`keep.md` — kept"]
    # The API's index and the tool's agree: a rewound write is not listed anywhere.
    assert "undone" not in artifact_index(store, SID)
    assert "undone" not in tool.call(
        store, SID, {"module": "artifacts", "method": "index", "input": {}}, record=False
    )
    # Replayed before the rewind, it was there.
    replayed = build_context(store, SID, ContextPolicy(budget=4000), at=before_rewind.at_position)
    assert replayed.rendered == before_rewind.rendered


# --- formats, manifest, ledger, replay ----------------------------------------------------------------


def test_formats_carry_it_as_a_system_message(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    openai = build_context(store, SID, ContextPolicy(budget=20_000)).rendered
    assert openai[2]["role"] == "system" and openai[2]["content"].startswith(HEADER)
    anthropic = build_context(store, SID, ContextPolicy(budget=20_000, format="anthropic")).rendered
    # Before the first user message: it joins the system prompt.
    assert anthropic["system"].startswith("You are a careful agent.\n\nAnswer briefly.\n\n" + HEADER)
    assert all(HEADER not in json.dumps(turn) for turn in anthropic["messages"])
    text = build_context(store, SID, ContextPolicy(budget=20_000, format="text")).rendered
    tokens = index_of(build_context(store, SID, ContextPolicy(budget=20_000))).tokens
    assert f"── system · {tokens} tokens\n{HEADER}" in text


def test_recorded_manifest_ledger_and_replay(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    policy = ContextPolicy(budget=20_000)
    built = build_context(store, SID, policy, record=True, run_id="r1", model="gpt-4o")
    recorded = store.read_session(SID)[-1]
    assert isinstance(recorded.event, ContextBuilt)
    assert [e.category for e in recorded.event.entries][:3] == ["system", "system", "index"]
    assert recorded.event.policy["index"] is True
    by_category = {row.key: row for row in audit(store, SID, by="category").rows}
    assert by_category["index"].sent == index_of(built).tokens
    # A policy recorded before the field existed still loads (the default applies).
    old = {k: v for k, v in recorded.event.policy.items() if k != "index"}
    assert ContextPolicy.model_validate(old).index is True
    # Replay shows the recorded call from its manifest, index included.
    store.append(SID, [MessageAppended(role="assistant", content="Read the index.")])
    [from_manifest] = replay(store, SID, policy)
    assert from_manifest.source == "manifest" and from_manifest.entries == built.entries
    # A call without a manifest is rebuilt with the same bytes as a build as of that position.
    store.append(SID, [MessageAppended(role="user", content="Fetch permutation 3.")])
    answer = store.append(SID, [MessageAppended(role="assistant", content="Fetched.")])[0]
    calls = replay(store, SID, policy)
    rebuilt = calls[-1].context
    assert rebuilt is not None and calls[-1].source == "rebuilt"
    direct = build_context(store, SID, policy, at=answer.position - 1)
    assert rebuilt.rendered == direct.rendered and index_of(rebuilt) is not None
    off = replay(store, SID, ContextPolicy(budget=20_000, index=False))[-1].context
    assert off is not None and index_of(off) is None


# --- the tool -----------------------------------------------------------------------------------------


def test_the_tools_index_lists_all_seventy(store: SQLiteStore) -> None:
    start(store)
    seventy(store)
    envelope = {"module": "artifacts", "method": "index", "input": {}}
    whole = tool.call(store, SID, envelope, record=False)
    assert whole.startswith(f"Artifacts of session {SID} (70): ") and len(lines_of(whole)) == 70
    # The same lines as the preamble (one renderer).
    index = index_of(build_context(store, SID, ContextPolicy(budget=30_000)))
    assert lines_of(whole) == lines_of(index.content)
    # An explicit budget is kept.
    small = tool.call(store, SID, envelope, max_tokens=300, record=False)
    assert store.tokenizer.count(small) <= 300 and "more not listed" in small
    assert len(lines_of(small)) < 70


# --- the CLI ------------------------------------------------------------------------------------------


def _db(tmp_path: Path) -> str:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as store:
        start(store)
        seventy(store)
        store.append(SID, [MessageAppended(role="assistant", content="ok")])
    return str(path)


def test_cli_context_index_and_no_index(tmp_path: Path) -> None:
    db, runner = _db(tmp_path), CliRunner()
    shown = runner.invoke(cli, ["--db", db, "context", SID, "--budget", "20000", "--format", "text"])
    assert shown.exit_code == 0 and HEADER in shown.output
    hidden = runner.invoke(
        cli, ["--db", db, "context", SID, "--budget", "20000", "--format", "text", "--no-index"]
    )
    assert hidden.exit_code == 0 and HEADER not in hidden.output
    data = json.loads(runner.invoke(cli, ["--db", db, "context", SID, "--budget", "20000", "--json"]).output)
    assert data["messages"][2]["content"].startswith(HEADER)
    entry = data["manifest"]["entries"][2]
    assert (entry["category"], entry["role"], entry["event_ids"]) == ("index", "system", [])
    assert data["manifest"]["policy"]["index"] is True
    off = json.loads(
        runner.invoke(cli, ["--db", db, "context", SID, "--budget", "20000", "--json", "--no-index"]).output
    )
    assert all(e["category"] != "index" for e in off["manifest"]["entries"])
    half = runner.invoke(cli, ["--db", db, "context", SID, "--budget", "1500", "--format", "text"])
    assert half.exit_code == 0 and "more not listed" in half.output
    replayed = runner.invoke(cli, ["--db", db, "replay", SID, "--call", "1", "--budget", "20000"])
    assert replayed.exit_code == 0 and HEADER in replayed.output
    replayed_off = runner.invoke(
        cli, ["--db", db, "replay", SID, "--call", "1", "--budget", "20000", "--no-index"]
    )
    assert replayed_off.exit_code == 0 and HEADER not in replayed_off.output
