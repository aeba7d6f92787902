"""Streamed runs: deltas reach the live channel redacted and encrypted, a cancel stops the call."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from models_app.models import ModelConnection
from sessions_app.models import ModelCall, Run, RunDelta, SessionMessage
from sessions_app.services.deletion import session_delete
from sessions_app.services.execution import run_execute
from sessions_app.services.live import DeltaPublisher, read_deltas
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_ask, run_cancel, session_create, sweep_expired_leases
from tests.factories import ask
from tests.sessions_app.conftest import SECRET
from tests.support.provider_double import ProviderDouble


@pytest.fixture
def double(settings):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    with ProviderDouble() as provider:
        provider.chunk_chars = 4
        yield provider


@pytest.fixture
def streamed_session(make_demo_session, double):
    session = make_demo_session(provider="openai_compatible")
    ModelConnection.objects.filter(pk=session.agent_version.model_connection_id).update(
        base_url=double.base_url
    )
    return session


def make_session(user, version):
    return session_create(user=user, agent_version=version)


def chunk(content):
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}


def finish():
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def shown(run):
    deltas, _ = read_deltas(run.pk, "0")
    return "".join(data.get("content", "") for _, data in deltas)


@pytest.mark.django_db
def test_a_streamed_answer_reaches_the_channel_encrypted_and_is_journaled_once(
    alice, double, streamed_session, deltas_kept
):
    double.reply_chat(content="NONCE-STREAMED answer in pieces")
    run = ask(streamed_session, alice, "question")
    assert run.status == "succeeded", run.error
    assert double.chat_bodies()[0]["stream"] is True
    assert shown(run) == "NONCE-STREAMED answer in pieces"
    with connection.cursor() as cursor:
        cursor.execute("SELECT data FROM sessions_app_rundelta")
        stored = " ".join(str(row[0]) for row in cursor.fetchall())
    assert stored and "NONCE-STREAMED" not in stored
    answers = SessionMessage.objects.filter(run=run, kind="assistant")
    assert [m.message["content"] for m in answers] == ["NONCE-STREAMED answer in pieces"]
    call = ModelCall.objects.get(run=run)
    assert not call.discarded and not call.cost_incomplete
    assert call.reported_prompt_tokens == 10  # the usage chunk of the stream


@pytest.mark.django_db
def test_a_key_split_across_two_chunks_never_reaches_the_channel(
    alice, double, streamed_session, deltas_kept
):
    cut = len(SECRET) // 2
    double.reply_stream(
        [chunk("my key is "), chunk(SECRET[:cut]), chunk(SECRET[cut:]), chunk(" ok"), finish()]
    )
    run = ask(streamed_session, alice, "question")
    assert run.status == "succeeded", run.error
    text = shown(run)
    assert text == "my key is [redacted] ok"
    assert SECRET[:cut] not in text and SECRET[cut:] not in text
    assert SECRET not in run.answer


@pytest.mark.django_db
def test_deltas_older_than_their_expiry_are_deleted(
    alice, double, streamed_session, settings, deltas_kept
):
    double.reply_chat(content="first")
    run = ask(streamed_session, alice, "question")
    RunDelta.objects.update(created_at=RunDelta.objects.first().created_at.replace(year=2020))
    assert read_deltas(run.pk, "0")[0] == []
    double.reply_chat(content="second")
    ask(streamed_session, alice, "again")
    assert not RunDelta.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_a_runs_deltas_are_deleted_when_it_succeeds(alice, double, streamed_session):
    double.reply_chat(content="NONCE-GONE answer")
    sent = []
    publish = DeltaPublisher.flush

    def flush(publisher):
        sent.append(RunDelta.objects.filter(run_id=publisher.run_id).count())
        publish(publisher)

    DeltaPublisher.flush = flush
    try:
        run = ask(streamed_session, alice, "question")
    finally:
        DeltaPublisher.flush = publish
    assert run.status == "succeeded", run.error
    assert max(sent) > 0  # the deltas were there while the call streamed
    assert not RunDelta.objects.filter(run=run).exists()
    answers = SessionMessage.objects.filter(run=run, kind="assistant")
    assert [m.message["content"] for m in answers] == ["NONCE-GONE answer"]


@pytest.mark.django_db
def test_a_runs_deltas_are_deleted_when_it_is_cancelled_or_swept(alice, streamed_session):
    cancelled = run_ask(user=alice, session=streamed_session, question="one")
    DeltaPublisher(cancelled.pk).end_call("main", "action", failed=False)
    run_cancel(user=alice, run=cancelled)
    assert Run.objects.get(pk=cancelled.pk).status == "cancelled"
    assert not RunDelta.objects.filter(run=cancelled).exists()
    lost = run_ask(user=alice, session=streamed_session, question="two")
    DeltaPublisher(lost.pk).end_call("main", "action", failed=False)
    Run.objects.filter(pk=lost.pk).update(
        status="running", lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert sweep_expired_leases() == [lost.pk]
    assert Run.objects.get(pk=lost.pk).error == "worker_lost"
    assert not RunDelta.objects.filter(run=lost).exists()


@pytest.mark.django_db
def test_a_deleted_sessions_deltas_go_with_it(alice, double, streamed_session):
    run = ask(streamed_session, alice, "question")
    other = ask(make_session(alice, streamed_session.agent_version), alice, "elsewhere")
    # A delta its run's ending could not reach (a lost worker's last words).
    for late in (run, other):
        DeltaPublisher(late.pk).end_call("main", "action", failed=False)
    session_delete(user=alice, session=streamed_session)
    assert not RunDelta.objects.filter(run=run).exists()
    assert RunDelta.objects.filter(run=other).exists()  # another session's stay


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cancel_mid_stream_ends_the_run_within_a_second(
    alice, double, streamed_session, deltas_kept
):
    double.chunk_chars = 2
    double.chunk_delay = 0.2
    double.reply_chat(content="x" * 200)  # 20 s of streaming
    run = run_ask(user=alice, session=streamed_session, question="question")
    asked = []

    def cancel():
        while not RunDelta.objects.filter(run_id=run.pk).exists():
            time.sleep(0.05)
        run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
        asked.append(time.monotonic())
        connection.close()

    canceller = threading.Thread(target=cancel)
    canceller.start()
    run_execute(run_id=run.pk)
    ended = time.monotonic()
    canceller.join()
    done = Run.objects.get(pk=run.pk)
    assert done.status == "cancelled"
    assert ended - asked[0] < 1.0
    call = ModelCall.objects.get(run=run)
    assert call.discarded and call.cost_incomplete and call.usage is None
    assert call.error.startswith("cancelled:")
    assert not SessionMessage.objects.filter(run=run, kind="assistant").exists()
    waited = time.monotonic() + 2
    while not double.streams_cut and time.monotonic() < waited:
        time.sleep(0.05)
    assert double.streams_cut == 1  # the stream was closed, not drained
    assert len(shown(done)) < 200
    # Replay skips the discarded call and cancels where the journal says the run was cancelled.
    assert replay_run(done).ok
