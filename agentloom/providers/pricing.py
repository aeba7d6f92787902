"""The price a model call is billed at, and its cost from the usage the provider reported.

Prices come from the manifest only for an exact model ID on the provider's official endpoint (a
proxy or a self-hosted server serving the same name bills differently, or not at all). A cost is
computed only from reported usage and known prices; anything missing gives no cost (None), never
an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from agentloom.providers._urls import is_official_endpoint
from agentloom.providers.manifest import Manifest, Prices, load_manifest

__all__ = ["TOKENS_PER_PRICE_UNIT", "PriceInForce", "call_cost", "price_in_force"]

# Manifest prices are per million tokens.
TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class PriceInForce:
    """The prices that apply to one connection's calls, with where and when they were read."""

    prices: Prices
    source_url: str
    verified_on: str


def price_in_force(
    provider: str, base_url: str, model_id: str, *, manifest: Manifest | None = None
) -> PriceInForce | None:
    """Return the manifest's prices for exactly `model_id` on `provider`'s official endpoint."""
    if not is_official_endpoint(provider, base_url):
        return None
    entry = (manifest or load_manifest()).lookup(provider, model_id)
    if entry is None or entry.prices is None:
        return None
    return PriceInForce(entry.prices, entry.source_url, entry.verified_on)


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
