"""A guard for a backend's tests: a driver exception out of a public store method fails the test
(callers only ever see StoreErrors)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def public_methods(cls: type, module_prefixes: tuple[str, ...], raw: set[str]) -> list[str]:
    """The public methods of a store class assembled from layers (modules starting with one of
    ``module_prefixes``), without ``raw`` (those that hand out a connection on purpose)."""
    layers = [layer for layer in cls.__mro__ if layer.__module__.startswith(module_prefixes)]
    names = {
        name
        for layer in layers
        for name, value in vars(layer).items()
        if not name.startswith("_") and name not in raw and isinstance(value, (classmethod, Callable))
    }
    return [*sorted(names), "__enter__", "__exit__"]


def _guarded(
    owner: str, name: str, function: Callable[..., Any], error: type[BaseException]
) -> Callable[..., Any]:
    def check(exc: BaseException) -> None:
        pytest.fail(f"{owner}.{name} let a driver error escape: {exc!r}")

    def iterate(iterator: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from iterator
        except error as exc:
            check(exc)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except error as exc:
            check(exc)
        return iterate(result) if inspect.isgenerator(result) else result

    return wrapper


def guard(monkeypatch: pytest.MonkeyPatch, cls: type, names: list[str], error: type[BaseException]) -> None:
    """Wrap each of ``names`` on ``cls`` so that an ``error`` out of it fails the test."""
    for name in names:
        value = inspect.getattr_static(cls, name)
        if isinstance(value, classmethod):
            monkeypatch.setattr(cls, name, classmethod(_guarded(cls.__name__, name, value.__func__, error)))
        else:
            monkeypatch.setattr(cls, name, _guarded(cls.__name__, name, getattr(cls, name), error))
