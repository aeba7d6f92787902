"""Approvals over the API: the run object lists pending calls; the creator decides each once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from sessions_app.models import Run
from tests.api.factories import client_for
from tests.factories import approval_session, ask
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True


@pytest.fixture
def waiting(alice, space, mcp_server):
    url, _calls = mcp_server
    session = approval_session(alice, space, url, ["demo__greet"])
    run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert run.status == Run.Status.WAITING_APPROVAL
    return run


def _decide(client, run, **body):
    return client.post(f"/api/v1/runs/{run.pk}/approvals", body, "json")


def test_the_run_object_lists_its_pending_calls(api, waiting):
    body = api.get(f"/api/v1/runs/{waiting.pk}/").json()
    assert body["status"] == "waiting_approval"
    [pending] = body["pending_approvals"]
    assert pending["tool"] == "demo__greet"
    assert pending["arguments"] == '{"who": "Ada"}'


def test_a_decision_answers_202_with_the_queued_run_and_a_second_409(api, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    response = _decide(api, waiting, call_id=call_id, decision="approve")
    assert response.status_code == 202
    assert response.json()["status"] == "queued" and response.json()["pending_approvals"] == []
    again = _decide(api, waiting, call_id=call_id, decision="deny", note="changed my mind")
    assert again.status_code == 409
    assert again.json() == {"detail": "This tool call has already been decided."}


def test_bad_decisions_name_the_field(api, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    assert "decision" in _decide(api, waiting, call_id=call_id, decision="maybe").json()
    assert "call_id" in _decide(api, waiting, call_id="r9-9-9", decision="approve").json()
    assert "note" in _decide(api, waiting, call_id=call_id, decision="deny", note=5).json()


def test_a_member_who_is_not_the_creator_is_refused(space, carol, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    response = _decide(client_for(carol), waiting, call_id=call_id, decision="approve")
    assert response.status_code == 404
    waiting.refresh_from_db()
    assert waiting.approval_decisions == {}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_decisions_racing_one_wins_the_other_is_409(alice, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    answers: list[int] = []
    start = threading.Barrier(2)

    def decide(decision):
        try:
            start.wait(5)
            answers.append(
                _decide(client_for(alice), waiting, call_id=call_id, decision=decision).status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(d,)) for d in ("approve", "deny")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(answers) == [202, 409]
    waiting.refresh_from_db()
    assert len(waiting.approval_decisions) == 1


def _cancel(client, run):
    return client.post(f"/api/v1/runs/{run.pk}/cancel", {}, "json")


def test_an_approval_then_a_cancel_the_approval_wins_and_the_cancel_says_so(api, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    assert _decide(api, waiting, call_id=call_id, decision="approve").status_code == 202
    cancel = _cancel(api, waiting)
    assert cancel.status_code == 409
    assert "decided before this cancel" in cancel.json()["detail"]
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.QUEUED and waiting.approval_decisions[call_id]["approved"]


def test_a_cancel_then_an_approval_the_cancel_wins_and_the_approval_says_so(api, waiting):
    call_id = waiting.pending_approvals[0]["call_id"]
    assert _cancel(api, waiting).status_code == 202
    decision = _decide(api, waiting, call_id=call_id, decision="approve")
    assert decision.status_code == 409
    assert "cancelled before this decision" in decision.json()["detail"]
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.CANCELLED and waiting.approval_decisions == {}
