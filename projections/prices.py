"""Model prices: what a provider bills per million tokens, the bundled dated table and price files of
the same shape.

Billing convention: ``input_tokens`` of ``usage_recorded`` include the cached prompt tokens (cache reads
and cache writes), as OpenAI reports them; so the cost of a call is

    (input − cache_read − cache_write)·input_price + cache_read·cache_read_price
    + cache_write·cache_write_price + output·output_price

with prices in USD per million tokens. Reasoning tokens are part of the output tokens and are not billed
again. Importers of providers that report input without the cached tokens (Anthropic) must add them."""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from turnlog.store import StoreError
from turnlog.store.events import describe_validation_error


class PriceTableError(StoreError):
    """A price table file cannot be read or does not have the expected shape."""


Price = Annotated[float, Field(ge=0)]


class ModelPrice(BaseModel):
    """What one model costs, in USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    input: Price
    """Uncached prompt tokens."""
    output: Price
    """Completion tokens (reasoning tokens included)."""
    cache_read: Price
    """Prompt tokens read from the provider's cache."""
    cache_write: Price
    """Prompt tokens written to the provider's cache (the input price where writes cost nothing extra)."""

    def cost(self, input: int, output: int, cache_read: int, cache_write: int) -> float:
        """USD for these tokens, under the module's convention (``input`` includes the cached ones)."""
        uncached = max(0, input - cache_read - cache_write)
        return (
            uncached * self.input
            + cache_read * self.cache_read
            + cache_write * self.cache_write
            + output * self.output
        ) / 1_000_000


class PriceTable(BaseModel):
    """Prices per model, with the date they were taken and where from."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    date: Annotated[str, StringConstraints(min_length=1)]
    """When the prices were taken (they change: check them before relying on them)."""
    source: Annotated[str, StringConstraints(min_length=1)]
    """Where they come from."""
    models: dict[Annotated[str, StringConstraints(min_length=1)], ModelPrice]
    """Model name -> its prices (a name also prices its dated snapshots; ``name*`` prices every model
    whose name starts with ``name``)."""

    def price_for(self, model: str) -> ModelPrice | None:
        """The model's prices: by exact name, else by the longest table key of which the name is a
        dated or tagged snapshot (``gpt-4o-2024-08-06``, ``claude-3-5-haiku-20241022``,
        ``gemini-2.5-pro-preview-06-05``, ``gpt-4o-latest`` -> the key); None when no key matches.
        Another model that merely starts with a key (``o3-mini``, ``gemini-2.5-flash-lite``) is
        not priced as that key: an unknown price is shown as such, never a wrong one. A key ending
        in ``*`` (in a price file of your own) matches every name that starts with the rest."""
        exact = self.models.get(model)
        if exact is not None:
            return exact
        prefixes = [
            key
            for key in self.models
            if (key.endswith("*") and model.startswith(key[:-1]))
            or (model.startswith(key) and _SNAPSHOT.fullmatch(model[len(key) :]))
        ]
        return self.models[max(prefixes, key=len)] if prefixes else None


# What may follow a model's name in the name of one of its snapshots: a date (2024-08-06, 20241022,
# 06-05), a build number (001), or a release tag (latest, preview, exp), possibly combined.
_SNAPSHOT = re.compile(r"(?:[-@](?:\d{4}-\d{2}-\d{2}|\d{8}|\d{2}-\d{2}|\d{3}|latest|preview|exp))+")


def load_prices(path: str | os.PathLike[str] | None = None) -> PriceTable:
    """The bundled price table (a dated snapshot of public list prices), or the one in a JSON file of the
    same shape: ``{"date": ..., "source": ..., "models": {name: {"input", "output", "cache_read",
    "cache_write"}}}``, USD per million tokens. Raises PriceTableError naming the problem."""
    if path is None:
        where = "the bundled price table"
        text = resources.files("turnlog.projections").joinpath("data/prices.json").read_text(encoding="utf-8")
    else:
        where = f"price table {os.fspath(path)}"
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise PriceTableError(f"cannot read {where}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PriceTableError(
            f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    try:
        return PriceTable.model_validate(data)
    except ValidationError as exc:
        raise PriceTableError(
            f"{where} is malformed: {describe_validation_error(exc)}; expected "
            '{"date": ..., "source": ..., "models": {"<model>": {"input": ..., "output": ..., '
            '"cache_read": ..., "cache_write": ...}}} in USD per million tokens'
        ) from None
