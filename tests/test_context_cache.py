"""Cache-stable contexts (ContextPolicy(cache_stable=True)): each call's context starts with the
previous call's context unless the cut moved, the cut moves once per overflow, every context is
within budget, builds are deterministic (as of a position, replayed, rebuilt, in a new process's
store object), Anthropic breakpoints, and the default policy unchanged."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.context_builder import ContextBuilder
from turnlog.projections.context_cache import call_points, stable_cut
from turnlog.projections.context_types import CacheOverflow, ContextBudgetError
from turnlog.projections.registry import materializer
from turnlog.projections.replay import replay
from turnlog.store import (
    ArtifactWritten,
    ContextBuilt,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RunFinished,
    RunStarted,
    SessionRewound,
    SQLiteStore,
    SummaryRecorded,
    ToolCall,
    ToolReturned,
)
from turnlog.store.events import summary_context_text

VOCAB = ("alpha", "beta", "gamma", "delta", "file", "path", "error", "token", "agent", "tool", "result")


def words(n: int, seed: int = 0) -> str:
    return " ".join(VOCAB[(i * 7 + seed) % len(VOCAB)] for i in range(n))


# -- generated sessions -----------------------------------------------------------------------------

step = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 120)),
    st.tuples(st.just("text"), st.integers(1, 200)),
    st.tuples(st.just("call"), st.lists(st.integers(5, 900), min_size=1, max_size=3)),
    st.tuples(st.just("pin"), st.integers(0, 10**6)),
    st.tuples(st.just("unpin"), st.integers(0, 10**6)),
    st.tuples(st.just("artifact"), st.integers(1, 60)),
    st.tuples(st.just("summary"), st.integers(0, 10**6)),
    st.tuples(st.just("run"), st.booleans()),
    st.tuples(st.just("rewind"), st.integers(1, 6)),
)


class Session:
    """Appends a generated session to a store, one step at a time, and remembers where the pins,
    unpins (which may reset the prefix) happened."""

    def __init__(self, store: SQLiteStore, sid: str = "s") -> None:
        self.store = store
        self.sid = sid
        self.messages: list[str] = []  # event ids of appended messages (pin targets)
        self.pinned: list[str] = []
        self.resets: list[int] = []  # positions of pins and unpins
        self.n = 0
        self.run_open = False
        store.append(
            sid,
            [
                MessageAppended(role="system", content="You are a careful agent. " + words(60)),
                MessageAppended(role="user", content="Please fix the failing build. " + words(30)),
            ],
        )

    def apply(self, kind: str, arg: Any) -> None:
        self.n += 1
        n = self.n
        events: list[Any] = []
        if kind == "user":
            events = [MessageAppended(role="user", content=words(arg, n))]
        elif kind == "text":
            events = [MessageAppended(role="assistant", content=words(arg, n))]
        elif kind == "call":
            calls = tuple(
                ToolCall(id=f"c{n}_{i}", name="read", arguments=f'{{"i": {i}}}') for i in range(len(arg))
            )
            events = [MessageAppended(role="assistant", content=f"step {n}", tool_calls=calls)]
            events += [
                ToolReturned(tool_call_id=call.id, tool_name="read", content=words(size, n))
                for call, size in zip(calls, arg, strict=True)
            ]
        elif kind == "pin" and self.messages:
            target = self.messages[arg % len(self.messages)]
            events = [MessagePinned(target_event_id=target)]
            self.pinned.append(target)
        elif kind == "unpin" and self.pinned:
            events = [MessageUnpinned(target_event_id=self.pinned.pop(arg % len(self.pinned)))]
        elif kind == "artifact":
            events = [ArtifactWritten(name=f"src/file_{n % 4}.py", content=words(arg, n))]
        elif kind == "summary":
            head = self.store.head_version(self.sid)
            if head > 8:
                first = 3 + arg % (head - 6)
                last = first + (arg // 7) % max(1, head - first - 2)
                text = summary_context_text(first, last, words(20, n))
                events = [
                    SummaryRecorded(
                        first_version=first,
                        last_version=last,
                        level=0,
                        text=words(20, n),
                        tokens=self.store.tokenizer.count(text),
                        summarizer={"name": "test"},
                        key=f"{n:064x}",
                    )
                ]
        elif kind == "rewind":
            head = self.store.head_version(self.sid)
            if head > arg + 4:
                events = [SessionRewound(to_version=head - arg)]
        elif kind == "run":
            events = [RunFinished(run_id="r") if self.run_open else RunStarted(run_id="r")]
            self.run_open = not self.run_open
        if not events:
            return
        records = self.store.append(self.sid, events)
        if kind in ("pin", "unpin", "rewind"):
            self.resets.append(records[0].position)
        self.messages += [r.event_id for r in records if isinstance(r.event, MessageAppended)]


def calls_of(store: SQLiteStore, sid: str = "s") -> list[int]:
    return [p for p, _ in call_points(store, sid, 0, store.head_position())]


def is_prefix(before: list[Any], after: list[Any]) -> bool:
    return after[: len(before)] == before


def strip_marks(body: dict[str, Any]) -> list[Any]:
    """An Anthropic body's system and blocks without cache_control, as one flat list."""
    system = body["system"]
    blocks: list[Any] = [system if isinstance(system, str) else [dict(b) for b in system]]
    for turn in body["messages"]:
        for block in turn["content"]:
            blocks.append((turn["role"], {k: v for k, v in block.items() if k != "cache_control"}))
    if isinstance(system, list):
        blocks[0] = [{k: v for k, v in b.items() if k != "cache_control"} for b in system]
    return blocks


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    yield s
    s.close()


