"""turnlog through its public API: ``SQLiteStore.append`` with ``expected_version`` (one event per
append, or a batch), ``read_session``, and ``build_context`` under a ``ContextPolicy``."""

from __future__ import annotations

from typing import Any, ClassVar

from benchlib.base import SESSION, Peer
from benchlib.workload import Msg
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.registry import materializer
from turnlog.store.events import Event, MessageAppended, ToolCall, ToolReturned
from turnlog.store.sqlite import SQLiteStore, TokenCounting


def to_event(msg: Msg) -> Event:
    if msg.kind == "call":
        assert msg.call_id and msg.tool_name
        call = ToolCall(id=msg.call_id, name=msg.tool_name, arguments=msg.arguments or "{}")
        return MessageAppended(role="assistant", content=msg.content, tool_calls=(call,))
    if msg.kind == "tool":
        assert msg.call_id
        return ToolReturned(tool_call_id=msg.call_id, tool_name=msg.tool_name, content=msg.content)
    return MessageAppended(role=msg.kind, content=msg.content)  # type: ignore[arg-type]


class TurnlogPeer(Peer):
    name: ClassVar[str] = "turnlog"
    label: ClassVar[str] = "turnlog"
    packages: ClassVar[tuple[str, ...]] = ("turnlog", "tiktoken", "pydantic", "sqlite-utils")
    durability: ClassVar[str] = "its defaults: WAL, synchronous=FULL, BEGIN IMMEDIATE"
    strategy: ClassVar[str] = (
        "build_context(ContextPolicy(budget=8000)): system + first user message kept, newest units "
        "(a call with its returns) first, tool outputs capped at 1,000 tokens, omission notice"
    )
    counts_at_append: ClassVar[bool] = True
    token_counting: ClassVar[TokenCounting] = "deferred"
    catch_up_each: ClassVar[bool] = False

    def open(self) -> None:
        self.store = SQLiteStore.open(self.path, token_counting=self.token_counting)
        self.version = self.store.head_version(SESSION)

    def close(self) -> None:
        self.store.close()

    def append_one(self, msg: Msg) -> None:
        self.store.append(SESSION, [to_event(msg)], expected_version=self.version)
        self.version += 1
        if self.catch_up_each:
            self.store.catch_up_tokens()

    def append_batch(self, msgs: list[Msg]) -> None:
        self.store.append(SESSION, [to_event(m) for m in msgs], expected_version=self.version)
        self.version += len(msgs)

    def after_bulk(self) -> None:
        self.store.catch_up_tokens()
        materializer(self.store).catch_up()

    def load(self) -> list[Any]:
        return self.store.read_session(SESSION)

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        built = build_context(self.store, SESSION, ContextPolicy(budget=budget))
        return built.rendered, built.total_tokens

    def build_at(self, budget: int, position: int) -> tuple[list[dict[str, Any]], int]:
        built = build_context(self.store, SESSION, ContextPolicy(budget=budget), at=position)
        return built.rendered, built.total_tokens


class TurnlogInlinePeer(TurnlogPeer):
    name: ClassVar[str] = "turnlog-inline"
    label: ClassVar[str] = 'turnlog, token_counting="inline"'
    token_counting: ClassVar[TokenCounting] = "inline"


class TurnlogCatchUpPeer(TurnlogPeer):
    name: ClassVar[str] = "turnlog-catchup"
    label: ClassVar[str] = "turnlog, deferred + catch_up_tokens() after each append"
    catch_up_each: ClassVar[bool] = True
