"""Limits of the actions that cost the most: rates, and how many a user holds open at once.

Each rate counts one action per user or per session in a fixed window (`RATE_LIMIT_*`
settings, "N/minute"); past it the service raises `RateLimited` with the seconds until the
window ends (the API answers 429 with `Retry-After`, the console shows the message). A service
counts an action only once its caller may take it (signed in, and past the access and permission
checks): a refused request (401, 403, 404) never uses up anyone's budget.

A bound on what stays open (`lease`: the events streams of `EVENT_STREAMS_PER_USER`) gives each
open one a lease, one of `bound` places of its owner, kept for `LEASE_SECONDS` and refreshed
while it lives; past the bound `RateLimited` again. A lease that stops being refreshed (its
process was killed) frees its place when it expires, so nobody is locked out for longer than
that. A client that reconnects names the lease it had (`resume`) and takes its place over
instead of adding one; the connection it replaced ends at its next refresh.

Counters and leases live in Django's cache: shared by every process when `CACHE_URL` points at
Redis, per process otherwise. A cache that does not answer lets the action through (logged): a
limit must never take the application down with it.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache

from agentloom import metrics
from agentloom.errors import RateLimited

log = logging.getLogger(__name__)

PERIODS = {"second": 1, "minute": 60, "hour": 3600}
# How long a lease outlives its last refresh, and how often a live one is refreshed.
LEASE_SECONDS = 60
LEASE_REFRESH_SECONDS = 20


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
        metrics.rate_limit_refusals.labels(scope).inc()
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


@dataclass
class Lease:
    """One of its owner's places, held in the cache under `key` by a value naming it (`token`)."""

    key: str | None  # None: the cache did not answer, nothing is held
    token: str
    refreshed_at: float = field(default_factory=time.monotonic)

    def refresh(self) -> bool:
        """Keep the place for another `LEASE_SECONDS` (at most every `LEASE_REFRESH_SECONDS`);
        return False once a reconnected client took it over."""
        if self.key is None or time.monotonic() - self.refreshed_at < LEASE_REFRESH_SECONDS:
            return True
        self.refreshed_at = time.monotonic()
        try:
            holder = cache.get(self.key)
            if holder == self.token and cache.touch(self.key, LEASE_SECONDS):
                return True
            # Expired while this process stalled: take it again if it is still free.
            return holder in (None, self.token) and cache.add(
                self.key, self.token, timeout=LEASE_SECONDS
            )
        except Exception:
            log.warning("lease %s not refreshed: the cache did not answer", self.key, exc_info=True)
            return True

    def release(self) -> None:
        """Give the place back, unless another connection has taken it over."""
        if self.key is None:
            return
        try:
            if cache.get(self.key) == self.token:
                cache.delete(self.key)
        except Exception:
            log.warning("lease %s not released: it expires", self.key, exc_info=True)
        self.key = None


def lease(scope: str, user_id: int, *, bound: int, what: str, resume: str = "") -> Lease:
    """Take one of the user's `bound` places of `scope` (the one the lease `resume` held, when a
    reconnecting client names it); raise `RateLimited` when all are taken."""
    places = [f"lease:{scope}:{user_id}:{number}" for number in range(bound)]
    token = secrets.token_urlsafe(9)
    try:
        holders = cache.get_many(places)
        taken = _take_over(holders, resume, token) or _take_free(places, holders, token)
    except Exception:
        log.warning("lease %s not counted: the cache did not answer", scope, exc_info=True)
        return Lease(None, token)
    if taken is None:
        metrics.rate_limit_refusals.labels(scope).inc()
        raise RateLimited(
            f"Too many open {what}: at most {bound} per user. Close one, or try again in "
            f"{LEASE_SECONDS} s.",
            retry_after=LEASE_SECONDS,
        )
    return Lease(taken, token)


def _take_over(holders: dict[str, str], resume: str, token: str) -> str | None:
    for place, holder in holders.items():
        if resume and holder == resume:
            cache.set(place, token, timeout=LEASE_SECONDS)
            return place
    return None


def _take_free(places: list[str], holders: dict[str, str], token: str) -> str | None:
    for place in places:
        if place not in holders and cache.add(place, token, timeout=LEASE_SECONDS):
            return place
    return None