# -- the property -----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=5, max_size=45), budget=st.integers(700, 4000))
# Found by hypothesis: the note of an artifact written since the cut's move took the build one token
# over the budget (the notes were added after the check of what is always kept).
@example(steps=[("call", [5, 5, 462]), ("pin", 0), ("artifact", 1), ("text", 1), ("user", 1)], budget=700)
def test_each_call_starts_with_the_previous_call_unless_the_cut_moved(
    steps: list[tuple[str, Any]], budget: int
) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        session = Session(store)
        for kind, arg in steps:
            session.apply(kind, arg)
        policy = ContextPolicy(budget=budget, max_tool_tokens=300, cache_stable=True)
        default = ContextPolicy(budget=budget, max_tool_tokens=300)
        anthropic = policy.model_copy(update={"format": "anthropic"})
        previous: tuple[int, Any, Any, Any] | None = None
        for at in calls_of(store):
            try:
                built = build_context(store, "s", policy, at=at)
            except ContextBudgetError:
                # Only where the default policy cannot fit what is always kept either.
                with pytest.raises(ContextBudgetError):
                    build_context(store, "s", default, at=at)
                previous = None
                continue
            assert built.total_tokens <= budget
            cut = stable_cut(store, "s", policy, at)
            assert built.cut == cut.cut
            body = build_context(store, "s", anthropic, at=at).rendered
            assert 1 <= len(marks(body)) <= 4
            if previous is not None:
                before_at, before_cut, before_rendered, before_body = previous
                reset = any(before_at < p <= at for p in session.resets)
                if cut == before_cut and not reset:
                    assert is_prefix(before_rendered, built.rendered), (before_at, at)
                    # In Anthropic's blocks too (turns of one role merged), breakpoints aside.
                    assert is_prefix(strip_marks(before_body), strip_marks(body))
                elif cut != before_cut:
                    # It moved because the context from the old cut did not fit, and only then.
                    assert cut.moved_at == at
                    builder = ContextBuilder(store, "s", policy, at, store.version_at("s", at))
                    builder.stable = before_cut
                    with pytest.raises(CacheOverflow):
                        builder.build()
            previous = (at, cut, built.rendered, body)
            # The default policy is untouched by the cache-stable fields.
            plain = build_context(store, "s", default, at=at)
            assert "cache_stable" not in plain.to_event().policy and plain.cut is None
    finally:
        store.close()


def test_the_cut_moves_rarely_and_leaves_room(store: SQLiteStore) -> None:
    session = Session(store)
    for i in range(60):
        session.apply("call", [150 + (i * 37) % 200])
        session.apply("text", 20)
    budget = 3000
    policy = ContextPolicy(budget=budget, cache_stable=True, refill_to=0.5)
    cuts = [stable_cut(store, "s", policy, at) for at in calls_of(store)]
    moves = [b for a, b in itertools.pairwise(cuts) if a != b]
    assert 3 <= len(moves) <= 20
    for cut in moves:
        built = build_context(store, "s", policy, at=cut.moved_at)
        # Right after a move the context is at about refill_to of the budget, not full.
        assert built.total_tokens <= budget * 0.5 + 50
    # Calls without a move share their whole previous context: most calls.
    shared = 0
    builds = [build_context(store, "s", policy, at=at).rendered for at in calls_of(store)]
    for before, after in itertools.pairwise(builds):
        shared += is_prefix(before, after)
    assert shared >= len(builds) - 1 - len(moves)


