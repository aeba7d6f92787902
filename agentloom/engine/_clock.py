"""Time as the engine sees it: an injectable clock and ISO-8601 UTC timestamps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "iso_utc", "system_clock"]

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(UTC)


def iso_utc(moment: datetime) -> str:
    """Return `moment` as an ISO-8601 timestamp in UTC (naive values are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()
