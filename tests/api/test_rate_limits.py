"""Rate limits in the services: 429 with Retry-After on the API, a message in the console."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.cache import cache
from django.urls import reverse

from agentloom.errors import RateLimited
from agentloom.ratelimit import Rate, limit, parse_rate
from sessions_app.models import Run, RunSupplement
from tests.api.factories import client_for, finish, open_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def limits(settings):
    """Turn limits on (the suite runs with them off) with an empty cache; set them per test.

    Windows are fixed: a test whose requests straddled the end of a minute would see its count
    start again (a loaded machine once took 3 requests across one), so it starts in a new minute
    when less than 10 seconds of this one are left."""
    left = 60 - time.time() % 60
    if left < 10:
        time.sleep(left)
    cache.clear()
    settings.RATE_LIMITS = {}
    yield settings.RATE_LIMITS
    cache.clear()


def _retry_after(response) -> int:
    return int(response.headers["Retry-After"])


def test_rates_are_read_from_their_settings():
    assert parse_rate("20/minute") == Rate(20, "minute")
    assert parse_rate("5/s") == Rate(5, "second")
    assert parse_rate("off") is None
    for bad in ("", "ten/minute", "5/day", "-1/minute", "0/minute"):
        with pytest.raises(ValueError):
            parse_rate(bad)


@pytest.mark.django_db
def test_discovery_is_limited_per_user(limits, alice, bob, space, other_space):
    limits["discovery"] = Rate(2, "minute")
    api, other = client_for(alice), client_for(bob)
    body = {"provider": "local"}
    answers = [api.post("/api/models/discover", body, format="json") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    refused = answers[-1]
    assert 1 <= _retry_after(refused) <= 60
    assert "Too many model listings" in refused.json()["detail"]
    assert other.post("/api/models/discover", body, format="json").status_code == 200


@pytest.mark.django_db
def test_questions_are_limited_per_session_and_per_user(limits, api, alice, version, session):
    # Hour-long windows: a fixed window that ends between two posts would start the count anew
    # (a minute's did, on a loaded machine, and the third question met the active run: 409).
    limits["runs_per_session"] = Rate(2, "hour")
    limits["runs_per_user"] = Rate(3, "hour")
    url = f"/api/v1/sessions/{session.pk}/runs"
    first = api.post(url, {"question": "one"}, format="json")
    assert first.status_code == 202
    finish(Run.objects.get(pk=first.json()["id"]), "succeeded")
    assert api.post(url, {"question": "two"}, format="json").status_code == 202
    refused = api.post(url, {"question": "three"}, format="json")
    assert refused.status_code == 429 and _retry_after(refused) >= 1
    assert Run.objects.filter(session=session).count() == 2, "a refused question writes nothing"
    # Another session of the same user has its own count, until the user's limit.
    fresh = open_session(version, alice)
    fresh_url = f"/api/v1/sessions/{fresh.pk}/runs"
    assert api.post(fresh_url, {"question": "four"}, format="json").status_code == 202
    finish(Run.objects.filter(session=fresh).get(), "succeeded")
    assert api.post(fresh_url, {"question": "five"}, format="json").status_code == 429


@pytest.mark.django_db
def test_supplements_are_limited_per_session_and_per_user(limits, api, run):
    limits["supplements_per_session"] = Rate(2, "minute")
    url = f"/api/v1/runs/{run.pk}/supplements"
    answers = [api.post(url, {"text": f"more {i}"}, format="json") for i in range(3)]
    assert [answer.status_code for answer in answers] == [202, 202, 429]
    assert "Too many supplements in this session" in answers[-1].json()["detail"]
    assert RunSupplement.objects.filter(run=run).count() == 2
    limits["supplements_per_session"] = None
    limits["supplements_per_user"] = Rate(3, "minute")
    answers = [api.post(url, {"text": text}, format="json") for text in "xyzw"]
    assert [answer.status_code for answer in answers] == [202, 202, 202, 429]
    assert "Too many supplements: at most 3 per minute" in answers[-1].json()["detail"]


@pytest.mark.django_db
def test_the_console_shows_the_limit_as_a_message(limits, client, alice, session):
    limits["runs_per_session"] = Rate(1, "hour")
    client.force_login(alice)
    url = reverse("console-ask", args=[session.pk])
    Run.objects.filter(session=session).delete()
    client.post(url, {"question": "first"})
    finish(Run.objects.get(session=session), "succeeded")
    page = client.post(url, {"question": "second"}, follow=True)
    assert page.status_code == 200
    assert "Too many questions in this session: at most 1 per hour." in page.content.decode()
    assert Run.objects.filter(session=session).count() == 1


@pytest.mark.django_db
def test_a_cache_that_does_not_answer_lets_the_action_through(settings):
    settings.RATE_LIMITS = {"discovery": Rate(1, "minute")}
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        }
    }
    # (Changing CACHES in a test makes Django build its caches anew.)
    for _ in range(3):
        limit("discovery", 1, what="model listings")


@pytest.mark.redis
def test_with_cache_url_on_redis_every_process_shares_the_count(redis_url, settings, limits):
    url = redis_url
    code = (
        "import django; django.setup();"
        "from agentloom.ratelimit import limit;"
        "[limit('discovery', 4242, what='x') for _ in range(2)]"
    )
    env = {
        **os.environ,
        "CACHE_URL": url,
        "RATE_LIMIT_DISCOVERY": "2/hour",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    import redis

    client = redis.Redis.from_url(url)

    def forget() -> None:
        for key in client.scan_iter("*ratelimit:discovery:4242:*"):
            client.delete(key)

    forget()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    limits["discovery"] = Rate(2, "hour")
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    }
    try:
        with pytest.raises(RateLimited) as refused:
            limit("discovery", 4242, what="model listings")
        assert refused.value.retry_after >= 1
    finally:
        forget()


@pytest.mark.django_db
def test_refused_requests_do_not_use_the_budget(limits, carol, space):
    limits["discovery"] = Rate(2, "hour")
    api = client_for(carol)  # a member of alice's space, an admin of none
    body = {"provider": "local"}
    refused = [api.post("/api/models/discover", body, format="json") for _ in range(3)]
    assert [answer.status_code for answer in refused] == [403, 403, 403]
    from tests.factories import make_space

    make_space(name="Carol's own", admin=carol)
    answers = [api.post("/api/models/discover", body, format="json") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
