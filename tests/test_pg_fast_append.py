"""The appends of store.pg_fast on PostgreSQL: a writer alone sends one prepared statement (blobs as
binary parameters, in the same statement), and a batch of more than COPY_ROWS events copies its
rows. What is stored reads back the same, with the projections and ``verify`` agreeing."""

from __future__ import annotations

from typing import Any

import pytest

import turnlog
from tests.helpers.postgres import pg_schema, pg_url, sent_queries
from turnlog.projections.registry import materializer
from turnlog.store import ArtifactWritten, MessageAppended, ToolReturned

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests


def _open(schema: str) -> Any:
    return turnlog.open_store(f"{pg_url()}?schema={schema}")


def _say(text: str) -> MessageAppended:
    return MessageAppended(role="user", content=text)


def test_blobs_go_in_the_one_statement_as_binary_parameters(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", [_say("a")])
        store.append("s", [_say("b")])
        sent = sent_queries(monkeypatch)
        body = "line \x01 with bytes é\n" * 400  # over the inline limit: a blob
        first = store.append("s", [ArtifactWritten(name="x", content=body), _say("c")])
        again = store.append("s", [ArtifactWritten(name="y", content=body)])  # the same blob
        monkeypatch.undo()
        assert len(sent) == 2 and all("INSERT INTO blobs" in q for q in sent)
        assert "\\x" not in "".join(sent)  # no bytea rendered as hex into the text
        assert [r.version for r in first + again] == [3, 4, 5]
        stored = [r.event for r in store.read_session("s")]
        assert [getattr(e, "content", None) for e in stored][2:] == [body, "c", body]
        assert store.verify().ok
        assert materializer(store).differences() == []
    finally:
        store.close()


def _copies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The COPY statements psycopg starts from here on."""
    import psycopg

    started: list[str] = []
    copy = psycopg.Cursor.copy

    def recording(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        started.append(str(statement))
        return copy(self, statement, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "copy", recording)
    return started


@pytest.mark.parametrize("known", [False, True])
def test_a_large_batch_is_copied(pg_schema: str, monkeypatch: pytest.MonkeyPatch, known: bool) -> None:
    from turnlog.store.pg_fast import COPY_ROWS

    store = _open(pg_schema)
    try:
        if known:  # the heads are known: the checks go first, then the copy
            store.append("s", [_say("a")])
        big = "output\n" * 300
        batch: list[Any] = [_say(f"m{i}") for i in range(COPY_ROWS + 10)]
        batch[5:5] = [ToolReturned(tool_call_id="c1", content=big), ArtifactWritten(name="n", content=big)]
        sent = sent_queries(monkeypatch)
        copies = _copies(monkeypatch)
        records = store.append("s", batch)
        monkeypatch.undo()
        copies = [q for q in copies if q.startswith("COPY event_log")]
        assert len(copies) == 1 and "FORMAT BINARY" in copies[0]
        assert not [q for q in sent if "INSERT INTO event_log" in q]
        first = 2 if known else 1
        assert [r.version for r in records] == list(range(first, first + len(batch)))
        assert [r.position for r in records] == [r.version for r in records]
        stored = store.read_session("s")[first - 1 :]
        assert [r.event for r in stored] == [r.event for r in records]
        assert store.append("s", [_say("after")])[0].version == first + len(batch)
        assert store.verify().ok
        assert materializer(store).differences() == []
    finally:
        store.close()


def test_a_large_batch_that_repeats_a_stored_event_id_stores_nothing(pg_schema: str) -> None:
    from turnlog.store.pg_fast import COPY_ROWS

    store = _open(pg_schema)
    try:
        store.append("s", [MessageAppended(role="user", content="a", event_id="dup")])
        batch = [_say(f"m{i}") for i in range(COPY_ROWS + 5)]
        batch.append(MessageAppended(role="user", content="b", event_id="dup"))
        with pytest.raises(turnlog.store.StoreError):
            store.append("s", batch)
        assert store.count_events() == 1
        assert store.verify().ok
    finally:
        store.close()


def test_a_statement_of_many_rows_is_not_parsed_again_at_each_append(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg converts a %s query at every execute past 50 parameters (its cache's limit): the
    # append statements go numbered ($1, $2, ...) through a raw cursor, so it converts none.
    from psycopg import _queries

    converted: list[int] = []
    original = _queries._query2pg_nocache

    def counting(query: Any, encoding: str) -> Any:
        converted.append(len(query))
        return original(query, encoding)

    store = _open(pg_schema)
    try:
        store.append("s", [_say("warm")])
        monkeypatch.setattr(_queries, "_query2pg_nocache", counting)
        for turn in range(3):
            store.append("s", [_say(f"{turn}.{n}") for n in range(6)])  # 6 rows: 84 parameters
        monkeypatch.undo()
        assert converted == []
        assert [r.event.content for r in store.read_session("s")][-3:] == ["2.3", "2.4", "2.5"]
        assert store.verify().ok
    finally:
        store.close()


def test_numbered_placeholders() -> None:
    from turnlog.store.pg_fast import numbered

    assert numbered("SELECT %s::int, %s") == "SELECT $1::int, $2"
    assert numbered("SELECT 1") == "SELECT 1"
    with pytest.raises(ValueError, match="literal %"):
        numbered("SELECT %s || '%%'")