def test_refill_to_is_validated() -> None:
    for bad in (0, -0.1, 1.5):
        with pytest.raises(ValidationError, match="refill_to"):
            ContextPolicy(budget=100, cache_stable=True, refill_to=bad)
    assert ContextPolicy(budget=100, refill_to=1).refill_to == 1


def test_a_calibrated_cache_stable_context_follows_the_ratio_at_each_call(store: SQLiteStore) -> None:
    """calibrate with cache_stable: the fold checks each call against the budget calibrated as of
    that call, so what is sent stays within the budget in the model's tokens; the cut moves when
    the ratio's rise makes the context overflow, and the prefix holds between moves."""
    from turnlog.projections.estimates import session_estimates
    from turnlog.store import UsageRecorded

    session = Session(store)
    for i in range(40):
        session.apply("user", 30)
        session.apply("call", [200 + 10 * (i % 5)])
        session.apply("text", 40)
        if i == 19:  # the model bills twice the estimate of its latest call: ratio 2 from here
            last = store.read_tail("s", 1)[0]
            [*_, call], _ = session_estimates(store, "s")
            usage = UsageRecorded(
                model="claude-sonnet-4", input_tokens=2 * call.estimated_input, output_tokens=1,
                call_event_id=last.event_id,
            )  # fmt: skip
            ratio_from = store.append("s", [usage])[0].position
    policy = ContextPolicy(budget=3000, cache_stable=True, calibrate=True)
    previous: Any = None
    moves_after = 0
    for at in calls_of(store):
        built = build_context(store, "s", policy, at=at, model="claude-sonnet-4")
        budget = 1500 if at >= ratio_from else 3000
        assert built.policy.budget == budget and built.total_tokens <= budget
        assert built.cut == stable_cut(store, "s", policy, at, "claude-sonnet-4").cut
        if previous is not None:
            if built.cut == previous.cut:
                assert is_prefix(previous.rendered, built.rendered)
            elif previous.at_position < ratio_from <= at:
                moves_after += 1
        previous = built
    assert moves_after == 1  # the first call under the halved budget moved the cut
    with pytest.raises(Exception, match="needs the model"):
        build_context(store, "s", policy)


# -- determinism ------------------------------------------------------------------------------------


def test_at_replay_rebuild_and_a_fresh_process_give_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore.open(path)
    session = Session(store)
    for i in range(30):
        session.apply("call", [100 + (i * 53) % 500, 40])
        if i % 7 == 3:
            session.apply("artifact", 30)
        session.apply("user", 15)
    policy = ContextPolicy(budget=2500, max_tool_tokens=400, cache_stable=True)
    points = calls_of(store)
    # Built in reverse order (no fold state from earlier builds) and then forward.
    backwards = {at: json.dumps(build_context(store, "s", policy, at=at).rendered) for at in reversed(points)}
    store.close()
    store = SQLiteStore.open(path)
    forwards = {at: json.dumps(build_context(store, "s", policy, at=at).rendered) for at in points}
    assert backwards == forwards
    # A rebuild of the projections changes nothing; nor does a second build.
    materializer(store).rebuild()
    again = SQLiteStore.open(path)
    try:
        rebuilt = {at: json.dumps(build_context(again, "s", policy, at=at).rendered) for at in points}
        assert rebuilt == forwards
        assert json.dumps(build_context(again, "s", policy, at=points[-1]).rendered) == forwards[points[-1]]
        # Replay rebuilds each call with the policy: the same entries as the builds.
        calls = replay(again, "s", policy)
        assert [c.at_position for c in calls] == points
        for call in calls:
            assert call.context is not None
            assert json.dumps(call.context.rendered) == forwards[call.at_position]
    finally:
        again.close()
        store.close()


