"""ContextPolicy made again from the same keyword arguments is the policy made first: an agent that
makes its policy on each call does not pay pydantic's validation each time (issue 20)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from turnlog import ContextPolicy
from turnlog.projections import context_types


def test_the_same_arguments_give_the_same_policy() -> None:
    first = ContextPolicy(budget=7321, fill=False)
    assert ContextPolicy(budget=7321, fill=False) is first
    assert ContextPolicy(budget=7321) is not first
    assert ContextPolicy(budget=7321).fill is True


def test_arguments_equal_but_of_other_types_are_validated_apart() -> None:
    # True == 1 and 1 == 1.0: a key without the types would hand one's policy to the other.
    assert ContextPolicy(budget=1) is not ContextPolicy(budget=True)
    assert ContextPolicy(budget=9000, refill_to=1) is not ContextPolicy(budget=9000, refill_to=1.0)
    assert ContextPolicy(budget=9000, refill_to=1).refill_to == 1.0


def test_unhashable_arguments_are_validated_each_time() -> None:
    a = ContextPolicy(budget=5000, tool_output_modes={"default": "simple"})
    b = ContextPolicy(budget=5000, tool_output_modes={"default": "simple"})
    assert a == b and a is not b


def test_invalid_arguments_raise_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValidationError):
            ContextPolicy(budget=0)
    with pytest.raises(ValidationError):
        ContextPolicy(budget=10, unknown=1)


def test_the_kept_policies_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_types, "_POLICIES_KEPT", 4)
    context_types._POLICIES.clear()
    for budget in range(100, 120):
        ContextPolicy(budget=budget)
        assert len(context_types._POLICIES) <= 4


def test_validation_runs_once_per_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    context_types._POLICIES.clear()
    calls = []
    original = ContextPolicy.__init__

    def counted(self: ContextPolicy, **data: object) -> None:
        calls.append(data)
        original(self, **data)

    monkeypatch.setattr(ContextPolicy, "__init__", counted)
    for _ in range(5):
        ContextPolicy(budget=4321)
    assert len(calls) == 1
