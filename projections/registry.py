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
    """Keep the token counts and materialized projections of ``store`` advanced with its appends.
    An append stays one durable commit of the log alone, in a SQLite file and on a server alike:
    its records are handed to the materializer, and the next read's catch-up (every read catches up
    first, in any process, from the projections' checkpoints) counts and applies them in one
    non-durable transaction, without reading them back; closing the store does what is left.
    Projections are remade from the log, so a crash between the two loses nothing (issues 17, 20).
    Idempotent; nothing to do for a read-only store."""
    if store.readonly or store in _KEPT:
        return
    ref = weakref.ref(store)  # the hook lives on the store: no cycle keeping it alive

    def defer(records: Sequence[RecordedEvent]) -> None:  # after every append: kept short
        kept = ref()
        if kept is not None:
            (vars(kept).get(_ATTRIBUTE) or materializer(kept)).defer(records)

    store.on_append(defer)

    def finish() -> None:  # a writer leaves its store caught up, so readers have nothing to fold
        kept = ref()
        if kept is not None:
            materializer(kept).finish()

    store.on_close(finish)
    _KEPT.add(store)
