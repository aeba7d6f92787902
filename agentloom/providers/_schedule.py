"""Prices that depend on the time of day: dated peak-hour rules, holiday calendars, price periods.

A provider that bills peak and off-peak hours differently (DeepSeek, since 2026-08-16) publishes
its peak windows in one time zone, on some weekdays, outside a list of public holidays, and
changes the rule from time to time. The manifest models that as:

- a holiday calendar: per year, the local dates that are holidays; a year it does not list is
  unknown, never assumed to have none;
- a schedule: dated rules, each in force from its `from` instant until the next one, with a
  time zone, the ISO weekdays (1 = Monday) on which its peak windows apply, the windows as
  local `[start, end)` times, and the holiday calendar whose days are off-peak all day;
- per model, dated price periods naming a schedule, with the peak and the off-peak prices.

The band of an instant is decided in the rule's time zone; anything the data cannot decide
(before the first rule or period, a year the calendar does not list) has no band and so no
price: the cost stays unknown, never guessed.
"""

from __future__ import annotations

import datetime
import itertools
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BANDS",
    "HolidayCalendar",
    "PeakRule",
    "PricePeriod",
    "PriceSchedule",
    "parse_calendars",
    "parse_periods",
    "parse_schedules",
]

BANDS = ("peak", "off_peak")
_ISO_WEEKDAYS = frozenset(range(1, 8))


@dataclass(frozen=True)
class HolidayCalendar:
    """Public holidays by year, as local dates, with where and when they were read."""

    name: str
    years: Mapping[int, frozenset[datetime.date]]
    source_url: str
    verified_on: str

    def is_holiday(self, day: datetime.date) -> bool | None:
        """Return whether `day` is a holiday, or None when the calendar does not list its year."""
        holidays = self.years.get(day.year)
        if holidays is None:
            return None
        return day in holidays


@dataclass(frozen=True)
class PeakRule:
    """One version of a peak-hour rule, in force from `starts` until the next rule."""

    starts: datetime.datetime
    time_zone: str
    weekdays: frozenset[int]
    windows: tuple[tuple[datetime.time, datetime.time], ...]
    holidays: str | None = None

    def band(self, at: datetime.datetime, calendar: Callable[[str], HolidayCalendar]) -> str | None:
        """Return `peak` or `off_peak` for the instant `at`, or None when it cannot be told."""
        local = at.astimezone(zoneinfo.ZoneInfo(self.time_zone))
        if self.holidays is not None:
            holiday = calendar(self.holidays).is_holiday(local.date())
            if holiday is None:
                return None
            if holiday:
                return "off_peak"
        if local.isoweekday() not in self.weekdays:
            return "off_peak"
        now = local.time().replace(tzinfo=None)
        if any(start <= now < end for start, end in self.windows):
            return "peak"
        return "off_peak"


@dataclass(frozen=True)
class PriceSchedule:
    """A provider's dated peak-hour rules, with where and when they were read."""

    name: str
    rules: tuple[PeakRule, ...]
    source_url: str
    verified_on: str
    note: str | None = None

    def rule_at(self, at: datetime.datetime) -> PeakRule | None:
        """Return the rule in force at `at` (the latest that started), or None before the first."""
        started = [rule for rule in self.rules if rule.starts <= at]
        return started[-1] if started else None


@dataclass(frozen=True)
class PricePeriod:
    """A model's peak and off-peak prices from `starts` on, under the schedule `schedule`."""

    starts: datetime.datetime
    schedule: str
    peak: Any
    off_peak: Any


def parse_calendars(value: Any) -> dict[str, HolidayCalendar]:
    """Return the manifest's holiday calendars by name; raise ValueError if malformed."""
    calendars: dict[str, HolidayCalendar] = {}
    for name, fields in _object(value, "calendars").items():
        where = f"manifest: calendars.{name}"
        fields = _object(fields, where)
        years: dict[int, frozenset[datetime.date]] = {}
        for year, days in _object(fields.get("years"), f"{where}.years").items():
            if not isinstance(days, list):
                raise ValueError(f"{where}.years.{year} must be a list of dates")
            dates = frozenset(_date(day, f"{where}.years.{year}") for day in days)
            if not year.isdigit() or any(day.year != int(year) for day in dates):
                raise ValueError(f"{where}.years.{year}: every date must fall in that year")
            years[int(year)] = dates
        calendars[name] = HolidayCalendar(
            name, years, _https(fields.get("source_url"), where), _iso_date(fields, where)
        )
    return calendars