def test_the_manifest_records_the_cut(store: SQLiteStore) -> None:
    session = Session(store)
    for i in range(25):
        session.apply("call", [300 + i])
    policy = ContextPolicy(budget=1500, cache_stable=True)
    built = build_context(store, "s", policy, record=True, run_id="r1", model="m")
    assert built.cut is not None and built.cut > 1
    event = store.read_session("s")[-1].event
    assert isinstance(event, ContextBuilt)
    assert event.cut == built.cut
    assert event.policy["cache_stable"] is True and event.policy["refill_to"] == 0.4
    assert built.manifest()["cut"] == built.cut
    plain = build_context(store, "s", ContextPolicy(budget=1500))
    assert "cut" not in plain.manifest() and "cache_stable" not in plain.manifest()["policy"]
    assert "cut" not in plain.to_event().model_dump(exclude_none=True)


# -- nothing else moves the prefix --------------------------------------------------------------------


def test_open_run_outputs_are_capped_as_they_will_stay(store: SQLiteStore) -> None:
    Session(store)
    store.append("s", [RunStarted(run_id="r")])
    policy = ContextPolicy(budget=6000, max_tool_tokens=200, cache_stable=True)
    default = ContextPolicy(budget=6000, max_tool_tokens=200)
    store.append(
        "s",
        [
            MessageAppended(
                role="assistant", content="reading", tool_calls=(ToolCall(id="c1", name="read"),)
            ),
            ToolReturned(tool_call_id="c1", tool_name="read", content=words(800)),
        ],
    )
    open_stable = build_context(store, "s", policy)
    open_default = build_context(store, "s", default)
    store.append("s", [MessageAppended(role="assistant", content="done"), RunFinished(run_id="r")])
    closed_stable = build_context(store, "s", policy)
    assert "capped" in [e.mode for e in open_stable.entries]
    assert is_prefix(open_stable.rendered, closed_stable.rendered)
    # The default policy shows the open run's output whole, and caps it once the run closes.
    assert "capped" not in [e.mode for e in open_default.entries]


def test_new_artifacts_are_noted_near_their_turn_until_the_cut_moves(store: SQLiteStore) -> None:
    session = Session(store)
    session.apply("call", [50])
    store.append("s", [ArtifactWritten(name="notes/plan.md", content="the plan: " + words(20))])
    session.apply("call", [50])
    policy = ContextPolicy(budget=3000, cache_stable=True)
    first = build_context(store, "s", policy)
    notes = [m for m in first.messages if m.category == "index"]
    assert len(notes) == 1 and "notes/plan.md" in notes[0].content and notes[0].mode == "notice"
    # The note stays where it is while the context grows (no index after the system prompt yet).
    session.apply("call", [60])
    assert is_prefix(first.rendered, build_context(store, "s", policy).rendered)
    # Once the cut moves, the index lists it after the system prompt, and the note is gone.
    for _ in range(20):
        session.apply("call", [200])
    moved = build_context(store, "s", policy)
    assert moved.cut and moved.cut > 1
    index = [m for m in moved.messages if m.category == "index"]
    assert len(index) == 1 and index[0].mode != "notice" and "notes/plan.md" in index[0].content
    # The default policy lists it in the index from the start.
    plain = build_context(store, "s", ContextPolicy(budget=3000))
    assert [m.mode for m in plain.messages if m.category == "index"] == ["full"]


def test_a_summary_shows_from_the_next_cut_move(store: SQLiteStore) -> None:
    session = Session(store)
    for _ in range(8):
        session.apply("call", [150])
    # Refilled to 0.6 of the budget, the move keeps versions the summary covers (at 0.4 it starts
    # after them all, and a summary of what is left out whole is not shown, as by default).
    policy = ContextPolicy(budget=2500, cache_stable=True, refill_to=0.6)
    before = build_context(store, "s", policy)
    last = store.head_version("s") - 2
    text = summary_context_text(3, last, "the agent read eight files")
    summary = SummaryRecorded(
        first_version=3,
        last_version=last,
        level=0,
        text="the agent read eight files",
        tokens=store.tokenizer.count(text),
        summarizer={"name": "test"},
        key="1" * 64,
    )
    store.append("s", [summary])
    session.apply("call", [100])
    after = build_context(store, "s", policy)
    assert "summary" not in [e.mode for e in after.entries]
    assert is_prefix(before.rendered, after.rendered)
    # The default policy shows it at once.
    assert "summary" in [e.mode for e in build_context(store, "s", ContextPolicy(budget=2500)).entries]
    while (moved := build_context(store, "s", policy)).cut == 1:
        session.apply("call", [150])
    assert summary.event_id in {e.event_ids[0] for e in moved.entries if e.mode == "summary"}


