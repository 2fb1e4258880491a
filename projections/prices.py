"""Model prices: what a provider bills for a model call. By default the prices the ``genai-prices``
package ships (kept up to date by Pydantic, read offline from the installed package, never fetched);
``--prices FILE`` takes a price table of one's own instead.

Billing convention: ``input_tokens`` of ``usage_recorded`` include the cached prompt tokens (cache reads
and cache writes), as OpenAI reports them and as genai-prices counts them; so with a price table the
cost of a call is

    (input − cache_read − cache_write)·input_price + cache_read·cache_read_price
    + cache_write·cache_write_price + output·output_price

with prices in USD per million tokens, and genai-prices prices the same tokens the same way (plus its
long-context tiers and dated price changes). Reasoning tokens are part of the output tokens and are not
billed again. Importers of providers that report input without the cached tokens (Anthropic) must add
them."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from turnlog.store import StoreError
from turnlog.store.events import describe_validation_error

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, Provider


class PriceTableError(StoreError):
    """A price table file cannot be read or does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class CallTokens:
    """The billed tokens of one model call (or of a run's totals), as a price source needs them."""

    at: str
    """When it was recorded (ISO 8601, UTC): prices change over time, and some by the hour."""
    input: int
    """Prompt tokens, cached ones included."""
    output: int
    """Completion tokens, reasoning included."""
    cache_read: int = 0
    """Prompt tokens read from the provider's cache."""
    cache_write: int = 0
    """Prompt tokens written to the provider's cache."""
    calls: int = 1
    """Model calls these tokens cover (more than one for a run's totals)."""


class Prices(Protocol):
    """Where costs come from: the genai-prices data (:class:`PackagePrices`) or a price table file."""

    @property
    def date(self) -> str | None:
        """When the prices were taken; None where each call is priced at its own date."""

    @property
    def source(self) -> str:
        """Where the prices come from."""

    def cost(self, model: str, calls: Sequence[CallTokens]) -> float | None:
        """USD for these calls of ``model``; None when the model has no price here."""


Price = Annotated[float, Field(ge=0)]


class ModelPrice(BaseModel):
    """What one model costs, in USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

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
    """Prices per model from a file of one's own, with the date they were taken and where from."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

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
        in ``*`` matches every name that starts with the rest."""
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

    def cost(self, model: str, calls: Sequence[CallTokens]) -> float | None:
        """USD for these calls at the table's prices (linear: the date of a call does not matter)."""
        price = self.price_for(model)
        if price is None:
            return None
        return sum(price.cost(c.input, c.output, c.cache_read, c.cache_write) for c in calls)


# What may follow a model's name in the name of one of its snapshots: a date (2024-08-06, 20241022,
# 06-05), a build number (001), or a release tag (latest, preview, exp), possibly combined.
_SNAPSHOT = re.compile(r"(?:[-@](?:\d{4}-\d{2}-\d{2}|\d{8}|\d{2}-\d{2}|\d{3}|latest|preview|exp))+")


_REMEMBERED = 100_000
"""How many per-call prices a PackagePrices keeps (some 30 MB at most)."""


