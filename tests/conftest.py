"""Shared fixtures: service gates, a loopback-only network guard, named users and their spaces."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket

import pytest

from tests.support.provider_double import ProviderDouble

IN_CI = os.environ.get("CI") == "true"
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CHROMIUM = "/usr/bin/chromium"


def _unavailable(reason: str):
    """Skip outside CI; fail in CI, where every service must really be exercised."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing service fails the run)", pytrace=False)
    pytest.skip(reason)


# --- loopback-only network -------------------------------------------------------------------

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(sock: socket.socket, address) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0]
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        raise AssertionError(f"test tried to connect to a host name {host!r}") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if not ip.is_loopback:
        raise AssertionError(f"test tried a non-loopback connection to {host}")


def _guarded_connect(self, address):
    _check_address(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    _check_address(self, address)
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Fail any test that opens a connection to anything but 127.0.0.0/8 or ::1."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)


# --- doubles --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_token_counts():
    """Start every test without the process's server-token counts: a double's port may be one
    an earlier test's double had, with other answers."""
    from agentloom.providers.server_tokens import clear_count_cache

    clear_count_cache()


@pytest.fixture
def provider_double():
    """Yield a running `ProviderDouble` on 127.0.0.1, closed after the test."""
    with ProviderDouble() as double:
        yield double


# --- service gates ---------------------------------------------------------------------------


def pytest_runtest_setup(item):
    if item.get_closest_marker("postgres"):
        from django.db import connection

        if connection.vendor != "postgresql":
            pytest.skip("PostgreSQL test: runs in the PostgreSQL leg (DATABASE_URL=postgres://…)")
    if item.get_closest_marker("browser") and not shutil.which(CHROMIUM):
        _unavailable(f"browser test: {CHROMIUM} is not installed (apt-get install -y chromium)")


# --- the PostgreSQL leg -----------------------------------------------------------------------

# pytest-django's fixtures that open the test database; `item.fixturenames` holds every fixture a
# test uses, directly or through other fixtures (`alice` → `db`).
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    }
)


def runs_in_the_postgresql_leg(item: pytest.Item) -> bool:
    """Return whether `item` can behave differently on PostgreSQL than on SQLite.

    A test that opens no database (the engine, the providers, parsers, its own SQLite file) runs
    the same Python in both legs, so the SQLite leg alone runs it.
    """
    if DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    return any(item.get_closest_marker(name) for name in ("django_db", "postgres", "postgres_leg"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AGENTLOOM_TEST_LEG") != "postgres":
        return
    kept, dropped = [], []
    for item in items:
        (kept if runs_in_the_postgresql_leg(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def redis_url() -> str:
    """Return the URL of a Redis server that answers, or skip (fail in CI)."""
    import redis

    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.close()
    except redis.RedisError as error:
        _unavailable(f"Redis does not answer at {REDIS_URL}: {error.__class__.__name__}")
    return REDIS_URL


@pytest.fixture
def deltas_kept(monkeypatch):
    """Keep a run's live deltas after it ends, for a test that reads what a run streamed once
    it has finished (they are deleted as it ends otherwise)."""
    from sessions_app.services import live

    monkeypatch.setattr(live.DatabaseChannel, "forget", lambda self, run_ids: None)


# --- people ----------------------------------------------------------------------------------


@pytest.fixture
def alice(db):
    """A space admin."""
    from tests.factories import make_user

    return make_user("alice")


@pytest.fixture
def bob(db):
    """Another user."""
    from tests.factories import make_user

    return make_user("bob")


@pytest.fixture
def carol(db):
    """A member (not an admin) of alice's space."""
    from tests.factories import make_user

    return make_user("carol")


# --- spaces ----------------------------------------------------------------------------------


@pytest.fixture
def space(alice, carol):
    """alice's space "Research", where carol is a member."""
    from tests.factories import make_space

    return make_space(name="Research", admin=alice, members=[carol])


@pytest.fixture
def other_space(bob):
    """bob's space "Elsewhere", outside alice's reach."""
    from tests.factories import make_space

    return make_space(name="Elsewhere", admin=bob)


# --- run dispatch ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def queued_runs(request, monkeypatch):
    """Record run ids queued for a worker instead of sending them to the broker.

    Tests that execute runs call `sessions_app.services.execution.run_execute` themselves (or
    `drain_queued_runs`); tests marked `real_worker` keep the real Celery dispatch.
    """
    queued: list[int] = []
    if request.node.get_closest_marker("real_worker"):
        return queued
    from types import SimpleNamespace

    from sessions_app import tasks

    def delay(run_id: int, **_task_options) -> None:
        queued.append(run_id)

    monkeypatch.setattr(tasks, "execute_run", SimpleNamespace(delay=delay))
    return queued
