"""The rebuild's decode path and the artifacts' abstract: the faster code gives exactly what the
plain code gave (a record equal to the dataclass's own constructor's; an abstract equal to the
regex collapse of whitespace), and a damaged payload still raises CorruptStoreError."""

from __future__ import annotations

import random
import re

import pytest

from turnlog.projections.artifacts import ABSTRACT_CHARS, _abstract
from turnlog.store import CorruptStoreError, MessageAppended, RecordedEvent, SQLiteStore, ToolReturned
from turnlog.store.rows import EVENT_SELECT, record_from_row

_WHITESPACE = [chr(c) for c in range(0x3100) if chr(c).isspace()]


def _regex_abstract(content: str) -> str:
    collapsed = re.sub(r"\s+", " ", content).strip()
    if len(collapsed) > ABSTRACT_CHARS:
        return collapsed[:ABSTRACT_CHARS].rstrip() + "…"
    return collapsed


def test_the_abstract_collapses_every_whitespace_as_the_regex_did() -> None:
    rng = random.Random(7)
    pool = [*_WHITESPACE, "a", "b", "é", "字", " ", "\n"]
    assert "\x1c" in _WHITESPACE and "\u3000" in _WHITESPACE and "\x85" in _WHITESPACE
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 700)))
        assert _abstract(text) == _regex_abstract(text), repr(text)


def test_a_record_from_a_row_equals_the_dataclass_made_one() -> None:
    store = SQLiteStore.open(":memory:")
    try:
        store.append(
            "s",
            [
                MessageAppended(role="user", content="hi"),
                ToolReturned(tool_call_id="c1", tool_name="read", content="x" * 5000),
            ],
        )
        store.catch_up_tokens()
        rows = store.conn.execute(f"{EVENT_SELECT} ORDER BY e.position").fetchall()
        for row in rows:
            made = record_from_row(row)
            assert type(made) is RecordedEvent
            expected = RecordedEvent(row[0], row[1], row[2], made.event, row[8], row[9], row[10], row[11])
            assert made == expected and hash(made.position) == hash(expected.position)
            with pytest.raises(AttributeError):
                made.position = 3  # type: ignore[misc]  # still frozen
    finally:
        store.close()


@pytest.mark.parametrize(
    "payload", ['{"role": "user", "content": 3}', '{"role": "nobody"}', "{", None, b"{}"]
)
def test_a_damaged_payload_is_a_corrupt_store_error(payload: object) -> None:
    row = (
        7,
        "s",
        1,
        "e" * 26,
        "message_appended",
        1,
        payload,
        None,
        1,
        "2026-01-01",
        "0" * 64,
        "1" * 64,
        None,
        None,
    )
    with pytest.raises(CorruptStoreError, match="position 7"):
        record_from_row(row)
