"""`GET /api/v1/runs/{id}/events`: deltas, records and status; resumable, creator-only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.test import AsyncClient, Client

from sessions_app.models import SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.live import DeltaPublisher, channel, read_deltas
from tests.api.factories import client_for

pytestmark = pytest.mark.django_db


def url(run, **query):
    tail = "".join(f"?{k}={v}" for k, v in query.items())
    return f"/api/v1/runs/{run.pk}/events{tail}"


def events(response) -> list[tuple[str, str, dict]]:
    """Return the (id, event, data) of every event of a streamed answer."""
    body = b"".join(response.streaming_content).decode()
    found = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return found


# A delta of the main instance's answer, as the events stream sends it.
DELTA = {"instance": "main", "content": "", "reasoning": "", "tool_calls": [], "purpose": "action"}


def publish(run, *pieces, end=False):
    publisher = DeltaPublisher(run.pk)
    for piece in pieces:
        publisher.publish("main", {"content": piece, "reasoning": "", "tool_calls": []})
        publisher.flush()  # one delta each
    if end:
        publisher.end_call("main", "action", failed=False)


@pytest.fixture
def done(run):
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded"
    return run


def test_records_and_the_status_are_streamed_then_the_stream_ends(api, done):
    response = api.get(url(done, after=0))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert "no-cache" in response["Cache-Control"]
    found = events(response)
    records = [data for _, event, data in found if event == "record"]
    journal = SessionMessage.objects.filter(run=done).order_by("seq")
    assert [(r["seq"], r["kind"]) for r in records] == [(m.seq, m.kind) for m in journal]
    assert found[-1][1:] == ("status", {"status": "succeeded", "error": None})


def test_deltas_are_streamed_with_instance_content_and_reasoning(api, done):
    publish(done, "NONCE-A", "NONCE-B")
    found = events(api.get(url(done)))
    deltas = [data for _, event, data in found if event == "delta"]
    assert deltas == [
        {**DELTA, "content": "NONCE-A"},
        {**DELTA, "content": "NONCE-B"},
    ]


def test_a_summary_calls_deltas_are_never_merged_with_an_answers(monkeypatch):
    # A summary's text is not the answer: the reader tells them apart by each delta's purpose.
    sent = []

    class Channel:
        def append(self, run_id, items):
            sent.extend(items)

    monkeypatch.setattr("sessions_app.services.live.channel", Channel)
    publisher = DeltaPublisher(1, clock=lambda: 0.0)  # nothing is due before the flush
    publisher.publish("main", {"content": "sum", "purpose": "compaction"})
    publisher.publish("main", {"content": "mary", "purpose": "compaction"})
    publisher.publish("main", {"content": "answer"})
    publisher.flush()
    assert [(item["purpose"], item["content"]) for item in sent] == [
        ("compaction", "summary"),
        ("action", "answer"),
    ]


def test_a_call_end_follows_its_deltas_with_its_instance_purpose_and_outcome(api, done):
    publish(done, "NONCE-A", end=True)
    publisher = DeltaPublisher(done.pk)
    publisher.end_call("1.1", "compaction", failed=True)
    found = events(api.get(url(done), HTTP_LAST_EVENT_ID="0:0"))  # from the run's start
    live = [(event, data) for _, event, data in found if event in ("delta", "call_end")]
    assert live[-3:] == [
        ("delta", {**DELTA, "content": "NONCE-A"}),
        ("call_end", {"instance": "main", "purpose": "action", "failed": False}),
        ("call_end", {"instance": "1.1", "purpose": "compaction", "failed": True}),
    ]


def test_a_real_run_ends_each_of_its_calls_on_the_stream(api, deltas_kept, done):
    found = events(api.get(url(done), HTTP_LAST_EVENT_ID="0:0"))
    ends = [data for _, event, data in found if event == "call_end"]
    answers = [
        data for _, event, data in found if event == "record" and data["kind"] == "assistant"
    ]
    assert ends and len(ends) == len(answers)
    assert all(end == {"instance": "main", "purpose": "action", "failed": False} for end in ends)


def test_a_reader_joining_mid_run_starts_at_the_call_in_flight(api, done):
    publish(done, "NONCE-OLD", end=True)
    publish(done, "NONCE-NOW")
    found = events(api.get(url(done)))
    assert [data["content"] for _, event, data in found if event == "delta"] == ["NONCE-NOW"]


def test_last_event_id_resumes_after_the_last_event_seen(api, done):
    publish(done, "NONCE-1", "NONCE-2", "NONCE-3")
    first = events(api.get(url(done, after=0)))
    seen = next(ident for ident, event, data in first if data.get("content") == "NONCE-1")
    again = events(api.get(url(done), HTTP_LAST_EVENT_ID=seen))
    assert [d["content"] for _, event, d in again if event == "delta"] == ["NONCE-2", "NONCE-3"]
    # Every record up to the one the id names had been seen: none is sent again.
    seq = int(seen.split(":")[0])
    assert all(d["seq"] > seq for _, event, d in again if event == "record")
    assert again[-1][1] == "status"


def test_a_stream_resumed_after_its_runs_deltas_were_deleted_gets_the_records(api, run):
    publish(run, "NONCE-1", "NONCE-2")
    seen, _ = read_deltas(run.pk, None)
    assert [data["content"] for _, data in seen] == ["NONCE-1", "NONCE-2"]
    first = seen[0][0]
    run_execute(run_id=run.pk)  # the run ends: its deltas go
    found = events(api.get(url(run), HTTP_LAST_EVENT_ID=f"0:{first}"))
    assert [event for _, event, _ in found if event in ("delta", "call_end")] == []
    records = [(data["seq"], data["kind"]) for _, event, data in found if event == "record"]
    journal = SessionMessage.objects.filter(run=run).order_by("seq")
    assert records == [(m.seq, m.kind) for m in journal]
    assert "assistant" in {kind for _, kind in records}
    assert found[-1][1:] == ("status", {"status": "succeeded", "error": None})


def test_a_session_signed_in_user_may_read_it_too(alice, done):
    client = Client()
    client.force_login(alice)
    assert client.get(url(done)).status_code == 200


def test_another_user_gets_404_and_nobody_signed_in_401(bob, carol, done):
    for user in (bob, carol):
        response = client_for(user).get(url(done))
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found."}
    assert client_for(None).get(url(done)).status_code == 401
    assert Client().get(url(done)).status_code == 401
    bad = Client(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get(url(done)).status_code == 401
    assert client_for(bob).get("/api/v1/runs/abc/events").status_code == 404


def test_a_deleted_session_hides_its_events(api, done):
    from django.utils import timezone

    done.session.__class__.objects.filter(pk=done.session_id).update(deleted_at=timezone.now())
    assert api.get(url(done)).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_stream_is_served_asynchronously(alice, run):
    from asgiref.sync import async_to_sync

    run_execute(run_id=run.pk)
    publish(run, "NONCE-ASGI")
    client = AsyncClient()
    client.force_login(alice)

    async def read():
        response = await client.get(url(run, after=0))
        chunks = [chunk async for chunk in response.streaming_content]
        return response, b"".join(chunks).decode()

    response, body = async_to_sync(read)()
    assert response.status_code == 200
    assert response.is_async
    assert "NONCE-ASGI" in body and '"status":"succeeded"' in body


def test_the_redis_channel_keeps_deltas_encrypted_and_expiring(done, settings, redis_url):
    import redis

    settings.LIVE_CHANNEL_URL = redis_url
    live = channel()
    live.redis.delete(live.key(done.pk))
    publish(done, "NONCE-REDIS-1", "NONCE-REDIS-2")
    raw = redis.Redis.from_url(settings.LIVE_CHANNEL_URL).xrange(live.key(done.pk))
    assert raw and all(b"NONCE-REDIS" not in fields[b"d"] for _, fields in raw)
    assert 0 < live.redis.ttl(live.key(done.pk)) <= settings.LIVE_DELTA_SECONDS
    first = live.after(done.pk, None)
    assert [data["content"] for _, data in first] == ["NONCE-REDIS-1", "NONCE-REDIS-2"]
    assert [data["content"] for _, data in live.after(done.pk, first[0][0])] == ["NONCE-REDIS-2"]
    live.redis.delete(live.key(done.pk))


def test_the_redis_channel_deletes_a_runs_stream_when_its_ending_commits(
    run, settings, redis_url, django_capture_on_commit_callbacks
):
    settings.LIVE_CHANNEL_URL = redis_url
    live = channel()
    publish(run, "NONCE-REDIS")
    with django_capture_on_commit_callbacks(execute=True):
        run_execute(run_id=run.pk)
        assert live.redis.exists(live.key(run.pk))  # not before the ending commits
    assert not live.redis.exists(live.key(run.pk))


def test_a_call_stopped_by_a_cancel_is_listed_discarded_with_its_cost_incomplete(api, run):
    from sessions_app.models import ModelCall

    ModelCall.objects.create(
        run=run, purpose="action", error="cancelled: stopped", discarded=True, cost_incomplete=True
    )
    listed = api.get(f"/api/v1/runs/{run.pk}/model-calls").json()["results"]
    assert (listed[0]["discarded"], listed[0]["cost_incomplete"]) == (True, True)


# --- open streams: no database connection between polls, a bound per user -------------------


@pytest.fixture(params=["memory", "redis"])
def stream_bound(request, settings):
    """At most 2 open streams per user, counted in the process's memory or in Redis.

    Tests that use it commit their rows: closing a stream's answer closes the database
    connection, as the end of any request does (a test's transaction would not survive it).
    """
    from django.core.cache import cache

    from agentloom.config import cache_from_url

    if request.param == "redis":
        settings.CACHES = cache_from_url(request.getfixturevalue("redis_url"))
    settings.EVENT_STREAMS_PER_USER = 2
    cache.clear()
    yield 2
    # Every stream is closed here, in the test's thread. One left to the garbage collector would
    # give its place back from a finalizer, at whatever allocation of whichever thread the
    # collector runs in: inside asgiref's restoring of a context, that crashed the interpreter.
    while _OPENED:
        _OPENED.pop().close()
    cache.clear()


# Every stream `opened` returned, until the test's end (`stream_bound`) closes it.
_OPENED: list = []


def opened(client, run, last_event_id: str | None = None):
    """Open the stream of `run` (not finished); return its answer, its frames and its first id."""
    extra = {"HTTP_LAST_EVENT_ID": last_event_id} if last_event_id else {}
    response = client.get(url(run), **extra)
    if response.status_code != 200:
        return response, None, None
    _OPENED.append(response)
    frames = iter(response.streaming_content)
    for chunk in frames:
        if chunk.startswith(b"id: "):
            return response, frames, chunk.decode().split("\n", 1)[0][len("id: ") :]
    raise AssertionError("the stream ended before its first event")


@pytest.fixture
def bobs_run(bob, other_space):
    from tests.api.factories import ask, make_agent, open_session
    from tests.api.factories import publish as publish_agent

    return ask(open_session(publish_agent(make_agent(other_space, bob), bob), bob), bob)


@pytest.mark.django_db(transaction=True)
def test_past_the_bound_a_users_next_stream_is_refused_with_429(
    stream_bound, alice, run, bob, bobs_run
):
    api = client_for(alice)
    held = [opened(api, run) for _ in range(stream_bound)]
    assert [response.status_code for response, _, _ in held] == [200, 200]
    refused = api.get(url(run))
    assert refused.status_code == 429
    assert refused.json() == {
        "detail": "Too many open event streams: at most 2 per user. Close one, or try again "
        "in 60 s."
    }
    assert refused["Retry-After"] == "60"
    assert opened(client_for(bob), bobs_run)[0].status_code == 200, "bob counts apart"
    held[0][0].close()  # the client goes away: its place is free at once
    assert opened(api, run)[0].status_code == 200
    assert api.get(url(run)).status_code == 429


@pytest.mark.django_db(transaction=True)
def test_a_stream_whose_process_died_frees_its_place_when_its_lease_expires(
    stream_bound, api, run, monkeypatch
):
    from agentloom import ratelimit

    monkeypatch.setattr(ratelimit, "LEASE_SECONDS", 1)
    # Opened and never closed nor refreshed: as a web process killed mid-stream leaves them.
    crashed = [opened(api, run) for _ in range(stream_bound)]
    assert api.get(url(run)).status_code == 429
    time.sleep(1.2)
    assert opened(api, run)[0].status_code == 200, "an expired lease locks nobody out"
    assert len(crashed) == stream_bound


@pytest.mark.django_db(transaction=True)
def test_a_stream_resumed_with_last_event_id_takes_its_own_place(
    stream_bound, api, run, monkeypatch
):
    from agentloom import ratelimit

    _, first_frames, first_id = opened(api, run)
    opened(api, run)
    # The client reconnects (the old connection not yet noticed as gone): it counts once.
    resumed, _, _ = opened(api, run, last_event_id=first_id)
    assert resumed.status_code == 200
    assert api.get(url(run)).status_code == 429, "two streams, not three"
    # The replaced stream ends at its next refresh, without giving back its successor's place.
    monkeypatch.setattr(ratelimit, "LEASE_REFRESH_SECONDS", 0)
    assert list(first_frames) == []
    assert api.get(url(run)).status_code == 429
    resumed.close()
    assert opened(api, run)[0].status_code == 200


def _served(tmp_path, **environment):
    """Start the production web server on the test database; return its process and base URL."""
    from django.db import connection

    from tests.support.mcp_servers import free_port

    conf = connection.settings_dict
    database = (
        f"postgres://{conf.get('USER') or 'postgres'}@{conf['HOST']}:{conf['PORT'] or 5432}/"
        f"{conf['NAME']}"
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "DATABASE_URL": database,
        "STATIC_ROOT": str(tmp_path / "static"),
        "AGENTLOOM_VAR_DIR": str(tmp_path),
        "PYTHONPATH": str(root),
        **environment,
    }
    port = free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "agentloom.serve", "--port", str(port)],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/accounts/login/", timeout=5)
            return server, base
        except httpx.TransportError:
            if time.monotonic() > deadline:
                _stop(server)
                raise AssertionError((tmp_path / "server.log").read_text()) from None
            time.sleep(0.3)


def _stop(server: subprocess.Popen) -> None:
    """Stop the server; kill it when a request it serves does not end (a starved pool's)."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=15)


class HeldStream:
    """An events stream held open by a thread; `opened` is set once its first event arrived."""

    def __init__(self, base: str, key: str, run_id: int):
        host, port = base.removeprefix("http://").split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=60)
        self.socket.sendall(
            f"GET /api/v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Token {key}\r\n\r\n".encode()
        )
        self.opened = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()

    def _hold(self) -> None:
        received = b""
        with contextlib.suppress(OSError):  # closed by the test
            while chunk := self.socket.recv(65536):
                received += chunk
                if received.startswith(b"HTTP/1.1 200") and b"\nevent: " in received:
                    self.opened.set()

    def close(self) -> None:
        """Hang up, as a page that goes away does."""
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        self.thread.join(5)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_open_streams_beyond_the_pool_leave_other_users_requests_answered(
    tmp_path, redis_url, alice, bob, run
):
    """Two web processes with a pool of 3 each: alice holds 8 streams, bob's requests answer, and
    her ninth stream is refused whichever process takes it (the count is shared in Redis)."""
    import redis

    from agentloom.spaces.services.tokens import token_create

    redis.Redis.from_url(redis_url).flushdb()  # this leg's own database: no leases left over
    _, alice_key = token_create(user=alice, name="streams")
    _, bob_key = token_create(user=bob, name="pages")
    server, base = _served(
        tmp_path,
        WEB_WORKERS="2",
        DATABASE_POOL_SIZE="3",
        CACHE_URL=redis_url,
        EVENT_STREAMS_PER_USER="8",
    )
    streams: list[HeldStream] = []
    try:
        streams = [HeldStream(base, alice_key, run.pk) for _ in range(8)]
        deadline = time.monotonic() + 10
        while sum(s.opened.is_set() for s in streams) < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(6):  # each process takes some of them
            answer = httpx.get(
                f"{base}/api/v1/spaces/", headers={"Authorization": f"Token {bob_key}"}, timeout=10
            )
            assert answer.status_code == 200, answer.text
        assert sum(s.opened.is_set() for s in streams) == 8, "every stream opened"
        ninth = httpx.get(
            f"{base}/api/v1/runs/{run.pk}/events",
            headers={"Authorization": f"Token {alice_key}"},
            timeout=10,
        )
        assert ninth.status_code == 429 and "at most 8" in ninth.json()["detail"]
        # A stream whose client hangs up gives its place back at once.
        for stream in streams:
            stream.close()
        time.sleep(1)
        again = HeldStream(base, alice_key, run.pk)
        streams.append(again)
        assert again.opened.wait(10), "a place was free again"
    finally:
        for stream in streams:
            stream.close()
        _stop(server)
