"""Load the versioned manifest of exact model IDs whose windows were checked by hand.

`manifest.json` lists, per provider, models by their exact ID with `context_window`,
`max_output_cap`, `chat`, `source_url`, `verified_on`, for chat models the `tokenizer` family
(`o200k`, `cl100k`, `deepseek`), and `prices`: per million tokens, as decimal strings, `input`,
`cached_input` (null when the page lists none) and `output` in `currency`, with an optional
`max_prompt_tokens` above which the listed prices do not apply. Prices share the entry's source
and date; `prices: null` means they are unknown. Lookups are by exact ID only: a dated snapshot or
a fine-tune is another model and is listed separately or not at all.

Prices that depend on the time of day are `price_periods` instead: dated peak and off-peak
prices under a named schedule of `price_schedules`, whose holidays come from `calendars`
(`agentloom.providers._schedule` states the rules). A model the provider no longer serves has
`retired_on` (the last day it was served) and the `replacement` the provider names.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentloom.providers._schedule import (
    HolidayCalendar,
    PricePeriod,
    PriceSchedule,
    parse_calendars,
    parse_periods,
    parse_schedules,
)

__all__ = [
    "MANIFEST_MAX_AGE_DAYS",
    "MANIFEST_PATH",
    "TOKENIZERS",
    "Manifest",
    "ManifestEntry",
    "Prices",
    "Retirement",
    "ScheduledPrice",
    "load_manifest",
]

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
TOKENIZERS = ("o200k", "cl100k", "deepseek")
# Entries verified longer ago than this are reported as stale.
MANIFEST_MAX_AGE_DAYS = 180
_CURRENCY_LENGTH = 3
# Far above any real per-million price; anything above is a typo.
_MAX_PRICE = Decimal("100000")


@dataclass(frozen=True)
class Prices:
    """Prices per million tokens in `currency`; None where the source lists no price.

    `max_prompt_tokens`, when set, is the largest prompt the prices apply to.
    """

    currency: str
    input: Decimal
    cached_input: Decimal | None
    output: Decimal
    max_prompt_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "input": str(self.input),
            "cached_input": None if self.cached_input is None else str(self.cached_input),
            "output": str(self.output),
            "max_prompt_tokens": self.max_prompt_tokens,
        }


@dataclass(frozen=True)
class ManifestEntry:
    """What the manifest records about one exact model ID of one provider."""

    provider: str
    model_id: str
    chat: bool
    context_window: int | None
    max_output_cap: int | None
    source_url: str
    verified_on: str
    note: str | None = None
    tokenizer: str | None = None
    prices: Prices | None = None
    price_periods: tuple[PricePeriod, ...] = ()
    retired_on: str | None = None
    replacement: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["prices"] = self.prices.to_dict() if self.prices is not None else None
        data["price_periods"] = [
            {
                "from": period.starts.isoformat(),
                "schedule": period.schedule,
                "peak": period.peak.to_dict(),
                "off_peak": period.off_peak.to_dict(),
            }
            for period in self.price_periods
        ]
        return data

    def retirement(self) -> Retirement | None:
        """Return the provider's retirement of this ID, or None while it is served."""
        if self.retired_on is None:
            return None
        return Retirement(self.model_id, self.retired_on, self.replacement or "", self.source_url)

    def age_days(self, today: datetime.date) -> int:
        """Return how many days before `today` the entry was verified."""
        return (today - datetime.date.fromisoformat(self.verified_on)).days


@dataclass(frozen=True)
class Retirement:
    """A model ID its provider stopped serving after `retired_on`, and what it names instead."""

    model_id: str
    retired_on: str
    replacement: str
    source_url: str

    def to_dict(self) -> dict[str, str]:
        return {
            "retired_on": self.retired_on,
            "replacement": self.replacement,
            "source_url": self.source_url,
        }

    def message(self, provider_name: str) -> str:
        """Return fixed text saying what happened and what to choose instead."""
        return (
            f"{provider_name} retired the model ID {self.model_id} after {self.retired_on}; "
            f"choose {self.replacement} instead."
        )


@dataclass(frozen=True)
class ScheduledPrice:
    """The prices of one instant under a schedule, its band, and where the prices were read."""

    prices: Prices
    band: str
    source_url: str
    verified_on: str


@dataclass(frozen=True)
class Manifest:
    """The manifest's version and its entries keyed by `(provider, model_id)`."""

    version: str
    entries: Mapping[tuple[str, str], ManifestEntry]
    schedules: Mapping[str, PriceSchedule] = dataclasses.field(default_factory=dict)
    calendars: Mapping[str, HolidayCalendar] = dataclasses.field(default_factory=dict)

    def scheduled_price(self, entry: ManifestEntry, at: datetime.datetime) -> ScheduledPrice | None:
        """Return `entry`'s prices at the instant `at`, or None when they cannot be decided.

        The period and the schedule's rule are those in force at `at`; before the first of
        either, or on a day whose holiday year the calendar does not list, there is no price.
        """
        periods = [period for period in entry.price_periods if period.starts <= at]
        if not periods:
            return None
        period = periods[-1]
        schedule = self.schedules[period.schedule]
        rule = schedule.rule_at(at)
        band = rule.band(at, self.calendars.__getitem__) if rule is not None else None
        if band is None:
            return None
        prices = period.peak if band == "peak" else period.off_peak
        return ScheduledPrice(prices, band, entry.source_url, entry.verified_on)

    def lookup(self, provider: str, model_id: str) -> ManifestEntry | None:
        """Return the entry for exactly this provider and model ID, or None."""
        return self.entries.get((provider, model_id))

    def lookup_any(self, model_id: str) -> list[ManifestEntry]:
        """Return the entries of every provider that lists exactly this model ID."""
        return [entry for (_, listed), entry in self.entries.items() if listed == model_id]

    def stale(
        self, today: datetime.date, *, max_age_days: int = MANIFEST_MAX_AGE_DAYS
    ) -> list[ManifestEntry]:
        """Return the entries verified more than `max_age_days` before `today`, oldest first.

        A retired model's entry is history: its figures are not checked again.
        """
        old = [
            entry
            for entry in self.entries.values()
            if entry.age_days(today) > max_age_days and entry.retired_on is None
        ]
        return sorted(old, key=lambda entry: (entry.verified_on, entry.provider, entry.model_id))


