"""The price a model call is billed at, and its cost from the usage the provider reported.

Prices come from the manifest only for an exact model ID on the provider's official endpoint (a
proxy or a self-hosted server serving the same name bills differently, or not at all); prices
that depend on the time of day are those in force at the call's start. A custom endpoint's
prices are the ones an operator entered on the connection (source `manual`, dated the day they
were entered). A cost is computed only from reported usage and known prices; anything missing
gives no cost (None), never an estimate.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agentloom.providers._urls import is_official_endpoint
from agentloom.providers.manifest import Manifest, Prices, load_manifest

__all__ = [
    "TOKENS_PER_PRICE_UNIT",
    "PriceInForce",
    "call_cost",
    "manual_price",
    "price_in_force",
]

# Manifest prices are per million tokens.
TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class PriceInForce:
    """The prices that apply to a call, with where and when they were read.

    `source` is `manifest` (read from `source_url` on `verified_on`) or `manual` (entered by an
    operator on `verified_on`); `band` is `peak` or `off_peak` for prices of a time of day.
    """

    prices: Prices
    source_url: str
    verified_on: str
    source: str = "manifest"
    band: str | None = None


def price_in_force(
    provider: str,
    base_url: str,
    model_id: str,
    *,
    at: datetime.datetime | None = None,
    manual: Mapping[str, Any] | None = None,
    manifest: Manifest | None = None,
) -> PriceInForce | None:
    """Return the prices of a call to `model_id` that starts at `at` (an aware instant).

    On the official endpoint: the manifest's for exactly this model, scheduled ones at `at`
    (None without `at`). Elsewhere: the operator's `manual` prices, if any.
    """
    if not is_official_endpoint(provider, base_url):
        return manual_price(manual) if manual else None
    manifest = manifest or load_manifest()
    entry = manifest.lookup(provider, model_id)
    if entry is None:
        return None
    if entry.prices is not None:
        return PriceInForce(entry.prices, entry.source_url, entry.verified_on)
    scheduled = manifest.scheduled_price(entry, at) if at is not None else None
    if scheduled is None:
        return None
    return PriceInForce(
        scheduled.prices, scheduled.source_url, scheduled.verified_on, band=scheduled.band
    )


def manual_price(manual: Mapping[str, Any]) -> PriceInForce:
    """Return the prices an operator entered on a connection, dated the day they were entered."""
    cached = manual.get("cached_input")
    prices = Prices(
        currency=manual["currency"],
        input=Decimal(manual["input"]),
        cached_input=None if cached is None else Decimal(cached),
        output=Decimal(manual["output"]),
    )
    return PriceInForce(prices, "", manual["entered_on"], source="manual")


def call_cost(
    prices: Prices | None,
    *,
    prompt_tokens: int | None,
    cached_tokens: int | None,
    completion_tokens: int | None,
) -> Decimal | None:
    """Return what a call cost in `prices.currency`, or None when it cannot be known.

    Cached input tokens are part of `prompt_tokens` (both OpenAI and DeepSeek report them so)
    and are priced at `cached_input`; the rest at `input`; completion tokens (reasoning
    included) at `output`. No cost without prices, without reported prompt and completion
    tokens, for cached tokens without a cached price, or for a prompt above `max_prompt_tokens`.
    """
    if prices is None or prompt_tokens is None or completion_tokens is None:
        return None
    cached = cached_tokens or 0
    if cached > prompt_tokens or min(prompt_tokens, completion_tokens, cached) < 0:
        return None
    if cached and prices.cached_input is None:
        return None
    if prices.max_prompt_tokens is not None and prompt_tokens > prices.max_prompt_tokens:
        return None
    total = (prompt_tokens - cached) * prices.input + completion_tokens * prices.output
    if cached:
        total += cached * prices.cached_input
    return total / TOKENS_PER_PRICE_UNIT
