"""A bounded cache per store object, for what a build renders deterministically from the log and
would otherwise render again on every warm build."""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from turnlog.store import Store

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StoreCache(Generic[K, V]):
    """A bounded cache, least recently used out, one per store object: event ids are unique within a
    store only, so two stores with the same id and different content (a copy, an import into a
    second file) never see each other's entries. Weak keys: a closed and dropped store takes its
    cache with it, and a new store at the same address starts empty."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._caches: weakref.WeakKeyDictionary[Store, OrderedDict[K, V]] = weakref.WeakKeyDictionary()

    def get(self, store: Store, key: K) -> V | None:
        cache = self._caches.get(store)
        found = cache.get(key) if cache is not None else None
        if cache is not None and found is not None:
            with contextlib.suppress(KeyError):  # another thread's put may have evicted it meanwhile
                cache.move_to_end(key)
        return found

    def table(self, store: Store) -> OrderedDict[K, V]:
        """The store's entries, for a caller that looks up many keys at once (one weak-key lookup
        instead of one per key): it keeps them in order itself (``move_to_end`` on a hit, and
        :meth:`trim` after adding)."""
        cache = self._caches.get(store)
        if cache is None:
            cache = self._caches[store] = OrderedDict()
        return cache

    def trim(self, cache: OrderedDict[K, V]) -> None:
        """The least recently used entries of a :meth:`table` out, down to the cache's size."""
        while len(cache) > self.size:
            cache.popitem(last=False)

    def put(self, store: Store, key: K, value: V) -> V:
        cache = self._caches.get(store)
        if cache is None:
            cache = self._caches[store] = OrderedDict()
        cache[key] = value
        while len(cache) > self.size:
            cache.popitem(last=False)
        return value


__all__ = ["StoreCache"]
