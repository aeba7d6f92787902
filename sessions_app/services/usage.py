"""The spend record: model calls and runs summed into `UsageDay` rows as they are recorded.

Rule: a call is added to the record in the transaction that inserts its `ModelCall` row, and a
run's outcome in the transaction that ends it, so the record always equals the sums of the rows
it counts (while they exist). Every call counts, whatever became of its answer: the provider
billed it. The record is never deleted with the sessions it counts (a purge keeps it).

A row is keyed by the space, the day in the space's time zone at recording time, the agent, the
member who owns the session, the model and the price currency. One save adds to it in ONE
statement (an insert-or-add upsert over all the keys the save touches), whatever the number of
calls it records.
"""

from __future__ import annotations

import datetime
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Q, Sum
from django.utils import timezone

from agentloom.errors import SpendLimitReached
from models_app.models import SpendLimit
from sessions_app.models import ModelCall, Run, Session, UsageDay

# The outcome columns of a run's end, by its terminal status.
RUN_OUTCOMES = {
    Run.Status.SUCCEEDED: "runs_succeeded",
    Run.Status.FAILED: "runs_failed",
    Run.Status.CANCELLED: "runs_cancelled",
}


@dataclass
class UsageCounts:
    """What one save adds to one `UsageDay` row."""

    calls: int = 0
    failed_calls: int = 0
    compaction_calls: int = 0
    unreported_calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = field(default_factory=lambda: Decimal(0))
    unpriced_calls: int = 0
    runs_succeeded: int = 0
    runs_failed: int = 0
    runs_cancelled: int = 0
    summaries: int = 0
    maskings: int = 0
    compactions_failed: int = 0

    def add_call(self, call: ModelCall) -> None:
        self.calls += 1
        self.failed_calls += bool(call.error)
        self.compaction_calls += call.purpose == ModelCall.Purpose.COMPACTION
        self.unreported_calls += call.usage_unreported
        self.input_tokens += call.reported_prompt_tokens or 0
        self.cached_tokens += call.cached_tokens or 0
        self.output_tokens += call.reported_completion_tokens or 0
        self.reasoning_tokens += reasoning_tokens(call.usage) or 0
        cost = call.cost
        if cost is None:
            # A failed call with no usage was not billed: nothing unknown about it.
            self.unpriced_calls += call.usage is not None or not call.error
        else:
            self.cost += cost


COLUMNS = tuple(item.name for item in fields(UsageCounts))
KEY_COLUMNS = ("space_id", "day", "agent_id", "member_id", "model", "currency")


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    """Return the output tokens the model spent reasoning (part of the completion), or None."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


@dataclass(frozen=True)
class UsageOwner:
    """Whose usage a run's calls are: the space (and its time zone), agent, member and model."""

    space_id: int
    time_zone: str
    agent_id: int
    member_id: int
    model: str

    @classmethod
    def of_run(cls, run: Run) -> UsageOwner:
        session = run.session
        budget = (session.agent_version.snapshot or {}).get("budget") or {}
        return cls(
            space_id=session.space_id,
            time_zone=session.space.time_zone,
            agent_id=session.agent_id,
            member_id=session.created_by_id or 0,
            model=str(budget.get("model_id") or "")[:200],
        )

    def today(self, now: datetime.datetime | None = None) -> datetime.date:
        """Return the space's day at `now` (default: now)."""
        try:
            zone = zoneinfo.ZoneInfo(self.time_zone or "UTC")
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            zone = datetime.UTC
        return (now or timezone.now()).astimezone(zone).date()


