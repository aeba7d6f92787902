"""The console's usage page: a space's spend record over a range of its days, as charts drawn
on the server (SVG: no script, nothing inline the policy refuses), a table under each chart and
a CSV download of each table.

Query: `space` (an id; default the caller's first space), `start` and `end` (ISO dates in the
space's time zone; default the last 30 days), `csv` (`day`, `agent`, `model` or `member`: that
table as CSV). A value that is not valid answers 400 naming the parameter.
"""

from __future__ import annotations

import csv
import datetime
import zoneinfo
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from agentloom.spaces.selectors import spaces_for_user
from sessions_app.console.errors import console_errors
from sessions_app.selectors.usage import FIGURES, GROUPS, MAX_DAYS, UsageRange, usage_report

DEFAULT_DAYS = 30
CHART_WIDTH, CHART_HEIGHT = 720, 180
# Each chart: its title and the figures stacked in each day's bar, bottom first.
CHARTS = (
    ("Tokens", ("uncached_input", "cached_tokens", "output_tokens")),
    ("Runs by outcome", ("runs_succeeded", "runs_failed", "runs_cancelled")),
    ("Compactions", ("summaries", "maskings", "compactions_failed")),
)
CSV_TABLES = ("day", *GROUPS)
LEGEND = {
    "uncached_input": "input (uncached)",
    "cached_tokens": "input (cached)",
    "output_tokens": "output",
    "runs_succeeded": "succeeded",
    "runs_failed": "failed",
    "runs_cancelled": "cancelled",
    "summaries": "summaries",
    "maskings": "maskings",
    "compactions_failed": "failed",
}


class UsageQuery(forms.Form):
    space = forms.IntegerField(required=False, min_value=1)
    start = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    end = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    csv = forms.ChoiceField(required=False, choices=[(name, name) for name in CSV_TABLES])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and start > end:
            self.add_error("start", "Must be on or before end.")
        elif start and end and (end - start).days >= MAX_DAYS:
            self.add_error("end", f"A range is at most {MAX_DAYS} days.")
        return data


def _space_today(space) -> datetime.date:
    try:
        zone = zoneinfo.ZoneInfo(space.time_zone or "UTC")
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        zone = datetime.UTC
    return timezone.now().astimezone(zone).date()


def _span(data: dict[str, Any], today: datetime.date) -> UsageRange:
    end = data.get("end") or (
        min(today, data["start"] + datetime.timedelta(days=DEFAULT_DAYS - 1))
        if data.get("start")
        else today
    )
    start = data.get("start") or end - datetime.timedelta(days=DEFAULT_DAYS - 1)
    return UsageRange(start, end)


def _series_class(series: int | str) -> str:
    return "unknown" if series == "unknown" else f"series-{series}"


def _day_label(day: dict[str, Any]) -> str:
    return day["day"].isoformat()


def _part_title(label: str, part: str, value: Any) -> str:
    return f"{label} {part.replace('_', ' ')}: {value}"


