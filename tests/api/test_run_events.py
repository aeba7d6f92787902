"""`GET /api/v1/runs/{id}/events`: deltas, records and status; resumable, creator-only."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient, Client

from sessions_app.models import SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.live import DeltaPublisher, channel
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
        {"instance": "main", "content": "NONCE-A", "reasoning": "", "tool_calls": []},
        {"instance": "main", "content": "NONCE-B", "reasoning": "", "tool_calls": []},
    ]


def test_a_call_end_follows_its_deltas_with_its_instance_purpose_and_outcome(api, done):
    publish(done, "NONCE-A", end=True)
    publisher = DeltaPublisher(done.pk)
    publisher.end_call("1.1", "compaction", failed=True)
    found = events(api.get(url(done), HTTP_LAST_EVENT_ID="0:0"))  # from the run's start
    live = [(event, data) for _, event, data in found if event in ("delta", "call_end")]
    assert live[-3:] == [
        ("delta", {"instance": "main", "content": "NONCE-A", "reasoning": "", "tool_calls": []}),
        ("call_end", {"instance": "main", "purpose": "action", "failed": False}),
        ("call_end", {"instance": "1.1", "purpose": "compaction", "failed": True}),
    ]


def test_a_real_run_ends_each_of_its_calls_on_the_stream(api, done):
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


def test_a_call_stopped_by_a_cancel_is_listed_discarded_with_its_cost_incomplete(api, run):
    from sessions_app.models import ModelCall

    ModelCall.objects.create(
        run=run, purpose="action", error="cancelled: stopped", discarded=True, cost_incomplete=True
    )
    listed = api.get(f"/api/v1/runs/{run.pk}/model-calls").json()["results"]
    assert (listed[0]["discarded"], listed[0]["cost_incomplete"]) == (True, True)
