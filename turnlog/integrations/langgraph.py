"""LangGraph: :class:`TurnlogSaver`, a checkpointer kept in turnlog, behaving as ``SqliteSaver``.

``graph.compile(checkpointer=TurnlogSaver(db="turnlog.db"))``. One LangGraph thread is one turnlog
session (session id = ``thread_id``); every namespace (subgraphs) of the thread lives in that session.

- A checkpoint is a ``state_recorded`` event (framework ``langgraph``, ``namespace`` = checkpoint_ns,
  ``key`` = checkpoint id, ``parent_key`` = its parent, ``metadata`` = LangGraph's metadata merged as
  SqliteSaver merges it, ``content`` = the serde's bytes in base64, ``media_type`` naming the serde
  type: ``application/x-langgraph-checkpoint; serde=msgpack; encoding=base64``).
- One ``put_writes`` call is one ``state_recorded`` (``key`` = ``<checkpoint id>/writes/<task id>``,
  ``parent_key`` = the checkpoint, ``media_type`` ``application/x-langgraph-writes+json``); which
  write wins follows SqliteSaver's ``INSERT OR REPLACE`` (special channels) / ``OR IGNORE`` rule.
- The root namespace's ``messages`` channel is also written as ordinary ``message_appended`` /
  ``tool_returned`` events (LangChain's mapping), once per message id, in the same atomic append as
  the checkpoint; a message gone from the channel (``RemoveMessage``) is a ``message_removed``;
  resuming from an earlier checkpoint is a ``session_rewound`` (``time_travel``) to the version of
  that checkpoint's event; ``delete_thread`` is a ``session_rewound`` to 0 (``delete``). Nothing is
  ever deleted from the log.

Reads use an in-memory index of each thread (:mod:`turnlog.integrations.langgraph_index`), folded
from the log and advanced from it before every call, so the latest checkpoint is one indexed read.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import random
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

from turnlog.integrations import StoreLike, open_for_adapter, require

require("langgraph.checkpoint.base", "langgraph")

from langchain_core.messages import BaseMessage  # noqa: E402  (after the check)
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import (  # noqa: E402
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol  # noqa: E402

from projections.live import live_marks  # noqa: E402
from store import (  # noqa: E402
    NO_SESSION,
    Event,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    Origin,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    StateRecorded,
    ToolReturned,
    VersionConflictError,
)
from turnlog.integrations.langchain import _to_event, _usage  # noqa: E402  (one mapping for both)
from turnlog.integrations.langgraph_index import (  # noqa: E402
    CHECKPOINT_MEDIA,
    FRAMEWORK,
    WRITES_MEDIA,
    CheckpointEntry,
    ThreadIndex,
)

__all__ = ["FRAMEWORK", "TurnlogSaver"]

_FILTER_KEY = re.compile(r"^[a-zA-Z0-9_.-]+$")  # SqliteSaver's rule for metadata filter keys
_SERDE = re.compile(r"serde=([^;]+)")
_MAX_TARGETS = 1000  # message_removed names at most this many events


class TurnlogSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer stored in a turnlog store, with the sync and the async methods.

    ``db`` is a store's path or an open :class:`store.SQLiteStore` (left open by :meth:`close`).
    ``serde`` is LangGraph's serializer (default: its ``JsonPlusSerializer``). ``map_messages=False``
    keeps only the checkpoints (no message events). One instance may be shared by threads and by
    event loops; several processes may share one store.
    """

    def __init__(
        self,
        db: StoreLike = "turnlog.db",
        *,
        serde: SerializerProtocol | None = None,
        map_messages: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self._store, self._owned = open_for_adapter(db)
        self.map_messages = map_messages
        """Whether the root namespace's ``messages`` channel is also written as message events."""
        self._lock = threading.RLock()
        self._threads: dict[str, ThreadIndex] = {}

    @property
    def store(self) -> SQLiteStore:
        """The turnlog store the checkpoints go to."""
        return self._store

    def close(self) -> None:
        """Close the store if this saver opened it from a path."""
        if self._owned:
            self._store.close()

    def __enter__(self) -> TurnlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the index ------------------------------------------------------------------------------

    def _sync(self, thread_id: str) -> ThreadIndex:
        """The thread's index, advanced over whatever the log holds beyond it (any writer's)."""
        index = self._threads.setdefault(thread_id, ThreadIndex())
        if self._store.head_version(thread_id) > index.version:
            index.fold(self._store.read_session(thread_id, from_version=index.version + 1))
        return index

    def _append(self, thread_id: str, index: ThreadIndex, events: list[Event]) -> None:
        """Append after exactly what the index has seen (VersionConflictError if another writer
        appended meanwhile), then fold what was stored."""
        if index.version == 0:
            events = [SessionStarted(metadata={"framework": FRAMEWORK}), *events]
        expected = index.version if index.version else NO_SESSION
        records = self._store.append(thread_id, events, expected_version=expected, bounded=False)
        index.fold(records)

    def _thread_ids(self) -> list[str]:
        """Every LangGraph thread of the store (for ``list`` without a thread)."""
        found = []
        for summary in self._store.sessions():
            sid = summary.session_id
            if sid not in self._threads:
                first = self._store.first_event(sid)
                if not (
                    first is not None
                    and isinstance(first.event, SessionStarted)
                    and (first.event.metadata or {}).get("framework") == FRAMEWORK
                ):
                    continue
            found.append(sid)
        return found

    # --- reads ----------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (its ``checkpoint_id``), or the namespace's latest
        (greatest id), with its pending writes; None if there is none."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        namespace = conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        with self._lock:
            index = self._sync(thread_id)
            wanted = checkpoint_id or index.latest_id(namespace)
            entry = index.checkpoints.get(namespace, {}).get(wanted) if wanted else None
            if wanted is None or entry is None:
                return None
            if not checkpoint_id:
                config = _config(thread_id, namespace, wanted)
            return self._tuples(thread_id, index, [(namespace, wanted, entry)], [config])[0]

    def _tuples(
        self,
        thread_id: str,
        index: ThreadIndex,
        found: Sequence[tuple[str, str, CheckpointEntry]],
        configs: Sequence[RunnableConfig],
    ) -> list[CheckpointTuple]:
        """Checkpoint tuples of one thread, read in one query with their writes."""
        writes = [
            sorted(
                index.writes.get((ns, cid), {}).values(),
                key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx),
            )
            for ns, cid, _ in found
        ]
        versions = {e.version for _, _, e in found} | {w.version for ws in writes for w in ws}
        events = {r.version: r for r in self._store.read_versions(thread_id, sorted(versions))}
        decoded: dict[int, list[list[str]]] = {}
        result = []
        for (ns, _cid, entry), config, mine in zip(found, configs, writes, strict=True):
            state = _state(events[entry.version])
            checkpoint = self.serde.loads_typed(
                (_serde_type(state.media_type), base64.b64decode(state.content))
            )
            pending: list[PendingWrite] = []
            for w in mine:
                items = decoded.get(w.version)
                if items is None:
                    items = decoded[w.version] = json.loads(_state(events[w.version]).content)
                type_, value = items[w.item]
                channel = (_state(events[w.version]).metadata or {}).get("channels", [])[w.item]  # type: ignore[index]
                pending.append(
                    (w.task_id, str(channel), self.serde.loads_typed((type_, base64.b64decode(value))))
                )
            parent = _config(thread_id, ns, entry.parent) if entry.parent else None
            result.append(
                CheckpointTuple(
                    config, checkpoint, cast(CheckpointMetadata, dict(entry.metadata)), parent, pending
                )
            )
        return result

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (descending id), as SqliteSaver lists them: of one thread
        (and namespace, and id, if the config names them) or of every thread; ``filter`` matches
        metadata keys (dotted paths) as SQLite's ``json_extract`` compares them; ``before`` keeps the
        ids below its checkpoint id; ``limit`` caps the count."""
        for key in filter or {}:
            if not _FILTER_KEY.match(key):
                raise ValueError(
                    f"Invalid filter key: '{key}'. Filter keys must contain only alphanumeric "
                    "characters, underscores, dots, and hyphens."
                )
        with self._lock:
            matches = self._matches(config, filter or {}, before)
        if limit is not None and limit >= 0:
            matches = matches[:limit]
        for start in range(0, len(matches), 32):  # read in small pages, so a long list streams
            page = matches[start : start + 32]
            with self._lock:
                for thread_id, ns, cid, entry in page:
                    index = self._sync(thread_id)
                    yield self._tuples(thread_id, index, [(ns, cid, entry)], [_config(thread_id, ns, cid)])[0]

    def _matches(
        self, config: RunnableConfig | None, filter: dict[str, Any], before: RunnableConfig | None
    ) -> builtins.list[tuple[str, str, str, CheckpointEntry]]:
        if config is not None:
            conf = config["configurable"]
            threads = [str(conf["thread_id"])]
            namespace: str | None = conf.get("checkpoint_ns")
            only_id = get_checkpoint_id(config)
        else:
            threads, namespace, only_id = self._thread_ids(), None, None
        below = get_checkpoint_id(before) if before is not None else None
        if before is not None and below is None:
            return []  # SQL's `checkpoint_id < NULL` matches nothing
        found = []
        for thread_id in threads:
            index = self._sync(thread_id)
            for ns, checkpoints in index.checkpoints.items():
                if namespace is not None and ns != namespace:
                    continue
                for cid, entry in checkpoints.items():
                    if (only_id and cid != only_id) or (below is not None and not cid < below):
                        continue
                    if all(_metadata_matches(entry.metadata, k, v) for k, v in filter.items()):
                        found.append((thread_id, ns, cid, entry))
        found.sort(key=lambda f: f[2], reverse=True)
        return found

    # --- writes ---------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (and, in the root namespace, the messages it adds or removes) in one
        atomic append; returns the config naming it."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        namespace = conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id") or None
        type_, data = self.serde.dumps_typed(checkpoint)
        # SqliteSaver stores json.dumps(..., ensure_ascii=False).encode("utf-8", "ignore") and reads it back.
        merged = get_checkpoint_metadata(config, metadata)
        meta = json.loads(json.dumps(merged, ensure_ascii=False).encode("utf-8", "ignore"))
        state = StateRecorded(
            framework=FRAMEWORK,
            namespace=namespace,
            key=checkpoint["id"],
            parent_key=parent,
            media_type=f"{CHECKPOINT_MEDIA}; serde={type_}; encoding=base64",
            content=base64.b64encode(data).decode("ascii"),
            metadata=meta,
        )
        sid = str(thread_id)
        with self._lock:
            while True:
                index = self._sync(sid)
                try:
                    messages = self._message_events(sid, index, parent, checkpoint) if namespace == "" else []
                    self._append(sid, index, [*messages, state])
                    break
                except VersionConflictError:
                    continue  # another writer appended meanwhile: fold it and map again
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _message_events(
        self, sid: str, index: ThreadIndex, parent: str | None, checkpoint: Checkpoint
    ) -> builtins.list[Event]:
        """The events that make the session's live messages those of the checkpoint's ``messages``."""
        messages = (checkpoint.get("channel_values") or {}).get("messages")
        if not self.map_messages or not isinstance(messages, list):
            return []
        latest = index.latest_id("")
        root = index.checkpoints.get("", {})
        if parent is not None and latest is not None and parent != latest and parent in root:
            # Time travel: back to the state the session had when that checkpoint was stored.
            rewind = SessionRewound(
                to_version=root[parent].version,
                reason="time_travel",
                source=FRAMEWORK,
                note=f"resumed from checkpoint {parent}",
            )
            self._append(sid, index, [rewind])
        live = self._live_messages(sid, index)
        current = [m for m in messages if isinstance(m, BaseMessage) and isinstance(m.id, str) and m.id]
        ids = {m.id for m in current}
        gone = [event_id for message_id, event_id in live.items() if message_id not in ids]
        events: builtins.list[Event] = [
            MessageRemoved(
                target_event_ids=tuple(gone[i : i + _MAX_TARGETS]), reason="RemoveMessage", source=FRAMEWORK
            )
            for i in range(0, len(gone), _MAX_TARGETS)
        ]
        added: set[str] = set()
        for message in current:
            if message.id in live or message.id in added:
                continue
            added.add(cast(str, message.id))
            events.append(_message_event(message))
            events.extend(_usage(message))
        return events

    def _live_messages(self, sid: str, index: ThreadIndex) -> dict[str, str]:
        if index.messages is None:  # after a rewind: the live set is the log's, as turnlog folds it
            records = self._store.read_session(sid, to_version=index.version)
            marks = live_marks(self._store, sid, records)
            fresh = ThreadIndex()
            fresh.fold(r for r, live in zip(records, marks, strict=True) if live)
            index.messages = fresh.messages or {}
        return index.messages

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's intermediate writes for a checkpoint (one ``state_recorded``)."""
        if not writes:
            return
        conf = config["configurable"]
        sid = str(conf["thread_id"])
        namespace, checkpoint_id = str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"])
        items = []
        for _channel, value in writes:
            type_, data = self.serde.dumps_typed(value)
            items.append([type_, base64.b64encode(data).decode("ascii")])
        event = StateRecorded(
            framework=FRAMEWORK,
            namespace=namespace,
            key=f"{checkpoint_id}/writes/{task_id}",
            parent_key=checkpoint_id,
            media_type=WRITES_MEDIA,
            content=json.dumps(items),
            metadata={"task_id": task_id, "task_path": task_path, "channels": [c for c, _ in writes]},
        )
        with self._lock:
            while True:
                index = self._sync(sid)
                try:
                    self._append(sid, index, [event])
                    return
                except VersionConflictError:
                    continue

    def delete_thread(self, thread_id: str) -> None:
        """Forget the thread's checkpoints and writes: a ``session_rewound`` to version 0 (reason
        ``delete``); the log keeps them. A thread used again continues the same session."""
        sid = str(thread_id)
        with self._lock:
            while True:
                index = self._sync(sid)
                if not index.checkpoints and not index.writes:
                    return  # nothing to delete: as SqliteSaver, a no-op
                try:
                    self._append(
                        sid, index, [SessionRewound(to_version=0, reason="delete", source=FRAMEWORK)]
                    )
                    return
                except VersionConflictError:
                    continue

    def get_next_version(self, current: str | None, channel: None) -> str:
        """SqliteSaver's: the next integer, zero-padded, with a random fraction."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # --- async: the same methods, in a worker thread --------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)


# --- helpers -----------------------------------------------------------------------------------


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": namespace, "checkpoint_id": checkpoint_id}
    }


def _state(record: RecordedEvent) -> StateRecorded:
    event = record.event
    if not isinstance(event, StateRecorded):  # the index points only at state events
        raise InvalidEventError(f"version {record.version} of {record.session_id!r} is not a state event")
    return event


def _serde_type(media_type: str) -> str:
    found = _SERDE.search(media_type)
    return found.group(1).strip() if found else "msgpack"


def _message_event(message: BaseMessage) -> Event:
    """LangChain's mapping of a message, its origin marked as LangGraph's."""
    try:
        event = _to_event(message)
    except InvalidEventError:
        # Content that is not JSON: still shown by its text; the origin keeps only its id.
        event = _to_event(message.model_copy(update={"additional_kwargs": {}, "response_metadata": {}}))
    item = event.origin.item if isinstance(event, MessageAppended | ToolReturned) and event.origin else None
    return event.model_copy(update={"origin": Origin(framework=FRAMEWORK, item=item)})


# SQLite's json_extract() values as SqliteSaver's filter compares them: None, a number, or text.
_MISSING = object()


def _extract(metadata: Any, path: str) -> Any:
    value = metadata
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _sql_value(value: Any) -> Any:
    if value is _MISSING or value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float | str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _metadata_matches(metadata: Any, key: str, wanted: Any) -> bool:
    """One ``filter`` key, as ``json_extract(metadata, '$.key') = ?`` (or ``IS NULL``) matches it."""
    got = _sql_value(_extract(metadata, key))
    if wanted is None:
        return got is None
    if isinstance(wanted, int | float):  # bools included: True is 1
        return isinstance(got, int | float) and got == wanted
    if isinstance(wanted, str):
        return isinstance(got, str) and got == wanted
    if isinstance(wanted, dict | list):
        return isinstance(got, str) and got == json.dumps(wanted, separators=(",", ":"))
    return isinstance(got, str) and got == str(wanted)