def stacked_bars(
    days: list[dict[str, Any]],
    parts: tuple[str, ...],
    *,
    label: Callable[[dict[str, Any]], str] = _day_label,
    title: Callable[[str, str, Any], str] = _part_title,
    top: float | None = None,
) -> dict[str, Any]:
    """Return the geometry of a stacked bar chart of `parts` per item (SVG user units).

    Items are days unless `label` names them otherwise; `top` fixes the scale (a share: 100),
    else the tallest item sets it. An item whose parts are all None (not known, which is not
    zero) is drawn as an empty outline the chart's height (`unknown`), titled so.
    """
    if top is None:
        top = max((sum(day[part] or 0 for part in parts) for day in days), default=0)
    slot = CHART_WIDTH / max(len(days), 1)
    width = max(slot * 0.8, 1)
    bars = []
    for index, day in enumerate(days):
        y = float(CHART_HEIGHT)
        if all(day[part] is None for part in parts):
            bars.append(
                {
                    "x": round(index * slot, 2),
                    "y": 0,
                    "width": round(width, 2),
                    "height": CHART_HEIGHT,
                    "series": "unknown",
                    "title": f"{label(day)}: unknown",
                }
            )
            continue
        for number, part in enumerate(parts):
            height = ((day[part] or 0) / top * CHART_HEIGHT) if top else 0
            if height:
                y -= height
                bars.append(
                    {
                        "x": round(index * slot, 2),
                        "y": round(y, 2),
                        "width": round(width, 2),
                        "height": round(height, 2),
                        "series": number,
                        "title": title(label(day), part, day[part]),
                    }
                )
    # Drawn here, not in a template loop: a year is over three thousand bars a chart.
    markup = "".join(
        f'<rect class="{_series_class(bar["series"])}" x="{bar["x"]}" y="{bar["y"]}" '
        f'width="{bar["width"]}" height="{bar["height"]}">'
        f"<title>{escape(bar['title'])}</title></rect>"
        for bar in bars
    )
    return {
        "bars": bars,
        "markup": mark_safe(markup),  # noqa: S308 - numbers and escaped titles only
        "top": top,
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
    }


def _presented(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in items:
        item["uncached_input"] = max(0, item["input_tokens"] - item["cached_tokens"])
        item["cost_text"] = cost_text(item["cost"])
        share = item["cached_share"]
        item["cached_text"] = "—" if share is None else f"{share:.0%}"
    return items


def cost_text(costs: dict[str, Decimal]) -> str:
    """Return the costs by currency as text (`0.0370 USD · 1.20 CNY`), or an em dash."""
    return " · ".join(f"{amount:.4f} {currency}" for currency, amount in sorted(costs.items())) or (
        "—"
    )


def _csv(report: dict[str, Any], table: str) -> HttpResponse:
    items = report["days"] if table == "day" else report["groups"][table]
    currencies = sorted({currency for item in items for currency in item["cost"]})
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    span = report["span"]
    response["Content-Disposition"] = (
        f'attachment; filename="usage-{report["space"].pk}-{table}-{span.start}-{span.end}.csv"'
    )
    writer = csv.writer(response)
    writer.writerow([table, *FIGURES, *(f"cost_{currency}" for currency in currencies)])
    for item in items:
        label = item["day"].isoformat() if table == "day" else item["label"]
        # A name chosen by a person is data: never a formula in a spreadsheet.
        if label[:1] in ("=", "+", "-", "@"):
            label = "'" + label
        writer.writerow(
            [
                label,
                *(item[name] for name in FIGURES),
                *(item["cost"].get(currency, "") for currency in currencies),
            ]
        )
    return response


@require_GET
@login_required
@console_errors()
def usage(request):
    """Show a space's usage by day and by agent, model and member (admins: all members')."""
    query = UsageQuery(request.GET)
    if not query.is_valid():
        field, errors = next(iter(query.errors.items()))
        return HttpResponseBadRequest(f"{field}: {' '.join(errors)}", content_type="text/plain")
    data = query.cleaned_data
    spaces = list(spaces_for_user(request.user).order_by("name", "id"))
    if data.get("space"):
        space = next((space for space in spaces if space.pk == data["space"]), None)
        if space is None:
            raise Http404("Not found.")
    elif spaces:
        space = spaces[0]
    else:
        return render(request, "console/usage.html", {"spaces": [], "report": None})
    report = usage_report(user=request.user, space=space, span=_span(data, _space_today(space)))
    if data.get("csv"):
        return _csv(report, data["csv"])
    _presented(report["days"])
    _presented([report["total"]])
    for name in GROUPS:
        _presented(report["groups"][name])
    charts = [
        {
            "title": title,
            "legend": [LEGEND[part] for part in parts],
            **stacked_bars(report["days"], parts),
        }
        for title, parts in CHARTS
    ]
    return render(
        request,
        "console/usage.html",
        {
            "spaces": spaces,
            "report": report,
            "charts": charts,
            "groups": [(name, report["groups"][name]) for name in GROUPS],
            "csv_names": CSV_TABLES,
        },
    )