# -- Anthropic breakpoints ------------------------------------------------------------------------------


def marks(body: dict[str, Any]) -> list[tuple[int, int]]:
    """(turn, block) of each cache_control; turn -1 for the system blocks."""
    found = []
    if isinstance(body["system"], list):
        found += [(-1, i) for i, b in enumerate(body["system"]) if "cache_control" in b]
    for t, turn in enumerate(body["messages"]):
        found += [(t, i) for i, b in enumerate(turn["content"]) if "cache_control" in b]
    return found


def test_anthropic_breakpoints_mark_the_end_and_the_head(store: SQLiteStore) -> None:
    session = Session(store)
    for i in range(30):
        session.apply("call", [200 + i])
    policy = ContextPolicy(budget=3000, cache_stable=True, format="anthropic")
    points = calls_of(store)
    bodies = [build_context(store, "s", policy, at=at).rendered for at in points]
    for body in bodies:
        found = marks(body)
        assert 1 <= len(found) <= 4
        for t, i in found:
            block = body["system"][i] if t < 0 else body["messages"][t]["content"][i]
            assert block["cache_control"] == {"type": "ephemeral"}
            assert block.get("type") != "text" or block["text"]
        last_turn = len(body["messages"]) - 1
        assert (last_turn, len(body["messages"][last_turn]["content"]) - 1) in found
    # Once the cut has moved, the head (system prompt, first user message) is marked too: it
    # stays when the cut moves again.
    late = bodies[-1]
    assert len(marks(late)) in (2, 3)  # and, between moves, the previous call's end (checked below)
    assert late["messages"][0]["content"][0]["text"].startswith("Please fix")
    assert "cache_control" in late["messages"][0]["content"][0]
    assert isinstance(late["system"], list) and "cache_control" not in late["system"][0]
    # Without cache_stable: no markers, the system prompt a string, as before.
    plain = build_context(store, "s", ContextPolicy(budget=3000, format="anthropic")).rendered
    assert marks(plain) == [] and isinstance(plain["system"], str)
    # Between moves the end of the previous call's body is marked again (Anthropic looks back only
    # 20 blocks from a breakpoint for a cached prefix); after a move it is not.
    cuts = [stable_cut(store, "s", policy, at) for at in points]
    for i in range(1, len(bodies)):
        before = bodies[i - 1]["messages"]
        end = (len(before) - 1, len(before[-1]["content"]) - 1)
        assert (end in marks(bodies[i])) == (cuts[i] == cuts[i - 1]), i
        assert len(marks(bodies[i])) <= 3
    # Between moves each body starts with the previous one, markers aside.
    stripped = [strip_marks(b) for b in bodies]
    prefixes = sum(is_prefix(a, b) for a, b in itertools.pairwise(stripped))
    assert prefixes >= len(bodies) // 2


# -- the command line --------------------------------------------------------------------------------


def cli_session(path: Path) -> list[int]:
    with SQLiteStore.open(path) as store:
        session = Session(store)
        for i in range(25):
            session.apply("call", [200 + 13 * i])
        return calls_of(store)