def parse_schedules(
    value: Any, calendars: Mapping[str, HolidayCalendar]
) -> dict[str, PriceSchedule]:
    """Return the manifest's price schedules by name; raise ValueError if malformed."""
    schedules: dict[str, PriceSchedule] = {}
    for name, fields in _object(value, "price_schedules").items():
        where = f"manifest: price_schedules.{name}"
        fields = _object(fields, where)
        raw_rules = fields.get("rules")
        if not isinstance(raw_rules, list) or not raw_rules:
            raise ValueError(f"{where}.rules must be a non-empty list")
        rules = tuple(_rule(rule, f"{where}.rules", calendars) for rule in raw_rules)
        if any(a.starts >= b.starts for a, b in itertools.pairwise(rules)):
            raise ValueError(f"{where}.rules must be in order of their `from`")
        note = fields.get("note")
        schedules[name] = PriceSchedule(
            name,
            rules,
            _https(fields.get("source_url"), where),
            _iso_date(fields, where),
            note if isinstance(note, str) else None,
        )
    return schedules


def parse_periods(
    value: Any,
    where: str,
    schedules: Mapping[str, PriceSchedule],
    parse_prices: Callable[[Any, str], Any],
) -> tuple[PricePeriod, ...]:
    """Return a model's dated price periods (empty when it has none); raise ValueError if bad."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where} must be a non-empty list or null")
    periods = []
    for item in value:
        item = _object(item, where)
        schedule = item.get("schedule")
        if schedule not in schedules:
            raise ValueError(f"{where}: unknown schedule {schedule!r}")
        periods.append(
            PricePeriod(
                starts=_instant(item.get("from"), f"{where}.from"),
                schedule=schedule,
                peak=parse_prices(item.get("peak"), f"{where}.peak"),
                off_peak=parse_prices(item.get("off_peak"), f"{where}.off_peak"),
            )
        )
    if any(a.starts >= b.starts for a, b in itertools.pairwise(periods)):
        raise ValueError(f"{where} must be in order of their `from`")
    return tuple(periods)


def _rule(value: Any, where: str, calendars: Mapping[str, HolidayCalendar]) -> PeakRule:
    value = _object(value, where)
    time_zone = value.get("time_zone")
    try:
        zoneinfo.ZoneInfo(time_zone)
    except (TypeError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValueError(f"{where}.time_zone must be an IANA time zone") from None
    weekdays = value.get("peak_weekdays")
    if not isinstance(weekdays, list) or not set(weekdays) <= _ISO_WEEKDAYS:
        raise ValueError(f"{where}.peak_weekdays must list ISO weekdays (1 = Monday)")
    windows = value.get("peak_hours")
    if not isinstance(windows, list):
        raise ValueError(f"{where}.peak_hours must be a list of [start, end] local times")
    holidays = value.get("holidays")
    if holidays is not None and holidays not in calendars:
        raise ValueError(f"{where}: unknown holiday calendar {holidays!r}")
    return PeakRule(
        starts=_instant(value.get("from"), f"{where}.from"),
        time_zone=time_zone,
        weekdays=frozenset(weekdays),
        windows=tuple(_window(window, f"{where}.peak_hours") for window in windows),
        holidays=holidays,
    )


def _window(value: Any, where: str) -> tuple[datetime.time, datetime.time]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{where}: each window is [start, end]")
    try:
        start, end = (datetime.time.fromisoformat(part) for part in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: times are HH:MM") from None
    if start >= end:
        raise ValueError(f"{where}: a window ends after it starts")
    return start, end


def _instant(value: Any, where: str) -> datetime.datetime:
    try:
        instant = datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be an ISO date-time with its UTC offset") from None
    if instant.tzinfo is None:
        raise ValueError(f"{where} must be an ISO date-time with its UTC offset")
    return instant


def _date(value: Any, where: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: dates are YYYY-MM-DD") from None


def _iso_date(fields: Mapping[str, Any], where: str) -> str:
    _date(fields.get("verified_on"), f"{where}.verified_on")
    return fields["verified_on"]


def _https(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.startswith("https://"):
        raise ValueError(f"{where}: source_url must be an https URL")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value
