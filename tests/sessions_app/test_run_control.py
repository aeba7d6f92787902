"""Run control in the application: the lease heartbeat's write, discarded calls, cancelling."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from agentloom.config import lease_problem
from agentloom.engine import CANCELLED_RESULT
from sessions_app.models import ModelCall, Run, SessionMessage, SessionView
from sessions_app.services.execution import run_execute
from sessions_app.services.journal import renew_lease
from sessions_app.services.runs import run_ask, run_cancel, run_claim
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def test_the_heartbeat_renews_only_its_own_lease_and_writes_only_the_expiry(
    alice, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    assert run_claim(run_id=run.pk, owner="worker-1")
    before = Run.objects.get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() + timedelta(seconds=1))

    assert renew_lease(run_id=run.pk, owner="worker-1") is not None
    after = Run.objects.get(pk=run.pk)
    assert after.lease_expires_at > timezone.now() + timedelta(seconds=60)
    assert after.updated_at == before.updated_at, "no column but the lease's"
    assert renew_lease(run_id=run.pk, owner="worker-2") is None, "fenced by the owner"

    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, lease_owner="")
    assert renew_lease(run_id=run.pk, owner="worker-1") is None, "a swept run stays swept"
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED


def test_an_answer_that_arrives_after_the_lease_was_lost_is_recorded_discarded(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "never"}')
    # While the model thinks, the run is swept and resumed elsewhere.
    gateway.during_call.append(
        lambda: Run.objects.filter(pk=run.pk).update(lease_owner="another-worker")
    )

    assert run_execute(run_id=run.pk) == "lease lost"

    call = ModelCall.objects.get(run=run)
    assert call.discarded is True, "billed, so recorded, but marked unused"
    assert call.response["message"]["tool_calls"]
    # Nothing of the answer was journaled: the tool never ran.
    kinds = list(SessionMessage.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds == ["user_input"]
    assert Run.objects.get(pk=run.pk).lease_owner == "another-worker"


def test_calls_held_under_the_lease_are_not_discarded(alice, gateway, make_demo_session):
    run = ask(make_demo_session(), alice, '/tool echo {"text": "hi"}')
    assert run.status == "succeeded"
    assert list(ModelCall.objects.filter(run=run).values_list("discarded", flat=True)) == [
        False,
        False,
    ]


def test_a_cancel_during_a_model_call_runs_none_of_its_tools(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "NONCE-NEVER-RUN"}')
    gateway.during_call.append(lambda: run_cancel(user=alice, run=Run.objects.get(pk=run.pk)))

    run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == ("cancelled", True)
    results = SessionMessage.objects.filter(run=run, kind="tool_result")
    assert [r.message["content"] for r in results] == [CANCELLED_RESULT]
    assert not any(r.message["content"] == "NONCE-NEVER-RUN" for r in results)


def test_cancelling_is_observable_while_the_run_finishes_its_step(
    alice, gateway, make_demo_session, client
):
    from rest_framework.test import APIClient

    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    api = APIClient()
    api.force_authenticate(alice)
    seen = []

    def cancel_and_look():
        answer = api.post(f"/api/v1/runs/{run.pk}/cancel")
        seen.append(answer.json())
        seen.append(api.get(f"/api/v1/runs/{run.pk}/").json())

    gateway.during_call.append(cancel_and_look)
    run_execute(run_id=run.pk)

    for body in seen:
        assert (body["status"], body["cancel_requested"]) == ("running", True)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["status"] == "cancelled"
    # The console's button says so while the run is still running.
    client.force_login(alice)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, finished_at=None)
    page = client.get(reverse("console-chat", args=[session.pk])).content.decode()
    assert "Cancelling…" in page


def test_the_plan_is_shown_beside_the_chat_and_in_the_context_api(
    alice, gateway, make_demo_session, client
):
    from rest_framework.test import APIClient

    session = make_demo_session(tools=["update_plan"])
    question = '/tool update_plan {"steps": [{"step": "find NONCE-PLAN", "status": "pending"}]}'
    run = ask(session, alice, question)
    assert run.status == "succeeded"

    api = APIClient()
    api.force_authenticate(alice)
    plan = api.get(f"/api/v1/runs/{run.pk}/context").json()["plan"]
    assert plan == "1. [pending] find NONCE-PLAN"
    client.force_login(alice)
    page = client.get(reverse("console-chat", args=[session.pk])).content.decode()
    assert "1. [pending] find NONCE-PLAN" in page


def test_the_next_questions_start_with_the_plan_even_past_a_reusable_view(
    alice, gateway, make_demo_session, client
):
    from rest_framework.test import APIClient

    session = make_demo_session(tools=["update_plan", "big_output"], context_window=8_192)
    question = '/tool update_plan {"steps": [{"step": "find NONCE-PLAN", "status": "pending"}]}'
    ask(session, alice, question)
    plan_seq = SessionMessage.objects.filter(session=session, kind="tool_result").get().seq
    runs = [ask(session, alice, '/tool big_output {"chars": 1200}') for _ in range(2)]
    # Questions that need a summary: a compaction that only masks saves no view.
    runs += [ask(session, alice, long_question(n)) for n in range(3)]
    runs.append(ask(session, alice, "what is next?"))
    # The last question inherits a reusable view that stands for the plan's records.
    block = runs[-1].checkpoint["context"]["inherited"]["history"]
    assert block["view"] is not None
    assert SessionView.objects.get(session=session, revision=block["view"]).watermark > plan_seq

    api = APIClient()
    api.force_authenticate(alice)
    for run in runs:
        assert api.get(f"/api/v1/runs/{run.pk}/context").json()["plan"] == (
            "1. [pending] find NONCE-PLAN"
        ), f"run {run.number}"
    client.force_login(alice)
    page = client.get(reverse("console-chat", args=[session.pk])).content.decode()
    assert "1. [pending] find NONCE-PLAN" in page and "No plan yet" not in page


def test_start_up_refuses_a_lease_that_cannot_outlive_the_heartbeat():
    assert lease_problem(10, 2.5) is None
    assert lease_problem(10, 5) is None
    assert "RUN_LEASE_SECONDS" in lease_problem(10, 6)
    assert "RUN_HEARTBEAT_SECONDS" in lease_problem(10, 0)
    with (
        override_settings(RUN_LEASE_SECONDS=10, RUN_HEARTBEAT_SECONDS=8),
        pytest.raises(SystemCheckError) as refused,
    ):
        call_command("check")
    assert "sessions_app.E001" in str(refused.value)
