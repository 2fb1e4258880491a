"""Every measured store by name, imported only when used (the peers' imports are slow)."""

from __future__ import annotations

import importlib

from benchlib.base import Peer

_WHERE = {
    "turnlog": ("benchlib.peer_turnlog", "TurnlogPeer"),
    "turnlog-inline": ("benchlib.peer_turnlog", "TurnlogInlinePeer"),
    "turnlog-catchup": ("benchlib.peer_turnlog", "TurnlogCatchUpPeer"),
    "sqlite": ("benchlib.peer_sqlite", "SqlitePeer"),
    "sqlite-tiktoken": ("benchlib.peer_sqlite", "SqliteCountingPeer"),
    "eventsourcing": ("benchlib.peer_eventsourcing", "EventsourcingPeer"),
    "openai-agents": ("benchlib.peer_openai_agents", "OpenAIAgentsPeer"),
    "langchain": ("benchlib.peer_langchain", "LangChainPeer"),
    "langgraph": ("benchlib.peer_langgraph", "LangGraphPeer"),
}

NAMES = tuple(_WHERE)
PEERS = ("eventsourcing", "openai-agents", "langchain", "langgraph")
"""What users would pick instead (the floors are not peers: they are what SQLite itself allows)."""
FLOORS = ("sqlite", "sqlite-tiktoken")


def peer_class(name: str) -> type[Peer]:
    module, attr = _WHERE[name]
    cls: type[Peer] = getattr(importlib.import_module(module), attr)
    return cls