def compaction_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Return the compaction columns for compaction log rows (summaries, maskings, failures)."""
    counts = {"summaries": 0, "maskings": 0, "compactions_failed": 0}
    for row in rows:
        outcome = row.get("outcome")
        if outcome == "failed":
            counts["compactions_failed"] += 1
        elif row.get("stage") == "masking":
            counts["maskings"] += outcome == "applied"
        elif outcome == "succeeded":
            counts["summaries"] += 1
    return counts


def usage_add(
    *,
    owner: UsageOwner,
    calls: Iterable[ModelCall] = (),
    ended: str | None = None,
    compactions: dict[str, int] | None = None,
) -> int:
    """Add `calls`, a run's end (`ended`: its terminal status) and its compaction stages to the
    spend record in one statement; return how many rows it touched (0: nothing to add).

    Call it inside the transaction that records the calls or ends the run.
    """
    day = owner.today()
    totals: dict[str, UsageCounts] = {}
    for call in calls:
        totals.setdefault(call.price_currency, UsageCounts()).add_call(call)
    extra: dict[str, int] = {}
    if ended in RUN_OUTCOMES:
        extra[RUN_OUTCOMES[ended]] = 1
    for name, value in (compactions or {}).items():
        if value:
            extra[name] = value
    if extra:
        # A run's outcome goes with its calls' row (their currency), or a row of its own.
        counts = next(iter(totals.values())) if totals else totals.setdefault("", UsageCounts())
        for name, value in extra.items():
            setattr(counts, name, getattr(counts, name) + value)
    if not totals:
        return 0
    _upsert(owner, day, totals)
    return len(totals)


def _upsert(owner: UsageOwner, day: datetime.date, totals: dict[str, UsageCounts]) -> None:
    ops = connection.ops
    table = ops.quote_name(UsageDay._meta.db_table)
    columns = (*KEY_COLUMNS, *COLUMNS)
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    params: list[Any] = []
    for currency, counts in totals.items():
        params += [
            owner.space_id,
            ops.adapt_datefield_value(day),
            owner.agent_id,
            owner.member_id,
            owner.model,
            currency,
        ]
        for name in COLUMNS:
            value = getattr(counts, name)
            params.append(
                ops.adapt_decimalfield_value(value, 24, 8) if name == "cost" else int(value)
            )
    added = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in COLUMNS)
    # Every name is ours (the model's table and columns); the values are parameters.
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES "  # noqa: S608
        + ", ".join([placeholders] * len(totals))
        + f" ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {added}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _limit_scope(limit: SpendLimit) -> str:
    parts = []
    if limit.agent_id:
        parts.append("this agent's")
    if limit.member_id:
        parts.append("your")
    return " and ".join(parts) or "this space's"


def spend_check(*, session: Session) -> list[str]:
    """Refuse a new run of `session` past a spend limit that applies to it (`SpendLimitReached`);
    return the warnings of the limits past their warning share.

    A limit applies to the space's, its agent's or its member's spend this calendar month (in
    the space's time zone), in the limit's currency, as the spend record counts it.
    """
    limits = list(
        SpendLimit.objects.filter(space_id=session.space_id)
        .filter(Q(agent_id=0) | Q(agent_id=session.agent_id))
        .filter(Q(member__isnull=True) | Q(member_id=session.created_by_id))
    )
    if not limits:
        return []
    today = UsageOwner(session.space_id, session.space.time_zone, 0, 0, "").today()
    month = UsageDay.objects.filter(
        space_id=session.space_id, day__gte=today.replace(day=1), day__lte=today
    )
    warnings = []
    for limit in limits:
        rows = month.filter(currency=limit.currency)
        if limit.agent_id:
            rows = rows.filter(agent_id=limit.agent_id)
        if limit.member_id:
            rows = rows.filter(member_id=limit.member_id)
        spent = rows.aggregate(spent=Sum("cost"))["spent"] or Decimal(0)
        scope = _limit_scope(limit)
        # Reached once the month's spend in the limit's currency is at it (a limit of 0: after
        # the first spend); spend in another currency never reaches it.
        if spent > 0 and spent >= limit.amount:
            raise SpendLimitReached(
                f"The spend limit of {scope} usage is reached: {spent:.2f} of "
                f"{limit.amount:.2f} {limit.currency} this month. An admin of the space can "
                "raise it; no new question is taken until then."
            )
        if spent > 0 and spent >= limit.amount * Decimal(str(limit.warn_share)):
            warnings.append(
                f"{spent / limit.amount:.0%} of the spend limit of {scope} usage "
                f"({limit.amount:.2f} {limit.currency} a month) is used."
            )
    return warnings
