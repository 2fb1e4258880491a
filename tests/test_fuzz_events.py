"""Fuzzing the event parser and the append path: any JSON-like input gives a valid event or a StoreError
(InvalidEventError and its kin), never another exception, and the store stays readable and verifiable."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from turnlog.projections.ledger import audit
from turnlog.store import (
    EVENT_ADAPTER,
    EVENT_CLASSES,
    SQLiteStore,
    StoreError,
    parse_event,
    parse_events_json,
)

_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Scalars as JSON (and Python callers) can give them, with the edges that broke the store: huge and
# negative integers, non-finite floats, lone surrogates, control characters.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, 10**19, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["", "\x1b[2J", "\ud800", "\x00", "a" * 300, "{}", "[[[["]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _field_names() -> list[str]:
    names: set[str] = set()
    for cls in EVENT_CLASSES.values():
        names.update(cls.model_fields)
        for field in cls.model_fields.values():
            for arg in getattr(field.annotation, "__args__", ()) or ():
                inner = getattr(arg, "__args__", ())
                for model in (arg, *inner):
                    if isinstance(model, type) and issubclass(model, BaseModel):
                        names.update(model.model_fields)
    return sorted(names)


# Dicts that look like events: a known type (mostly) and the models' own field names, so the fuzzer
# reaches the field validators instead of stopping at "unknown type".
event_like = st.builds(
    lambda event_type, fields: {**fields, "type": event_type} if event_type is not None else fields,
    st.one_of(st.sampled_from(sorted(EVENT_CLASSES)), st.none(), scalars),
    st.dictionaries(st.sampled_from(_field_names()), json_values, max_size=8),
)
# Every field of one event type, filled with values that are often right (small counts, short
# text) and sometimes at the edges (numbers past 64 bits): these reach the bounds and the ledger.
field_values = st.one_of(
    st.integers(0, 1000),
    st.sampled_from([2**32 - 1, 2**32, 2**62, 2**63, 10**19, -1]),
    st.text(min_size=1, max_size=10),
    json_values,
)
full_events = st.one_of(
    *(
        st.fixed_dictionaries(
            {
                "type": st.just(name),
                **{n: field_values for n, f in cls.model_fields.items() if f.is_required()},
            },
            optional={
                n: field_values for n, f in cls.model_fields.items() if not f.is_required() and n != "type"
            },
        )
        for name, cls in sorted(EVENT_CLASSES.items())
    )
)
inputs = st.one_of(full_events, event_like, json_values)


@pytest.fixture(scope="module")
def store() -> Iterator[SQLiteStore]:
    with SQLiteStore.open(":memory:", token_counting="inline") as opened:
        yield opened


@_SETTINGS
@given(data=inputs)
def test_parse_event_gives_an_event_or_a_store_error(data: Any) -> None:
    try:
        event = parse_event(data)
    except StoreError:
        return
    assert event.type in EVENT_CLASSES
    # What parsed round-trips through its own JSON.
    assert parse_event(json.loads(event.model_dump_json())) == event


@_SETTINGS
@given(data=inputs)
def test_the_adapter_gives_an_event_or_a_validation_error(data: Any) -> None:
    with contextlib.suppress(ValidationError):
        EVENT_ADAPTER.validate_python(data)


@_SETTINGS
@given(data=inputs)
def test_json_text_gives_events_or_a_store_error(data: Any) -> None:
    try:
        text = json.dumps(data)
    except (ValueError, TypeError):
        return
    with contextlib.suppress(StoreError):
        parse_events_json(text)


@_SETTINGS
@given(batch=st.lists(inputs, min_size=1, max_size=3), session=st.one_of(st.text(max_size=5), st.just("s")))
def test_append_stores_or_refuses_and_the_store_stays_sound(
    store: SQLiteStore, batch: list[Any], session: str
) -> None:
    before = store.count_events()
    try:
        recorded = store.append(session, batch)
    except StoreError:
        assert store.count_events() == before  # a refused batch writes nothing
    else:
        assert store.count_events() == before + len(recorded)
        assert [r.event for r in store.read_tail(session, len(recorded))] == [r.event for r in recorded]
        # Whatever was accepted can be summed: the audit of every session still works.
        audit(store)


def test_the_fuzzed_store_verifies(store: SQLiteStore) -> None:
    # Runs after the fuzzing above (same module-scoped store): whatever was accepted is sound.
    report = store.verify()
    assert report.ok, report.problems


counts = st.one_of(st.integers(), st.sampled_from([2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 10**19]))


@_SETTINGS
@given(
    values=st.fixed_dictionaries(
        {"input_tokens": counts, "output_tokens": counts},
        optional={"cache_read_tokens": counts, "cache_write_tokens": counts, "reasoning_tokens": counts},
    ),
    copies=st.integers(1, 3),
)
def test_any_usage_counts_are_refused_or_summed(
    store: SQLiteStore, values: dict[str, int], copies: int
) -> None:
    # The failure this store had: a count past 64 bits (or two that sum past it) was accepted and then
    # every read of the store failed. Now it is refused at input, or stored and summed.
    usage = {"type": "usage_recorded", "model": "gpt-4o", **values}
    try:
        parse_event(usage)
    except StoreError:
        return
    store.append("usage", [parse_event(usage) for _ in range(copies)])
    audit(store)