def test_the_cli_builds_cache_stable_contexts(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from turnlog.cli import cli

    db = tmp_path / "t.db"
    points = cli_session(db)
    runner = CliRunner()
    base = ["--db", str(db), "context", "s", "--budget", "2000"]
    bodies = []
    for at in points[-6:]:
        result = runner.invoke(cli, [*base, "--cache-stable", "--at", str(at), "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["manifest"]["total_tokens"] <= 2000
        assert data["manifest"]["policy"]["cache_stable"] is True and data["manifest"]["cut"] > 1
        bodies.append(data)
    with SQLiteStore.open(db) as store:
        policy = ContextPolicy(budget=2000, cache_stable=True)
        assert bodies[-1]["messages"] == build_context(store, "s", policy, at=points[-1]).rendered
    # --refill-to is checked, and needs --cache-stable.
    bad = runner.invoke(cli, [*base, "--cache-stable", "--refill-to", "0"])
    assert bad.exit_code == 2 and "0<x<=1" in bad.output.replace(" ", "")
    alone = runner.invoke(cli, [*base, "--refill-to", "0.5", "--json"])
    assert alone.exit_code == 2 and "--cache-stable" in alone.output
    # Anthropic markers from the command line; the text manifest says where the history starts.
    marked = runner.invoke(cli, [*base, "--cache-stable", "--format", "anthropic"])
    assert marked.exit_code == 0 and 1 <= len(marks(json.loads(marked.output))) <= 4
    text = runner.invoke(cli, [*base, "--cache-stable", "--format", "text", "--manifest"])
    assert "cache-stable, the history starts at version" in text.output


def test_the_session_policy_makes_contexts_cache_stable(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from turnlog.cli import cli

    db = tmp_path / "t.db"
    cli_session(db)
    runner = CliRunner()
    result = runner.invoke(
        cli, ["--db", str(db), "policy", "s", "--budget", "2000", "--cache-stable", "--refill-to", "0.5"]
    )
    assert result.exit_code == 0, result.output
    assert "cache stable:       yes (refill to 0.5)" in result.output
    shown = json.loads(runner.invoke(cli, ["--db", str(db), "policy", "s", "--json"]).output)
    assert shown["policy"]["cache_stable"] is True and shown["policy"]["refill_to"] == 0.5
    built = json.loads(runner.invoke(cli, ["--db", str(db), "context", "s", "--json"]).output)["manifest"]
    assert built["policy"]["cache_stable"] is True and built["policy"]["refill_to"] == 0.5
    # --no-cache-stable overrides the stored policy for one build.
    plain = runner.invoke(cli, ["--db", str(db), "context", "s", "--no-cache-stable", "--json"])
    assert "cut" not in json.loads(plain.output)["manifest"]
    # Replay rebuilds the calls with the stored policy too: cache-stable, within the budget.
    calls = json.loads(
        runner.invoke(cli, ["--db", str(db), "replay", "s", "--budget", "2000", "--json"]).output
    )
    assert calls and all(c["total_tokens"] <= 2000 for c in calls)
    assert sum(not c["dropped"] for c in calls) >= len(calls) - 6
    bad = runner.invoke(cli, ["--db", str(db), "policy", "s", "--refill-to", "2", "--json"])
    assert bad.exit_code == 2


def test_a_fork_folds_its_own_calls_from_the_shared_prefix(store: SQLiteStore) -> None:
    from turnlog.actions import fork_session

    session = Session(store)
    for i in range(20):
        session.apply("call", [250 + i])
    policy = ContextPolicy(budget=2500, cache_stable=True)
    fork_session(store, "s", store.head_version("s") - 6, "f")
    fork = Session.__new__(Session)
    fork.store, fork.sid, fork.messages, fork.pinned, fork.resets, fork.n, fork.run_open = (
        store,
        "f",
        [],
        [],
        [],
        100,
        False,
    )
    for _ in range(10):
        fork.apply("call", [300])
    points = calls_of(store, "f")
    # The fork's calls: those of the shared prefix (at the parent's positions), then its own.
    own = [at for at in points if store.version_at("f", at) > 0]
    assert len(own) == 10 and len(points) > len(own)
    builds = [build_context(store, "f", policy, at=at) for at in own]
    assert all(b.total_tokens <= 2500 for b in builds)
    # Shared calls get the parent's cuts; the fork's own calls keep the prefix between moves.
    for at in calls_of(store, "s"):
        if at in points:
            assert stable_cut(store, "f", policy, at) == stable_cut(store, "s", policy, at)
    moves = sum(a.cut != b.cut for a, b in itertools.pairwise(builds))
    kept = sum(is_prefix(a.rendered, b.rendered) for a, b in itertools.pairwise(builds))
    assert kept >= len(builds) - 1 - moves


def test_a_refill_share_below_what_is_always_kept_leaves_the_context_small(store: SQLiteStore) -> None:
    """refill_to of the budget cannot hold the system prompt and first request: the cut moves to
    leave the context as small as it can be (the least share that holds them), not full, so it does
    not move again at the very next call."""
    session = Session(store)
    store.append("s", [MessageAppended(role="system", content=words(500))])  # about 500 tokens more
    for _ in range(30):
        session.apply("user", 40)
        session.apply("text", 60)
    policy = ContextPolicy(budget=1500, cache_stable=True, refill_to=0.1)
    cuts = [build_context(store, "s", policy, at=at) for at in calls_of(store)]
    moved = [i for i in range(1, len(cuts)) if cuts[i].cut != cuts[i - 1].cut]
    assert moved and all(b - a > 2 for a, b in itertools.pairwise(moved))
    after = [cuts[i].total_tokens for i in moved]
    assert all(tokens <= 0.75 * 1500 for tokens in after)
