"""turnlog's write side: the event models, the append-only SQLite log, the tokenizer, content blobs.

Every public name is imported on first use (PEP 562), so importing a light part of the store (its
errors, the schema) does not load pydantic, the event models or the SQLite backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnlog.store.base import (
        ANY,
        NO_SESSION,
        Blob,
        EventStore,
        Expected,
        ExpectedVersion,
        OriginItem,
        RecordedEvent,
        SessionSummary,
        Store,
        VerifyReport,
    )
    from turnlog.store.errors import (
        CorruptStoreError,
        DuplicateEventError,
        InvalidEventError,
        StoreClosedError,
        StoreError,
        TokenizerError,
        UnknownArtifactError,
        UnknownEventError,
        UnknownSessionError,
        VersionConflictError,
    )
    from turnlog.store.events import (
        CURRENT_VERSIONS,
        EVENT_ADAPTER,
        EVENT_CLASSES,
        ArtifactWritten,
        CompactionFailed,
        ContextBuilt,
        Event,
        ForkPoint,
        ManifestEntry,
        MessageAppended,
        MessagePinned,
        MessageRemoved,
        MessageUnpinned,
        Origin,
        OutputCondensed,
        Pin,
        PolicySet,
        RunFinished,
        RunStarted,
        SessionRewound,
        SessionStarted,
        StateRecorded,
        SummarizerInfo,
        SummarizerUsage,
        SummaryRecorded,
        TodoItem,
        TodosUpdated,
        ToolCall,
        ToolReturned,
        UsageRecorded,
        new_event_id,
        parse_event,
        parse_events_json,
    )
    from turnlog.store.events_policy import CondenserInfo, SessionPolicy
    from turnlog.store.limits import MAX_JSON_DEPTH, MAX_TOKENS, MAX_VERSION, check_json_depth, recorded_time
    from turnlog.store.sqlite import INLINE_LIMIT, SQLiteStore
    from turnlog.store.tokenizer import DEFAULT_ENCODING, Tokenizer, load_tokenizer

# module -> the public names it defines, loaded the first time one of them is asked for.
_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "turnlog.store.base": (
        "ANY",
        "NO_SESSION",
        "Blob",
        "EventStore",
        "Expected",
        "ExpectedVersion",
        "OriginItem",
        "RecordedEvent",
        "SessionSummary",
        "Store",
        "VerifyReport",
    ),
    "turnlog.store.errors": (
        "CorruptStoreError",
        "DuplicateEventError",
        "InvalidEventError",
        "StoreClosedError",
        "StoreError",
        "TokenizerError",
        "UnknownArtifactError",
        "UnknownEventError",
        "UnknownSessionError",
        "VersionConflictError",
    ),
    "turnlog.store.events": (
        "CURRENT_VERSIONS",
        "EVENT_ADAPTER",
        "EVENT_CLASSES",
        "ArtifactWritten",
        "CompactionFailed",
        "ContextBuilt",
        "Event",
        "ForkPoint",
        "ManifestEntry",
        "MessageAppended",
        "MessagePinned",
        "MessageRemoved",
        "MessageUnpinned",
        "Origin",
        "OutputCondensed",
        "Pin",
        "PolicySet",
        "RunFinished",
        "RunStarted",
        "SessionRewound",
        "SessionStarted",
        "StateRecorded",
        "SummarizerInfo",
        "SummarizerUsage",
        "SummaryRecorded",
        "TodoItem",
        "TodosUpdated",
        "ToolCall",
        "ToolReturned",
        "UsageRecorded",
        "new_event_id",
        "parse_event",
        "parse_events_json",
    ),
    "turnlog.store.events_policy": (
        "CondenserInfo",
        "SessionPolicy",
    ),
    "turnlog.store.limits": (
        "MAX_JSON_DEPTH",
        "MAX_TOKENS",
        "MAX_VERSION",
        "check_json_depth",
        "recorded_time",
    ),
    "turnlog.store.sqlite": (
        "INLINE_LIMIT",
        "SQLiteStore",
    ),
    "turnlog.store.tokenizer": (
        "DEFAULT_ENCODING",
        "Tokenizer",
        "load_tokenizer",
    ),
}
_LAZY: dict[str, str] = {name: module for module, names in _LAZY_MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ANY",
    "CURRENT_VERSIONS",
    "DEFAULT_ENCODING",
    "EVENT_ADAPTER",
    "EVENT_CLASSES",
    "INLINE_LIMIT",
    "MAX_JSON_DEPTH",
    "MAX_TOKENS",
    "MAX_VERSION",
    "NO_SESSION",
    "ArtifactWritten",
    "Blob",
    "CompactionFailed",
    "CondenserInfo",
    "ContextBuilt",
    "CorruptStoreError",
    "DuplicateEventError",
    "Event",
    "EventStore",
    "Expected",
    "ExpectedVersion",
    "ForkPoint",
    "InvalidEventError",
    "ManifestEntry",
    "MessageAppended",
    "MessagePinned",
    "MessageRemoved",
    "MessageUnpinned",
    "Origin",
    "OriginItem",
    "OutputCondensed",
    "Pin",
    "PolicySet",
    "RecordedEvent",
    "RunFinished",
    "RunStarted",
    "SQLiteStore",
    "SessionPolicy",
    "SessionRewound",
    "SessionStarted",
    "SessionSummary",
    "StateRecorded",
    "Store",
    "StoreClosedError",
    "StoreError",
    "SummarizerInfo",
    "SummarizerUsage",
    "SummaryRecorded",
    "TodoItem",
    "TodosUpdated",
    "Tokenizer",
    "TokenizerError",
    "ToolCall",
    "ToolReturned",
    "UnknownArtifactError",
    "UnknownEventError",
    "UnknownSessionError",
    "UsageRecorded",
    "VerifyReport",
    "VersionConflictError",
    "check_json_depth",
    "load_tokenizer",
    "new_event_id",
    "parse_event",
    "parse_events_json",
    "recorded_time",
]
