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
from django.db.models import QuerySet, Sum

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
# In the order of the record's key columns (agent_id, member_id, model).
GROUPS = ("agent", "member", "model")
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


def _grouped(rows: QuerySet[UsageDay], *columns: str) -> dict[Any, dict[str, Any]]:
    """Return the figures summed per value of `columns` (a tuple of them when several), each
    with its cost by currency, in one query (priced calls only make a cost)."""
    sums = {name: Sum(name) for name in FIGURES}
    found: dict[Any, dict[str, Any]] = {}
    query = rows.values(*columns, "currency").annotate(**sums, amount=Sum("cost")).order_by()
    for row in query:
        key = row[columns[0]] if len(columns) == 1 else tuple(row[name] for name in columns)
        item = found.setdefault(key, {name: 0 for name in FIGURES} | {"cost": {}})
        for name in FIGURES:
            item[name] += int(row[name] or 0)
        if row["currency"]:
            costs = item["cost"]
            costs[row["currency"]] = costs.get(row["currency"], Decimal(0)) + Decimal(
                row["amount"] or 0
            )
    return found


def _added(items: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {name: 0 for name in FIGURES} | {"cost": {}}
    for item in items:
        for name in FIGURES:
            total[name] += item[name]
        for currency, amount in item["cost"].items():
            total["cost"][currency] = total["cost"].get(currency, Decimal(0)) + amount
    return total


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
    by_day = _grouped(rows, "day")
    empty = {name: 0 for name in FIGURES} | {"cost": {}}
    days = []
    for day in span.days():
        found = by_day.get(day, empty)
        days.append({"day": day, **_figures(found), "cost": found["cost"]})
    # One query for the three breakdowns: a space has few (agent, member, model) keys.
    keys = _grouped(rows, "agent_id", "member_id", "model")
    groups = {}
    for position, group in enumerate(GROUPS):
        parts: dict[Any, list[dict[str, Any]]] = {}
        for key, item in keys.items():
            parts.setdefault(key[position], []).append(item)
        found = {value: _added(items) for value, items in parts.items()}
        labels = _labels(group, list(found))
        groups[group] = sorted(
            (
                {"label": labels[value], **_figures(item), "cost": item["cost"]}
                for value, item in found.items()
            ),
            key=lambda item: (-item["input_tokens"] - item["output_tokens"], item["label"]),
        )
    total = _added(list(by_day.values()))
    return {
        "space": space,
        "span": span,
        "total": {**_figures(total), "cost": total["cost"]},
        "days": days,
        "groups": groups,
    }