def load_manifest(path: Path | str | None = None) -> Manifest:
    """Return the manifest at `path` (default: the bundled one); raise ValueError if malformed."""
    if path is None:
        return _bundled()
    return _parse(json.loads(Path(path).read_text(encoding="utf-8")))


@functools.cache
def _bundled() -> Manifest:
    return _parse(json.loads(MANIFEST_PATH.read_text(encoding="utf-8")))


def _parse(document: Any) -> Manifest:
    if not isinstance(document, dict):
        raise ValueError("manifest: the document must be an object")
    version = document.get("version")
    if not isinstance(version, str) or not version:
        raise ValueError("manifest: version must be a non-empty string")
    providers = document.get("models")
    if not isinstance(providers, dict):
        raise ValueError("manifest: models must be an object of providers")
    calendars = parse_calendars(document.get("calendars"))
    schedules = parse_schedules(document.get("price_schedules"), calendars)
    entries: dict[tuple[str, str], ManifestEntry] = {}
    for provider, models in providers.items():
        if not isinstance(models, dict):
            raise ValueError(f"manifest: models.{provider} must be an object of model IDs")
        for model_id, fields in models.items():
            entries[(provider, model_id)] = _entry(provider, model_id, fields, schedules)
    return Manifest(version=version, entries=entries, schedules=schedules, calendars=calendars)


def _entry(
    provider: str, model_id: str, fields: Any, schedules: Mapping[str, PriceSchedule]
) -> ManifestEntry:
    where = f"manifest: {provider}/{model_id}"
    if not isinstance(fields, dict):
        raise ValueError(f"{where}: must be an object")
    chat = fields.get("chat")
    if not isinstance(chat, bool):
        raise ValueError(f"{where}: chat must be true or false")
    window = _optional_positive(fields.get("context_window"), f"{where}: context_window")
    cap = _optional_positive(fields.get("max_output_cap"), f"{where}: max_output_cap")
    if chat and window is None:
        raise ValueError(f"{where}: a chat model needs a context_window")
    if window is not None and cap is not None and cap > window:
        raise ValueError(f"{where}: max_output_cap exceeds context_window")
    source_url = fields.get("source_url")
    if not isinstance(source_url, str) or not source_url.startswith("https://"):
        raise ValueError(f"{where}: source_url must be an https URL")
    verified_on = fields.get("verified_on")
    try:
        datetime.date.fromisoformat(verified_on)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: verified_on must be an ISO date") from None
    note = fields.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"{where}: note must be a string")
    tokenizer = fields.get("tokenizer")
    if tokenizer is not None and tokenizer not in TOKENIZERS:
        raise ValueError(f"{where}: tokenizer must be one of {TOKENIZERS}")
    return ManifestEntry(
        provider=provider,
        model_id=model_id,
        chat=chat,
        context_window=window,
        max_output_cap=cap,
        source_url=source_url,
        verified_on=verified_on,
        note=note,
        tokenizer=tokenizer,
        prices=_prices(fields.get("prices"), f"{where}: prices"),
        price_periods=parse_periods(
            fields.get("price_periods"), f"{where}: price_periods", schedules, _required_prices
        ),
        **_retirement(fields, where),
    )


def _retirement(fields: dict[str, Any], where: str) -> dict[str, str | None]:
    retired_on, replacement = fields.get("retired_on"), fields.get("replacement")
    if retired_on is None and replacement is None:
        return {}
    try:
        datetime.date.fromisoformat(retired_on)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: retired_on must be an ISO date") from None
    if not isinstance(replacement, str) or not replacement:
        raise ValueError(f"{where}: a retired model names its replacement")
    return {"retired_on": retired_on, "replacement": replacement}


def _required_prices(value: Any, where: str) -> Prices:
    prices = _prices(value, where)
    if prices is None:
        raise ValueError(f"{where} must be an object")
    return prices


def _prices(value: Any, where: str) -> Prices | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object or null")
    unknown = sorted(
        set(value) - {"currency", "input", "cached_input", "output", "max_prompt_tokens"}
    )
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]}")
    currency = value.get("currency")
    if not isinstance(currency, str) or len(currency) != _CURRENCY_LENGTH or not currency.isupper():
        raise ValueError(f"{where}.currency must be a three-letter currency code")
    cached = value.get("cached_input")
    return Prices(
        currency=currency,
        input=_price(value.get("input"), f"{where}.input"),
        cached_input=None if cached is None else _price(cached, f"{where}.cached_input"),
        output=_price(value.get("output"), f"{where}.output"),
        max_prompt_tokens=_optional_positive(
            value.get("max_prompt_tokens"), f"{where}.max_prompt_tokens"
        ),
    )


def _price(value: Any, where: str) -> Decimal:
    # Decimal strings only: a JSON number would pass through a float first.
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a decimal string")
    try:
        price = Decimal(value)
    except decimal.InvalidOperation:
        raise ValueError(f"{where} must be a decimal string") from None
    if not price.is_finite() or price < 0 or price > _MAX_PRICE:
        raise ValueError(f"{where} must be a price between 0 and {_MAX_PRICE}")
    return price


def _optional_positive(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where} must be a positive integer or null")
    return value
