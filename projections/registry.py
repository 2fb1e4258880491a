"""The materialized projections of a store, kept up to date by one materializer per open store."""

from __future__ import annotations

import weakref

from projections.artifacts import ArtifactsProjection
from projections.context_index import ContextIndex
from projections.ledger import Ledger
from projections.materialize import Materializer, Projection
from projections.sessions import SessionsProjection
from projections.todos import TodosProjection
from store import SQLiteStore

_MATERIALIZERS: weakref.WeakKeyDictionary[SQLiteStore, Materializer] = weakref.WeakKeyDictionary()


def all_projections() -> list[Projection]:
    """A fresh instance of every materialized projection."""
    return [ContextIndex(), SessionsProjection(), Ledger(), ArtifactsProjection(), TodosProjection()]


def materializer(store: SQLiteStore) -> Materializer:
    """The store's materializer (one per open store object)."""
    found = _MATERIALIZERS.get(store)
    if found is None:
        found = Materializer(store, all_projections())
        _MATERIALIZERS[store] = found
    return found
