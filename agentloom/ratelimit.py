"""Rate limits of the actions that cost the most, applied by the services (API and console alike).

Each limit counts one action per user or per session in a fixed window (`RATE_LIMIT_*`
settings, "N/minute"); past it the service raises `RateLimited` with the seconds until the
window ends (the API answers 429 with `Retry-After`, the console shows the message). Counters
live in Django's cache: shared by every process when `CACHE_URL` points at Redis, per process
otherwise. A cache that does not answer lets the action through (logged): a limit must never
take the application down with it. A service counts an action only once its caller may take it
(signed in, and past the access and permission checks): a refused request (401, 403, 404) never
uses up anyone's budget.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from agentloom.errors import RateLimited

log = logging.getLogger(__name__)

PERIODS = {"second": 1, "minute": 60, "hour": 3600}


@dataclass(frozen=True)
class Rate:
    """At most `count` actions per `period` ("second", "minute" or "hour")."""

    count: int
    period: str

    @property
    def seconds(self) -> int:
        return PERIODS[self.period]


def parse_rate(value: str) -> Rate | None:
    """Return the rate "N/period" names, None for "off"; ValueError for anything else."""
    value = value.strip().lower()
    if value in ("off", "0"):
        return None
    count, _, period = value.partition("/")
    period = {"s": "second", "m": "minute", "h": "hour"}.get(period, period)
    if not count.isdigit() or int(count) < 1 or period not in PERIODS:
        raise ValueError("expected N/second, N/minute, N/hour or off")
    return Rate(int(count), period)


def limit(scope: str, key: object, *, what: str) -> None:
    """Count one `scope` action of `key` (a user's or a session's id); raise past its rate."""
    rate = settings.RATE_LIMITS.get(scope)
    if rate is None:
        return
    now = time.time()
    window = int(now // rate.seconds)
    counter = f"ratelimit:{scope}:{key}:{window}"
    try:
        count = _count(counter, rate.seconds)
    except Exception:
        log.warning("rate limit %s not checked: the cache did not answer", scope, exc_info=True)
        return
    if count > rate.count:
        retry_after = max(1, math.ceil((window + 1) * rate.seconds - now))
        raise RateLimited(
            f"Too many {what}: at most {rate.count} per {rate.period}. "
            f"Try again in {retry_after} s.",
            retry_after=retry_after,
        )


def _count(counter: str, seconds: int) -> int:
    if cache.add(counter, 1, timeout=seconds + 1):
        return 1
    try:
        return cache.incr(counter)
    except ValueError:  # expired between the two calls: this is the window's first
        cache.add(counter, 1, timeout=seconds + 1)
        return 1
