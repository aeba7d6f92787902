"""Reads of the spend record (`UsageDay`): a space's usage over a range of its days.

Who sees what: a space's admins see every member's usage, a member only their own. The record
is read, never the model calls: a year of a busy space is a few thousand rows per key.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, QuerySet, Sum

from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_member
from context_app.models import Agent
from sessions_app.models import UsageDay

# What each figure sums, in the order tables and the CSV show them.
FIGURES = (
    "calls",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "reasoning_tokens",
    "runs_succeeded",
    "runs_failed",
    "runs_cancelled",
    "summaries",
    "maskings",
    "compactions_failed",
    "unpriced_calls",
)
GROUPS = ("agent", "model", "member")
# The longest range one page reads (a year and a day: a leap year whole).
MAX_DAYS = 366


@dataclass(frozen=True)
class UsageRange:
    """A range of a space's days, both ends included."""

    start: datetime.date
    end: datetime.date

    def days(self) -> list[datetime.date]:
        count = (self.end - self.start).days + 1
        return [self.start + datetime.timedelta(days=n) for n in range(count)]


def usage_rows(*, user, space: Space) -> QuerySet[UsageDay]:
    """Return the space's record rows `user` may see (NotFound outside the space)."""
    role = require_member(user, space)
    rows = UsageDay.objects.filter(space=space)
    if role != Membership.Role.ADMIN:
        rows = rows.filter(member_id=user.pk)
    return rows


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    figures = {name: int(row.get(name) or 0) for name in FIGURES}
    total_input = figures["input_tokens"]
    figures["cached_share"] = (figures["cached_tokens"] / total_input) if total_input else None
    return figures


def _costs(rows: QuerySet[UsageDay], key: str | None) -> dict[Any, dict[str, Decimal]]:
    """Return the cost by currency (priced calls only), per `key` value (or under None)."""
    fields = [key, "currency"] if key else ["currency"]
    found: dict[Any, dict[str, Decimal]] = {}
    for row in rows.exclude(currency="").values(*fields).annotate(amount=Sum("cost")):
        costs = found.setdefault(row[key] if key else None, {})
        costs[row["currency"]] = Decimal(row["amount"] or 0)
    return found


def _labels(group: str, ids: list[Any]) -> dict[Any, str]:
    if group == "agent":
        named = dict(Agent.objects.filter(pk__in=ids).values_list("pk", "name"))
        return {pk: named.get(pk, f"agent #{pk} (deleted)") for pk in ids}
    if group == "member":
        users = get_user_model().objects.filter(pk__in=ids)
        named = {user.pk: user.get_username() for user in users}
        return {pk: named.get(pk, f"user #{pk} (deleted)") for pk in ids}
    return {value: value or "(unknown model)" for value in ids}


def usage_report(*, user, space: Space, span: UsageRange) -> dict[str, Any]:
    """Return the space's usage over `span` as `user` may see it: totals, each day's figures
    and the figures by agent, model and member, each with its cost by currency."""
    rows = usage_rows(user=user, space=space).filter(day__range=(span.start, span.end))
    sums = {name: Sum(name) for name in FIGURES}
    total = rows.aggregate(**sums)
    by_day = {row["day"]: row for row in rows.values("day").annotate(**sums)}
    day_costs = _costs(rows, "day")
    days = [
        {
            "day": day,
            **_figures(by_day.get(day, {})),
            "cost": day_costs.get(day, {}),
        }
        for day in span.days()
    ]
    groups = {}
    for group in GROUPS:
        column = {"agent": "agent_id", "member": "member_id", "model": "model"}[group]
        found = list(rows.values(column).annotate(**sums, keys=Count("id")).order_by(column))
        labels = _labels(group, [row[column] for row in found])
        costs = _costs(rows, column)
        groups[group] = sorted(
            (
                {
                    "label": labels[row[column]],
                    **_figures(row),
                    "cost": costs.get(row[column], {}),
                }
                for row in found
            ),
            key=lambda item: (-item["input_tokens"] - item["output_tokens"], item["label"]),
        )
    return {
        "space": space,
        "span": span,
        "total": {**_figures(total), "cost": _costs(rows, None).get(None, {})},
        "days": days,
        "groups": groups,
    }
