"""Replay of runs that were cancelled while running, lost their lease, or kept a plan."""

from __future__ import annotations

import pytest

from sessions_app.models import Run
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_ask, run_cancel, run_resume
from tests.factories import ask

pytestmark = pytest.mark.django_db


def test_a_run_cancelled_during_a_model_call_replays_exactly(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "NONCE-X"}')
    gateway.during_call.append(lambda: run_cancel(user=alice, run=Run.objects.get(pk=run.pk)))
    run_execute(run_id=run.pk)
    assert Run.objects.get(pk=run.pk).status == "cancelled"

    report = replay_run(Run.objects.get(pk=run.pk))

    assert report.ok, report.differences


def test_a_run_with_a_discarded_call_replays_from_the_calls_it_used(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "NONCE-Y"}')
    # The lease is lost while the model answers; the sweep fails the run; it is resumed.
    gateway.during_call.append(
        lambda: Run.objects.filter(pk=run.pk).update(lease_owner="another-worker")
    )
    assert run_execute(run_id=run.pk) == "lease lost"
    Run.objects.filter(pk=run.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
    from sessions_app.services.runs import sweep_expired_leases

    assert sweep_expired_leases() == [run.pk]
    run_resume(user=alice, run=Run.objects.get(pk=run.pk))
    run_execute(run_id=run.pk)
    done = Run.objects.get(pk=run.pk)
    assert done.status == "succeeded", done.error
    assert done.model_calls.filter(discarded=True).count() == 1

    report = replay_run(done)

    assert report.ok, report.differences


def test_a_run_that_set_its_plan_replays_exactly(alice, gateway, make_demo_session):
    session = make_demo_session(tools=["update_plan", "echo"], policy={"model_steps": 1})
    question = (
        '/tool update_plan {"steps": [{"step": "NONCE-STEP", "status": "in_progress"}]} '
        '/tool echo {"text": "NONCE-Z"}'
    )
    run = ask(session, alice, question)
    assert run.status == "succeeded"
    assert run.checkpoint["state"]["plan"] == "1. [in_progress] NONCE-STEP"

    report = replay_run(Run.objects.get(pk=run.pk))

    assert report.ok, report.differences


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_whose_sleep_was_cancelled_replays_exactly(alice, gateway, make_demo_session):
    import threading

    from django.db import connection

    session = make_demo_session(tools=["sleep", "echo"])
    run = run_ask(
        user=alice,
        session=session,
        question='/tool sleep {"seconds": 20} /tool echo {"text": "NONCE-NEVER"}',
    )

    def cancel():
        run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
        connection.close()

    timer = threading.Timer(1.0, cancel)
    timer.start()
    run_execute(run_id=run.pk)
    timer.join()
    done = Run.objects.get(pk=run.pk)
    assert done.status == "cancelled"
    contents = [m.message["content"] for m in done.messages.filter(kind="tool_result")]
    from agentloom.engine import CANCELLED_RESULT, INTERRUPTED_RESULT

    assert contents == [INTERRUPTED_RESULT, CANCELLED_RESULT], "the echo after it never ran"

    report = replay_run(done)

    assert report.ok, report.differences
