"""Read what a provider reports about a call's input: prompt tokens and cached input tokens.

OpenAI reports `usage.prompt_tokens` and `usage.prompt_tokens_details.cached_tokens`; DeepSeek
reports `usage.prompt_tokens` and splits it into `prompt_cache_hit_tokens` and
`prompt_cache_miss_tokens`. Anything missing or malformed reads as unknown (None), never zero.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "add_usage",
    "cached_prompt_tokens",
    "estimate_error",
    "reported_completion_tokens",
    "reported_prompt_tokens",
]


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def reported_prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    """Return the input tokens the provider billed for the call, or None."""
    if not isinstance(usage, dict):
        return None
    reported = _count(usage.get("prompt_tokens"))
    if reported is None:
        hit = _count(usage.get("prompt_cache_hit_tokens"))
        miss = _count(usage.get("prompt_cache_miss_tokens"))
        if hit is not None and miss is not None:
            reported = hit + miss
    return reported


def reported_completion_tokens(usage: dict[str, Any] | None) -> int | None:
    """Return the output tokens (reasoning included) the provider billed for the call, or None."""
    if not isinstance(usage, dict):
        return None
    return _count(usage.get("completion_tokens"))


def cached_prompt_tokens(usage: dict[str, Any] | None) -> int | None:
    """Return the input tokens the provider served from its prompt cache, or None."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _count(details.get("cached_tokens")) is not None:
        return details["cached_tokens"]
    return _count(usage.get("prompt_cache_hit_tokens"))


def estimate_error(estimate: int, reported: int | None) -> float | None:
    """Return (estimate - reported) / reported: how far the estimate was off, as a fraction."""
    if not reported:
        return None
    return (estimate - reported) / reported


def add_usage(spent: dict[str, int], usage: dict[str, Any] | None) -> None:
    """Add one call's reported usage to `spent` (prompt, cached and completion tokens); a call
    that reported no prompt tokens counts in `unreported`."""
    prompt = reported_prompt_tokens(usage)
    if prompt is None:
        spent["unreported"] += 1
        return
    spent["prompt_tokens"] += prompt
    spent["cached_tokens"] += cached_prompt_tokens(usage) or 0
    spent["completion_tokens"] += reported_completion_tokens(usage) or 0
