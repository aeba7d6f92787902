"""Reads of costs: a model call's, a run's and a session's, from the prices copied at call time."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from sessions_app.models import ModelCall, Run, Session

# What a cost is computed from: the prices copied at call time and the reported usage.
COST_FIELDS = (
    "price_currency",
    "price_input",
    "price_cached_input",
    "price_output",
    "price_max_prompt_tokens",
    "price_source_url",
    "price_verified_on",
    "price_source",
    "price_band",
    "reported_prompt_tokens",
    "cached_tokens",
    "reported_completion_tokens",
)


def call_cost_of(call: ModelCall) -> dict[str, Any] | None:
    """Return the call's cost with its currency and price source, or None when unknown."""
    amount = call.cost
    if amount is None:
        return None
    return {
        "amount": amount,
        "currency": call.price_currency,
        "price_date": call.price_verified_on,
        # Entered by an operator (`manual`), else the page the manifest read them from.
        "price_source": "manual"
        if call.price_source == "manual"
        else call.price_source_url or None,
        "price_band": call.price_band or None,
    }


def cost_summary(calls: Iterable[ModelCall]) -> dict[str, Any] | None:
    """Return the summed cost of `calls`, or None when none of them has a known cost.

    Every call counts, whatever became of its answer (the provider billed it). Calls whose cost
    is unknown are counted in `unpriced_calls` and left out of `amount`, which is then a lower
    bound (`complete` is false). Costs in more than one currency are not added up: None.
    """
    total = Decimal(0)
    currencies: set[str] = set()
    dates: set[Any] = set()
    count = unpriced = 0
    for call in calls:
        count += 1
        amount = call.cost
        if amount is None:
            unpriced += 1
            continue
        total += amount
        currencies.add(call.price_currency)
        dates.add(call.price_verified_on)
    if len(currencies) != 1:
        return None
    return {
        "amount": total,
        "currency": currencies.pop(),
        "price_date": sorted(date for date in dates if date is not None),
        "calls": count,
        "unpriced_calls": unpriced,
        "complete": unpriced == 0,
    }


def run_cost(run: Run) -> dict[str, Any] | None:
    """Return the cost of every model call of `run` (see `cost_summary`)."""
    return cost_summary(ModelCall.objects.filter(run=run).only(*COST_FIELDS).iterator())


def session_cost(session: Session) -> dict[str, Any] | None:
    """Return the cost of every model call of every run of `session` (see `cost_summary`)."""
    calls = ModelCall.objects.filter(run__session=session).only(*COST_FIELDS)
    return cost_summary(calls.iterator())


def cached_share_by_run(session: Session) -> list[dict[str, Any]]:
    """Return, per run of `session` that made a call, in order, the share of its reported prompt
    tokens served from the provider's cache, of all its calls and of its compaction calls.

    `{number, calls, prompt_tokens, cached_tokens, share, compaction_prompt_tokens,
    compaction_cached_tokens, compaction_share, unreported}`; a share is None (unknown, not zero)
    when no call of it reported usage; `unreported` counts the answered calls that reported none,
    left out of the share. One grouped query, whatever the session's length.
    """
    compaction = Q(purpose=ModelCall.Purpose.COMPACTION)
    rows = (
        ModelCall.objects.filter(run__session=session)
        .values("run__number")
        .annotate(
            calls=Count("id"),
            prompt=Sum("reported_prompt_tokens"),
            cached=Sum("cached_tokens"),
            compaction_prompt=Sum("reported_prompt_tokens", filter=compaction),
            compaction_cached=Sum("cached_tokens", filter=compaction),
            unreported=Count("id", filter=Q(reported_prompt_tokens__isnull=True, error="")),
        )
        .order_by("run__number")
    )
    return [
        {
            "number": row["run__number"],
            "calls": row["calls"],
            "prompt_tokens": row["prompt"],
            "cached_tokens": row["cached"] or 0,
            "share": _share(row["cached"], row["prompt"]),
            "compaction_prompt_tokens": row["compaction_prompt"],
            "compaction_cached_tokens": row["compaction_cached"] or 0,
            "compaction_share": _share(row["compaction_cached"], row["compaction_prompt"]),
            "unreported": row["unreported"],
        }
        for row in rows
    ]


def _share(cached: int | None, prompt: int | None) -> float | None:
    """Return cached / prompt, or None when no prompt token was reported."""
    return (cached or 0) / prompt if prompt else None