class PackagePrices:
    """The prices genai-prices ships, read from the installed package. Its own updater
    (``genai_prices.UpdatePrices``, which fetches newer prices over the network when started) is never
    started here, and a snapshot it installs elsewhere in the process is not used: the same package
    version always prices the same usage the same way, offline. Upgrade the package for newer prices.

    Each call is priced at its own date (prices that changed on a date, off-peak hours) and size
    (long-context tiers apply per call, by its prompt tokens); a run's totals over ``calls`` calls are
    priced as that many calls of the average size. The provider is the one the model name names
    (``anthropic:claude-…``, ``openai/gpt-…``), else the one genai-prices infers from the name."""

    def __init__(self) -> None:
        from genai_prices import __version__
        from genai_prices.data import providers
        from genai_prices.data_snapshot import DataSnapshot

        self._snapshot: DataSnapshot = DataSnapshot(providers=providers, from_auto_update=False)
        self._version = __version__
        self._models: dict[str, tuple[Provider, ModelInfo] | None] = {}
        self._calls: dict[tuple[str, str, CallTokens], Decimal] = {}

    @property
    def date(self) -> str | None:
        return None

    @property
    def source(self) -> str:
        return f"genai-prices {self._version} ships, each call at its date"

    def find(self, model: str) -> tuple[Provider, ModelInfo] | None:
        """The provider and genai-prices model that price ``model``; None when it has no price."""
        if model not in self._models:
            self._models[model] = self._find(model)
        return self._models[model]

    def _find(self, model: str) -> tuple[Provider, ModelInfo] | None:
        from genai_prices.data_snapshot import find_provider_by_id

        prefix, sep, rest = _split(model)
        if sep:
            named = find_provider_by_id(self._snapshot.providers, prefix)
            if named is not None:
                found = named.find_model(rest, all_providers=self._snapshot.providers)
                return (named, found) if found is not None else None
        for ref in (model, rest) if sep else (model,):
            try:
                return self._snapshot.find_provider_model(ref, None, None, None)
            except LookupError:
                continue
        return None

    def cost(self, model: str, calls: Sequence[CallTokens]) -> float | None:
        found = self.find(model)
        if found is None:
            return None
        provider, info = found
        if calls and _linear(info):
            # One price whatever the date or size of a call: the sum of the calls, priced once, costs
            # what pricing each one does (exact decimal arithmetic), for a fraction of the time.
            whole = CallTokens(
                at=calls[0].at,
                input=sum(max(c.input, c.cache_read + c.cache_write) for c in calls),
                output=sum(c.output for c in calls),
                cache_read=sum(c.cache_read for c in calls),
                cache_write=sum(c.cache_write for c in calls),
            )
            return float(self._price(provider, info, whole))
        return float(sum((self._one(provider, info, call) for call in calls), Decimal(0)))

    def _price(self, provider: Provider, info: ModelInfo, call: CallTokens) -> Decimal:
        # Tiers are per call: a run's totals are priced as its average call, that many times.
        at = datetime.fromisoformat(call.at)
        return info.calc_price(_usage(call), provider, genai_request_timestamp=at).total_price * call.calls

    def _one(self, provider: Provider, info: ModelInfo, call: CallTokens) -> Decimal:
        """One call of a model whose price depends on the call, remembered: an audit prices each
        call once per grouping it shows, and genai-prices takes about 50 µs a call."""
        key = (info.id, provider.id, call)
        found = self._calls.get(key)
        if found is None:
            if len(self._calls) >= _REMEMBERED:
                self._calls.clear()
            found = self._calls[key] = self._price(provider, info, call)
        return found


def _linear(info: ModelInfo) -> bool:
    """Whether the model has one price, the same for every call whatever its date, hour or size
    (price variants apply only to a request context, which turnlog never passes)."""
    from genai_prices.types import ModelPrice as PackageModelPrice
    from genai_prices.types import TieredPrices

    return isinstance(info.prices, PackageModelPrice) and not any(
        isinstance(value, TieredPrices) for value in vars(info.prices).values()
    )


def _split(model: str) -> tuple[str, str, str]:
    """``provider:model`` or ``provider/model`` -> (provider, separator, model); else (model, '', '')."""
    match = re.match(r"([^:/]+)([:/])(.+)", model)
    return (match[1], match[2], match[3]) if match else (model, "", "")


def _usage(call: CallTokens) -> Any:
    """genai-prices' usage for one call (the average one of a run's ``calls``). Cached tokens are
    part of the input in both; a source reporting more cached than input tokens has its input raised
    to them (the uncached part counted as none, as a price table does), not refused."""
    from genai_prices import Usage

    input = max(call.input, call.cache_read + call.cache_write)
    tokens = (input, call.output, call.cache_read, call.cache_write)
    if call.calls > 1:
        tokens = tuple(Decimal(n) / call.calls for n in tokens)  # type: ignore[assignment]
    return Usage(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cache_read_tokens=tokens[2],
        cache_write_tokens=tokens[3],
    )


@functools.cache
def package_prices() -> PackagePrices:
    """The genai-prices data, loaded once per process (importing it takes about 0.2 s)."""
    return PackagePrices()


def load_prices(path: str | os.PathLike[str] | None = None) -> Prices:
    """The genai-prices data (:class:`PackagePrices`), or the price table in a JSON file:
    ``{"date": ..., "source": ..., "models": {name: {"input", "output", "cache_read",
    "cache_write"}}}``, USD per million tokens. Raises PriceTableError naming the problem."""
    if path is None:
        return package_prices()
    return load_price_table(path)


def load_price_table(path: str | os.PathLike[str]) -> PriceTable:
    """The price table in a JSON file (see :func:`load_prices`); PriceTableError naming the problem."""
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
