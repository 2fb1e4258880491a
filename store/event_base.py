"""The base of the event models: the id types, the event id generator, and the frozen base classes
every event module (store.events, store.events_loop) builds on."""

from __future__ import annotations

import os
import random
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from turnlog.store import determinism

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\S+$")]
"""An id chosen by a caller or a provider: 1 to 200 characters, no whitespace."""

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
"""A lowercase hex sha256 digest: the id of a content blob."""


_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)
# Ids need uniqueness, not secrecy: 122 bits from a generator seeded by the OS (and seeded anew in
# a forked child, which would otherwise repeat its parent's ids) cost a fifth of a urandom call.
_ids = random.Random(os.urandom(32))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


_DETERMINISTIC = determinism.active()  # fixed when turnlog is imported (store.determinism)


def new_event_id() -> str:
    """A fresh random event id: a version 4 UUID in hex, like ``uuid.uuid4().hex``. Keep the event
    object (or its id) to retry an append idempotently."""
    if _DETERMINISTIC:
        return determinism.event_id()
    return f"{_ids.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET:032x}"


class ValueModel(BaseModel):
    """Base of every stored model: frozen, no unknown fields, no inf or nan."""

    # allow_inf_nan=False: JSON cannot hold inf or nan, and they would silently be stored as null.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)


class EventModel(ValueModel):
    """Base of every event: an id, and the texts whose tokens it adds."""

    # event_id is generated when the object is made, not when it is stored, so re-sending the same
    # object after a lost acknowledgement is an idempotent retry. Stored rows always carry their id.
    event_id: Identifier = Field(default_factory=new_event_id)
    """Unique id of this event in the whole store; a batch re-sent with the same ids is stored once."""

    def token_texts(self) -> tuple[str, ...]:
        """The texts whose tokens this event adds to the conversation (counted once, when stored)."""
        return ()
