"""A quicker stored form for a list of LangChain messages (the ``messages`` channel's blobs).

LangGraph's serializer stores a message as its class and ``model_dump()`` and reads it back with
``cls(**fields)``: the message is validated again, on every read of every checkpoint, and a turn of
a long thread reads hundreds of messages that were valid when they were written. A list made only
of LangChain's own message classes is stored here as its classes (module, name, field names) and,
per message, its class, its field values in that order and its fields set (None: every field, as
LangGraph's read gives), through the same serializer (so a nested value is stored and read as
LangGraph stores and reads it), and read back without validating again: the fields are set as
``model_construct`` sets them, without its loop over the fields (about a third of the instructions
of LangGraph's read), or by ``model_construct`` itself when the class's fields are not the stored
ones (another ``langchain_core``). The blob's serde type is the serializer's with :data:`SUFFIX`
(``msgpack+construct``), so a blob written in LangGraph's form (every list of anything else, and
every blob written before) is read as before.

A list is written in this form only if, read back, it gives what LangGraph's own read of its usual
form gives (the same class, ``==``, the same ``model_fields_set``): that is checked when it is
written, message by message, so a message whose fields a validator would have changed on the way
back (or a future ``langchain_core`` whose validators do) keeps LangGraph's form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from turnlog.store.rows import gc_paused

__all__ = ["SUFFIX", "dumps", "loads"]

SUFFIX = "+construct"
"""Added to the serializer's type of a blob stored in this form."""

_CLASSES: dict[tuple[str, str], type[BaseMessage]] = {
    (cls.__module__, cls.__name__): cls
    for cls in (HumanMessage, AIMessage, ToolMessage, SystemMessage, ChatMessage, FunctionMessage)
}
"""The exact classes stored in this form (not their subclasses, whose fields and validators differ;
not the chunks, which a graph's state rarely holds)."""
_EXACT = frozenset(_CLASSES.values())


def dumps(serde: SerializerProtocol, items: Sequence[Any]) -> tuple[str, bytes]:
    """The blob of a list: in this form if every item is a plain message of a known class and the
    form reads back as LangGraph's own does; else the serializer's usual blob. The collector is
    paused meanwhile (store.rows.gc_paused: a whole list is read back to be checked)."""
    with gc_paused():
        return _dumps(serde, items)


def _dumps(serde: SerializerProtocol, items: Sequence[Any]) -> tuple[str, bytes]:
    usual = serde.dumps_typed(items)
    if not items or not all(_plain(item) for item in items):
        return usual
    expected = serde.loads_typed(usual)  # what LangGraph's savers would give back
    if not isinstance(expected, list) or len(expected) != len(items):
        return usual
    classes: dict[type[BaseMessage], int] = {}
    rows = []
    for item, back in zip(items, expected, strict=True):
        if not isinstance(back, BaseMessage):
            return usual
        fields = item.model_dump()
        if list(fields) != list(type(item).__pydantic_fields__):
            return usual
        index = classes.setdefault(type(item), len(classes))
        every = back.model_fields_set == fields.keys()
        rows.append([index, list(fields.values()), None if every else sorted(back.model_fields_set)])
    header = [[cls.__module__, cls.__name__, list(cls.__pydantic_fields__)] for cls in classes]
    type_, data = serde.dumps_typed([header, rows])
    if not all(map(_same, loads(serde, type_ + SUFFIX, data), expected)):
        return usual
    return type_ + SUFFIX, data


def loads(serde: SerializerProtocol, type_: str, data: bytes) -> Any:
    """A blob's value, whichever form it is stored in."""
    if not type_.endswith(SUFFIX):
        return serde.loads_typed((type_, data))
    header, rows = serde.loads_typed((type_[: -len(SUFFIX)], data))
    builders = [_builder(module, name, tuple(names)) for module, name, names in header]
    return [builders[index](values, fields_set) for index, values, fields_set in rows]


@functools.lru_cache(maxsize=64)
def _builder(
    module: str, name: str, names: tuple[str, ...]
) -> Callable[[list[Any], list[str] | None], BaseMessage]:
    """How a message of the class is rebuilt from its stored field values (in ``names``' order);
    kept per class and names (a read of a thread's checkpoint builds the same few)."""
    cls = _CLASSES.get((module, name))
    if cls is None:
        raise ValueError(
            f"a stored message list names {module}.{name}, which this version of turnlog does not "
            "rebuild without validation: read it with the turnlog version that wrote it"
        )
    every = frozenset(names)
    if names != tuple(cls.__pydantic_fields__) or cls.__pydantic_post_init__ or cls.__private_attributes__:
        # Stored by another langchain_core (other fields): pydantic's own constructor fills the
        # fields it lacks with their defaults.
        def construct(values: list[Any], fields_set: list[str] | None) -> BaseMessage:
            fields = dict(zip(names, values, strict=True))
            return cls.model_construct(set(every if fields_set is None else fields_set), **fields)

        return construct

    new = cls.__new__
    # The descriptors object.__setattr__ would find for these four (the __dict__ slot and the
    # model's slots), called directly: the same stores without the lookup per attribute.
    set_dict, set_fields_set, set_extra, set_private = (
        _descriptor(cls, attribute).__set__
        for attribute in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
    )

    def build(values: list[Any], fields_set: list[str] | None) -> BaseMessage:
        # What model_construct does for these fields (every one given, in the class's order, no
        # extra, no private attribute), without its loop over the fields: a turn rebuilds hundreds.
        message = new(cls)
        set_dict(message, dict(zip(names, values, strict=True)))
        set_fields_set(message, set(every if fields_set is None else fields_set))
        set_extra(message, {})
        set_private(message, None)
        return message

    return build


def _descriptor(cls: type, attribute: str) -> Any:
    """The data descriptor ``object.__setattr__`` uses for ``attribute`` on instances of ``cls``
    (the first class of its MRO defining it)."""
    for klass in cls.__mro__:
        if attribute in vars(klass):
            found = vars(klass)[attribute]
            if not hasattr(type(found), "__set__"):
                raise TypeError(f"{cls.__name__}.{attribute} is not a data descriptor")
            return found
    raise TypeError(f"{cls.__name__} has no {attribute} slot")


def _plain(item: Any) -> bool:
    """A message of a known class exactly, without extra fields or private attributes (which
    ``model_dump`` and ``model_construct`` would not carry over alike)."""
    return type(item) in _EXACT and not item.__pydantic_extra__ and not item.__pydantic_private__


def _same(built: Any, expected: Any) -> bool:
    return (
        type(built) is type(expected)
        and built == expected
        and built.model_fields_set == expected.model_fields_set
        and vars(built) == vars(expected)
    )
