"""The materialized projections of a store, kept up to date by one materializer per open store."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from turnlog.projections.artifacts import ArtifactsProjection
from turnlog.projections.context_index import ContextIndex
from turnlog.projections.langgraph_index import LangGraphIndex
from turnlog.projections.ledger import Ledger
from turnlog.projections.live_index import LiveIndex
from turnlog.projections.materialize import Materializer, Projection
from turnlog.projections.runtime import RuntimeProjection
from turnlog.projections.sessions_projection import SessionsProjection
from turnlog.projections.stable_cuts import StableCutsProjection
from turnlog.projections.todos import TodosProjection
from turnlog.store import RecordedEvent, Store
from turnlog.store.dialect import Connection, dialect_of

# Each store's materializer is kept on the store object itself, not in a global map: a map's value
# would hold its key alive (the materializer holds its store), so no store would ever be freed. On
# the store, the two make one cycle, which the garbage collector frees once the store is dropped.
_ATTRIBUTE = "_turnlog_materializer"
_KEPT: weakref.WeakSet[Store] = weakref.WeakSet()


def all_projections(store: Store | None = None) -> list[Projection]:
    """A fresh instance of every materialized projection (``store``: the one they will be applied
    to, which the stable cuts' builds read; without it they can be created, not applied). The
    stable cuts come last: their builds read the rows of the others."""
    return [
        LiveIndex(),
        ContextIndex(),
        SessionsProjection(),
        Ledger(),
        ArtifactsProjection(),
        TodosProjection(),
        LangGraphIndex(),
        RuntimeProjection(),
        StableCutsProjection(store),
    ]


def materializer(store: Store) -> Materializer:
    """The store's materializer (one per open store object)."""
    attributes = vars(store)
    found: Materializer | None = attributes.get(_ATTRIBUTE)
    if found is None:
        found = attributes[_ATTRIBUTE] = Materializer(store, all_projections(store))
    return found


def keep_caught_up(store: Store) -> None:
    """Keep the token counts and materialized projections of ``store`` advanced with its appends. On
    a server, in each append's own transaction (or, when they are behind, right after it commits).
    In a SQLite file, an append stays one durable commit of the log alone: its records are handed
    to the materializer, and the next read's catch-up (every read catches up first) counts and
    applies them in one non-durable transaction, without reading them back.
    Idempotent; nothing to do for a read-only store."""
    if store.readonly or store in _KEPT:
        return
    ref = weakref.ref(store)  # the hook lives on the store: no cycle keeping it alive

    def advance(records: Sequence[RecordedEvent]) -> None:
        kept = ref()
        if kept is not None:
            materializer(kept).catch_up(appended=records)

    def advance_within(conn: Connection, records: Sequence[RecordedEvent]) -> None:
        kept = ref()
        if kept is not None:
            materializer(kept).apply_within(conn, records)

    def defer(records: Sequence[RecordedEvent]) -> None:
        kept = ref()
        if kept is not None:
            materializer(kept).defer(records)

    with store.reading() as conn:
        remote = dialect_of(conn).remote
    if remote:
        # On a server each transaction is a round trip: the projections' rows go in the append's own.
        store.within_append(advance_within)  # normally all the work, in the append's one commit
        store.on_append(advance)  # what that could not do (a backlog, another process's appends)
    else:
        # An embedded file: an append is the log's commit and nothing more; the counts and rows are
        # made by the next read's catch-up, from the records kept in memory (issue 20).
        store.on_append(defer)

        def finish() -> None:  # a writer leaves its file caught up, so readers have nothing to fold
            kept = ref()
            if kept is not None:
                materializer(kept).finish()

        store.on_close(finish)
    _KEPT.add(store)
