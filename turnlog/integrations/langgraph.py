"""LangGraph: :class:`TurnlogSaver`, a checkpointer kept in turnlog, behaving as ``SqliteSaver``.

``graph.compile(checkpointer=TurnlogSaver(db="turnlog.db"))``. One LangGraph thread is one turnlog
session (session id = ``thread_id``); every namespace (subgraphs) of the thread lives in that session.

- A checkpoint is a ``state_recorded`` event (framework ``langgraph``, ``namespace`` = checkpoint_ns,
  ``key`` = checkpoint id, ``parent_key`` = its parent, ``metadata`` = LangGraph's metadata merged as
  SqliteSaver merges it, ``content`` = the checkpoint and the channel values it changed, each
  channel stored once per change as LangGraph's own savers do (integrations.langgraph_blobs; a
  ``MessagesState`` turn stores its new messages, not the whole list again), ``media_type`` naming
  the serde type: ``application/x-langgraph-checkpoint; serde=msgpack; encoding=channels``; the
  earlier ``encoding=base64``, the whole checkpoint's serde bytes, is still read).
- One ``put_writes`` call is one ``state_recorded`` (``key`` = ``<checkpoint id>/writes/<task id>``,
  ``parent_key`` = the checkpoint, ``media_type`` ``application/x-langgraph-writes+json``); which
  write wins follows SqliteSaver's ``INSERT OR REPLACE`` (special channels) / ``OR IGNORE`` rule.
- The root namespace's ``messages`` channel is also written as ordinary ``message_appended`` /
  ``tool_returned`` events (LangChain's mapping), once per message id, in the same atomic append as
  the checkpoint; a message gone from the channel (``RemoveMessage``) is a ``message_removed``;
  resuming from an earlier checkpoint is a ``session_rewound`` (``time_travel``) to the version of
  that checkpoint's event; ``delete_thread`` is a ``session_rewound`` to 0 (``delete``). Nothing is
  ever deleted from the log.

What a graph asks on every step is answered from memory (integrations.langgraph_log): each
thread's latest checkpoint per namespace with its pending writes, and which messages are live,
folded from the saver's own appends, or from the log when another writer appended. So ``get_tuple``
of the latest checkpoint is one query (the session's head), and ``put``/``put_writes`` read nothing
before they append. LangGraph calls them from several threads at once: the writes of a thread that
wait for the saver's lock are appended together, in one append (integrations.langgraph_queue; a
task's writes that arrive before their checkpoint's ``put``, as LangGraph's default durability
sends them, wait for it), and each call returns once its own write is committed. Other reads (a
checkpoint by id, ``list``, a thread new to this process) use the materialized projection
``projections.langgraph_index``, caught up with the log before each read, so each is one indexed
query whatever the thread's length.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import functools
import json
import random
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from turnlog.integrations import StoreLike, open_for_adapter, require

require("langgraph.checkpoint.base", "langgraph")

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import (  # noqa: E402
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol  # noqa: E402

from turnlog.integrations.langgraph_blobs import (  # noqa: E402
    ENCODING,
    Previous,
    Stored,
    decode,
    encode,
    is_channels,
    references,
    resolved,
)
from turnlog.integrations.langgraph_log import SaverLog, advance_in_batches, state_of  # noqa: E402
from turnlog.integrations.langgraph_queue import QueuedWrite  # noqa: E402
from turnlog.projections.langgraph_index import (  # noqa: E402
    CHECKPOINT_MEDIA,
    FRAMEWORK,
    WRITES_MEDIA,
    CheckpointRow,
    WriteRow,
    find_checkpoints,
    has_rows,
    writes_of,
)
from turnlog.store import (  # noqa: E402
    SessionRewound,
    StateRecorded,
    Store,
    VersionConflictError,
)
from turnlog.store.dialect import Connection  # noqa: E402

__all__ = ["FRAMEWORK", "TurnlogSaver"]

_FILTER_KEY = re.compile(r"^[a-zA-Z0-9_.-]+$")  # SqliteSaver's rule for metadata filter keys
_SERDE = re.compile(r"serde=([^;]+)")
_PAGE = 256  # checkpoints read per query by list()
_PREVIOUS = 64  # (thread, namespace) pairs whose last checkpoint's values are kept (the least recent go)


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
        if isinstance(db, Store):
            self._store, self._owned = open_for_adapter(db)
        else:
            from turnlog import open_backend  # here: turnlog imports nothing of its integrations

            self._store, self._owned = open_backend(db), True
            advance_in_batches(self._store)
        self.map_messages = map_messages
        """Whether the root namespace's ``messages`` channel is also written as message events."""
        self._lock = threading.RLock()
        self._log = SaverLog(self._store, self._lock)
        self._previous: OrderedDict[tuple[str, str], Previous] = OrderedDict()
        """Each (thread, namespace)'s last checkpoint put here: the next one stores what changed."""
        self._previous_lock = threading.Lock()
        """Guards ``_previous`` alone: a ``put`` whose append is committed notes its values without
        waiting for the saver's lock, which another append of the thread may hold through its
        commit (LangGraph's next ``put`` waits for this one to return)."""

    @property
    def store(self) -> Store:
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

    # --- reads ----------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (its ``checkpoint_id``), or the namespace's latest
        (greatest id), with its pending writes; None if there is none."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        namespace = conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        with self._lock:
            thread = self._log.thread(thread_id, fresh=True)
            latest = self._log.latest(thread_id, thread, namespace)
            if latest is not None and (latest.row is None or checkpoint_id in ("", None, latest.row[2])):
                if latest.row is None:
                    return None  # the namespace has no checkpoint at all
                if not checkpoint_id:
                    config = _config(thread_id, namespace, latest.row[2])
                mine = sorted(latest.writes_of_latest(), key=lambda w: writes_sort_key(w[4], w[0], w[5]))
                return self._tuples(
                    thread_id, [latest.row], [config], [mine], latest.states, latest.states, remember=True
                )[0]
            rows, writes = self._log.query(
                lambda conn: _with_writes(
                    conn,
                    find_checkpoints(
                        conn,
                        session_id=thread_id,
                        namespace=namespace,
                        checkpoint_id=checkpoint_id or None,
                        limit=1,
                    ),
                )
            )
            if not rows:
                return None
            if not checkpoint_id:
                config = _config(thread_id, namespace, rows[0][2])
            return self._tuples(thread_id, rows, [config], writes, remember=True)[0]

    def _tuples(
        self,
        thread_id: str,
        rows: Sequence[CheckpointRow],
        configs: Sequence[RunnableConfig],
        writes: Sequence[Sequence[WriteRow]],
        known: Mapping[int, StateRecorded] | None = None,
        keep: dict[int, StateRecorded] | None = None,
        *,
        remember: bool = False,
    ) -> builtins.list[CheckpointTuple]:
        """Checkpoint tuples of one thread, their events taken from ``known`` or read (in one query,
        and one more for the blobs of earlier checkpoints they refer to; kept in ``keep``)."""
        events = dict(known or {})
        versions = {row[4] for row in rows} | {w[2] for mine in writes for w in mine}
        if versions - events.keys():
            self._read_into(thread_id, versions - events.keys(), events, keep)
        refs = set().union(*(references(row[4], events[row[4]]) for row in rows))
        if refs - events.keys():  # blobs of earlier checkpoints (langgraph_blobs)
            self._read_into(thread_id, refs - events.keys(), events, keep)
        decoded: dict[int, Any] = {}
        result = []
        for row, config, mine in zip(rows, configs, writes, strict=True):
            _sid, ns, _cid, parent, version, metadata = row
            state = events[version]
            if is_channels(state):
                checkpoint, stored = decode(self.serde, version, state, events)
                if remember:  # what LangGraph resumes from: its next checkpoint may refer to it
                    self._remember((thread_id, ns), checkpoint, stored)
                    messages = checkpoint["channel_values"].get("messages")
                    if ns == "" and self.map_messages and isinstance(messages, builtins.list):
                        self._log.note_read(thread_id, messages)
            else:
                checkpoint = self.serde.loads_typed(
                    (_serde_type(state.media_type), base64.b64decode(state.content))
                )
            pending: builtins.list[PendingWrite] = []
            for task_id, channel, at, item, _path, _idx in mine:
                if at not in decoded:
                    decoded[at] = json.loads(events[at].content)
                type_, value = decoded[at][item]
                pending.append((task_id, channel, self.serde.loads_typed((type_, base64.b64decode(value)))))
            result.append(
                CheckpointTuple(
                    config,
                    checkpoint,
                    cast(CheckpointMetadata, json.loads(metadata)),
                    _config(thread_id, ns, parent) if parent else None,
                    pending,
                )
            )
        return result

    def _remember(self, key: tuple[str, str], checkpoint: Checkpoint, stored: dict[str, Stored]) -> None:
        """The namespace's last checkpoint put or read, with how its values are stored."""
        versions = dict(checkpoint.get("channel_versions") or {})
        with self._previous_lock:
            self._previous[key] = Previous(checkpoint["id"], versions, stored)
            self._previous.move_to_end(key)
            while len(self._previous) > _PREVIOUS:  # it holds the values' objects: the least recent go
                self._previous.popitem(last=False)

    def _read_into(
        self,
        thread_id: str,
        versions: set[int],
        events: dict[int, StateRecorded],
        keep: dict[int, StateRecorded] | None,
    ) -> None:
        for record in self._store.read_versions(thread_id, sorted(versions)):
            events[record.version] = state_of(record)
            if keep is not None:
                keep[record.version] = events[record.version]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (descending id), selected as SqliteSaver selects them: of one
        thread (and namespace, and id, if the config names them) or of every thread; ``filter``
        compares metadata keys (dotted paths) with ``json_extract``; ``before`` keeps the ids below
        its checkpoint id; ``limit`` caps the count."""
        for key in filter or {}:
            if not _FILTER_KEY.match(key):
                raise ValueError(
                    f"Invalid filter key: '{key}'. Filter keys must contain only alphanumeric "
                    "characters, underscores, dots, and hyphens."
                )
        below = get_checkpoint_id(before) if before is not None else None
        if before is not None and below is None:
            return  # SQL's `checkpoint_id < NULL` matches nothing
        conf = config["configurable"] if config is not None else {}
        thread = str(conf["thread_id"]) if config is not None else None
        with self._lock:
            rows: builtins.list[CheckpointRow] = self._log.query(
                lambda conn: find_checkpoints(
                    conn,
                    session_id=thread,
                    namespace=conf.get("checkpoint_ns"),
                    checkpoint_id=get_checkpoint_id(config) if config is not None else None,
                    metadata=filter,
                    before=below,
                    limit=limit,
                )
            )
        for start in range(0, len(rows), _PAGE):  # read in pages: a long list streams
            page = rows[start : start + _PAGE]
            built: dict[tuple[str, str, str], CheckpointTuple] = {}
            with self._lock:
                for sid in dict.fromkeys(row[0] for row in page):
                    mine = [row for row in page if row[0] == sid]
                    _, writes = self._log.query(functools.partial(_with_writes, rows=mine))
                    configs = [_config(sid, row[1], row[2]) for row in mine]
                    tuples = self._tuples(sid, mine, configs, writes)
                    built.update({row[:3]: t for row, t in zip(mine, tuples, strict=True)})
            yield from (built[row[:3]] for row in page)

    # --- writes ---------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (and, in the root namespace, the messages it adds or removes) in one
        atomic append (with the thread's other writes waiting then); returns the config naming it."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        namespace = conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id") or None
        key = (str(thread_id), namespace)
        with self._previous_lock:
            previous = self._previous.get(key)
        if previous is not None and previous.checkpoint_id != parent:
            previous = None  # only the parent's values are known to be these objects
        type_, content, stored = encode(self.serde, checkpoint, new_versions, previous)
        # SqliteSaver stores json.dumps(..., ensure_ascii=False).encode("utf-8", "ignore") and reads it back.
        merged = get_checkpoint_metadata(config, metadata)
        meta = json.loads(json.dumps(merged, ensure_ascii=False).encode("utf-8", "ignore"))
        state = StateRecorded(
            framework=FRAMEWORK,
            namespace=namespace,
            key=checkpoint["id"],
            parent_key=parent,
            media_type=f"{CHECKPOINT_MEDIA}; serde={type_}; encoding={ENCODING}",
            content=content,
            metadata=meta,
        )
        messages = (checkpoint.get("channel_values") or {}).get("messages")
        mapped = namespace == "" and self.map_messages and isinstance(messages, builtins.list)
        write = QueuedWrite(str(thread_id), state, messages if mapped else None, parent)
        self._log.write(write)
        if write.version is not None:
            self._remember(key, checkpoint, resolved(write.version, stored))
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint["id"],
            }
        }

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
        self._log.write(QueuedWrite(sid, event))

    def delete_thread(self, thread_id: str) -> None:
        """Forget the thread's checkpoints and writes: a ``session_rewound`` to version 0 (reason
        ``delete``); the log keeps them. A thread used again continues the same session."""
        sid = str(thread_id)
        with self._lock:
            while True:
                if not self._log.query(lambda conn: has_rows(conn, sid)):
                    return  # nothing to delete: as SqliteSaver, a no-op
                try:
                    rewind = SessionRewound(to_version=0, reason="delete", source=FRAMEWORK)
                    self._log.append(sid, self._store.head_version(sid), [rewind])
                    return
                except VersionConflictError:
                    continue

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's default walk up the parent chain (each ancestor's writes, then the nearest
        stored value as the seed), stopping where the chain comes back to a checkpoint it has seen,
        as SqliteSaver's recursive query does (a checkpoint put again may name a later one as its
        parent)."""
        if not channels:
            return {}
        collected: dict[str, builtins.list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        target = self.get_tuple(config)
        seen = {target.config["configurable"]["checkpoint_id"]} if target else set()
        cursor = target.parent_config if target else None
        while cursor is not None and remaining:
            found = self.get_tuple(cursor)
            if found is None or found.config["configurable"]["checkpoint_id"] in seen:
                break
            seen.add(found.config["configurable"]["checkpoint_id"])
            for write in reversed(found.pending_writes or []):
                if write[1] in remaining:
                    collected[write[1]].append(write)
            for channel in [c for c in remaining if c in found.checkpoint["channel_values"]]:
                seeds[channel] = found.checkpoint["channel_values"][channel]
                remaining.discard(channel)
            cursor = found.parent_config
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": builtins.list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )

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


def _with_writes(
    conn: Connection, rows: builtins.list[CheckpointRow]
) -> tuple[builtins.list[CheckpointRow], builtins.list[builtins.list[WriteRow]]]:
    """The rows, and each one's pending writes in LangGraph's order (``writes_sort_key``)."""
    writes = [writes_of(conn, row[0], row[1], row[2]) for row in rows]
    return rows, [sorted(mine, key=lambda w: writes_sort_key(w[4], w[0], w[5])) for mine in writes]


def _serde_type(media_type: str) -> str:
    found = _SERDE.search(media_type)
    return found.group(1).strip() if found else "msgpack"
