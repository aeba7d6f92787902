"""Approval of tool calls by the session's creator: the run waits (no worker, no lease, active),
then continues by its own transition once every call is decided."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agentloom.errors import Conflict, InvalidInput, NotFound
from sessions_app.models import Run, SessionMessage
from sessions_app.services.approvals import run_decide, sweep_expired_approvals
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_ask, run_cancel, supplement_add
from tests.factories import approval_session, ask, make_space
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db

GREET = '/tool demo__greet {"who": "Ada"}'


@pytest.fixture(scope="module")
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 10


@pytest.fixture
def session(alice, mcp_server):
    url, _calls = mcp_server
    return approval_session(
        alice,
        make_space(admin=alice),
        url,
        ["echo", "demo__greet", "demo__weather"],
        approval={"demo__weather": "never"},
    )


def _greets(calls) -> int:
    return len([call for call in calls.calls if call[0] == "greet"])


def _rows(run, kind):
    return [row.message for row in SessionMessage.objects.filter(run=run, kind=kind)]


def test_publishing_freezes_each_tools_approval_mode(session):
    frozen = {
        entry["name"]: entry["approval"] for entry in session.agent_version.snapshot["server_tools"]
    }
    assert frozen == {"demo__greet": True, "demo__weather": False}


def test_a_call_waits_holds_no_lease_and_runs_once_approved(alice, session, mcp_server):
    _url, calls = mcp_server
    before = _greets(calls)
    run = ask(session, alice, GREET)
    assert run.status == Run.Status.WAITING_APPROVAL
    assert (run.lease_owner, run.lease_expires_at, run.finished_at) == ("", None, None)
    [pending] = run.pending_approvals
    assert pending["tool"] == "demo__greet" and json.loads(pending["arguments"]) == {"who": "Ada"}
    assert _greets(calls) == before, "nothing ran before the decision"
    with pytest.raises(Conflict):
        run_ask(user=alice, session=session, question="another question")  # still active

    decided = run_decide(user=alice, run=run, call_id=pending["call_id"], decision="approve")
    assert decided.status == Run.Status.QUEUED
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.attempt == 1, "a continuation is not a resume"
    assert _greets(calls) == before + 1
    assert _rows(run, "tool_result")[0]["content"] == "hello Ada"
    feedback = [m["content"] for m in _rows(run, "feedback")]
    assert any(f"({pending['call_id']}) approved by alice at" in text for text in feedback)
    assert replay_run(run).ok


def test_a_denied_call_gets_a_denied_result_and_the_note(alice, session, mcp_server):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloom import tracing

    _url, calls = mcp_server
    before = _greets(calls)
    run = ask(session, alice, GREET)
    call_id = run.pending_approvals[0]["call_id"]
    run_decide(user=alice, run=run, call_id=call_id, decision="deny", note="not today")
    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    try:
        run_execute(run_id=run.pk)
    finally:
        tracing.unconfigure()
    # The call never ran; its span says so, under the continuation's.
    (denied,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    (agent,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert (
        denied.name == "execute_tool demo__greet" and denied.parent.span_id == agent.context.span_id
    )
    assert denied.attributes["error.type"] == "denied"
    assert denied.attributes["gen_ai.tool.call.id"] == call_id
    assert "not today" not in repr(dict(denied.attributes))
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert _greets(calls) == before
    result = json.loads(_rows(run, "tool_result")[0]["content"])
    assert result["status"] == "denied" and result["reason"] == "not today"
    feedback = [m["content"] for m in _rows(run, "feedback")]
    assert any("denied by alice" in text and "not today" in text for text in feedback)
    assert replay_run(run).ok


def test_a_tool_whose_mode_is_never_runs_without_waiting(alice, session):
    run = ask(session, alice, '/tool demo__weather {"city": "Oslo"}')
    assert run.status == Run.Status.SUCCEEDED, run.error


def test_a_second_decision_on_a_call_is_a_conflict(alice, session):
    run = ask(session, alice, GREET)
    call_id = run.pending_approvals[0]["call_id"]
    run_decide(user=alice, run=run, call_id=call_id, decision="approve")
    with pytest.raises(Conflict):
        run_decide(user=alice, run=run, call_id=call_id, decision="deny")
    run.refresh_from_db()
    assert run.approval_decisions[call_id]["approved"] is True
    with pytest.raises(InvalidInput) as refused:
        run_decide(user=alice, run=run, call_id="r1_9", decision="approve")
    assert refused.value.field == "call_id"


def test_only_the_sessions_creator_decides(alice, bob, session):
    from agentloom.spaces.models import Membership

    Membership.objects.create(space=session.space, user=bob, role=Membership.Role.ADMIN)
    run = ask(session, alice, GREET)
    with pytest.raises(NotFound):
        run_decide(
            user=bob, run=run, call_id=run.pending_approvals[0]["call_id"], decision="approve"
        )
    run.refresh_from_db()
    assert run.approval_decisions == {} and run.status == Run.Status.WAITING_APPROVAL


def test_cancel_while_waiting_ends_the_run_at_once(
    alice, session, mcp_server, django_capture_on_commit_callbacks
):
    """The call it waited on never ran: under the run's end, its `execute_tool` span says it was
    cancelled, with its call id and none of its arguments."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloom import tracing

    _url, calls = mcp_server
    before = _greets(calls)
    run = ask(session, alice, GREET)
    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cancelled = run_cancel(user=alice, run=run)
    finally:
        tracing.unconfigure()
    assert cancelled.status == Run.Status.CANCELLED
    (end,) = [s for s in exporter.get_finished_spans() if s.name == "agentloom.run.end"]
    (waited,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert waited.name == "execute_tool demo__greet"
    assert waited.parent.span_id == end.context.span_id
    assert waited.attributes["error.type"] == "cancelled"
    assert waited.attributes["gen_ai.tool.call.id"] == run.pending_approvals[0]["call_id"]
    assert "Ada" not in repr([dict(s.attributes) for s in exporter.get_finished_spans()])
    with pytest.raises(Conflict):
        run_decide(
            user=alice, run=run, call_id=run.pending_approvals[0]["call_id"], decision="approve"
        )
    assert _greets(calls) == before


def test_an_undecided_wait_expires_as_cancelled_with_the_reason(alice, session, settings):
    settings.RUN_APPROVAL_SECONDS = 60
    run = ask(session, alice, GREET)
    assert sweep_expired_approvals() == []
    later = timezone.now() + timedelta(seconds=61)
    assert sweep_expired_approvals(now=later) == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert run.error.startswith("approval_expired: no decision within 60 seconds")
    statuses = _rows(run, "status")
    assert statuses[-1] == {"status": "cancelled", "error": run.error}


def test_a_supplement_sent_while_waiting_is_delivered_after_the_group(alice, session):
    run = ask(session, alice, GREET)
    supplement_add(user=alice, run=run, text="NONCE-LATE also say hi to Bob")
    run_decide(user=alice, run=run, call_id=run.pending_approvals[0]["call_id"], decision="approve")
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    kinds = [row.kind for row in SessionMessage.objects.filter(run=run).order_by("seq")]
    assert kinds.index("supplement") > kinds.index("tool_result")


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_after_the_decision_leaves_the_call_unknown(
    redis_url, alice, mcp_server, tmp_path
):
    import os
    import signal
    import time

    from agentloom.engine import UNKNOWN_RESULT
    from sessions_app.services.runs import run_resume, sweep_expired_leases
    from tests.sessions_app.test_worker import _send, _start_worker

    url, calls = mcp_server
    session = approval_session(alice, make_space(admin=alice), url, ["demo__slow"])
    run = ask(session, alice, '/tool demo__slow {"seconds": 30}')
    assert run.status == Run.Status.WAITING_APPROVAL
    slow_calls = len([call for call in calls.calls if call[0] == "slow"])
    calls.started.clear()
    run_decide(user=alice, run=run, call_id=run.pending_approvals[0]["call_id"], decision="approve")
    worker = _start_worker(redis_url, tmp_path, ALLOW_PRIVATE_TOOL_HOSTS="true")
    try:
        _send(redis_url, run.pk)
        assert calls.started.wait(60), "the worker ran the approved call"
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    time.sleep(3.5)  # one lease (3 s)
    assert sweep_expired_leases() == [run.pk]
    run_resume(user=alice, run=Run.objects.get(pk=run.pk))
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert [m["content"] for m in _rows(run, "tool_result")] == [UNKNOWN_RESULT]
    assert len([call for call in calls.calls if call[0] == "slow"]) == slow_calls + 1
    feedback = [m["content"] for m in _rows(run, "feedback")]
    assert any("approved by alice" in text for text in feedback), "the decision survived"


def test_staff_who_are_not_superusers_see_no_pending_arguments_in_the_admin(alice, session):
    from django.contrib.auth.models import Permission
    from django.test import Client
    from django.urls import reverse

    ask(session, alice, "hello")  # the session's title comes from its first question
    run = ask(session, alice, '/tool demo__greet {"who": "NONCE-WAITING-ARGUMENT"}')
    assert run.status == Run.Status.WAITING_APPROVAL
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(*Permission.objects.filter(content_type__app_label="sessions_app"))
    browser = Client()
    browser.force_login(alice)
    html = browser.get(reverse("admin:sessions_app_run_change", args=[run.pk])).content.decode()
    assert "waiting_approval" in html.lower() or "Waiting for approval" in html
    assert "NONCE-WAITING-ARGUMENT" not in html


def test_a_run_that_waits_continues_in_a_trace_linked_to_the_one_that_stopped(
    alice, session, mcp_server
):
    """Two segments, each parented by what caused it (the question, then the decision), the
    continuation's `invoke_agent` linked to the span of the execution that stopped to wait."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloom import tracing

    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    try:
        with tracing.span_from("question", {}):
            run = ask(session, alice, GREET)
        assert run.status == Run.Status.WAITING_APPROVAL
        [pending] = run.pending_approvals
        with tracing.span_from("decision", {}):
            run_decide(user=alice, run=run, call_id=pending["call_id"], decision="approve")
            assert run_execute(run_id=run.pk) == Run.Status.SUCCEEDED
    finally:
        tracing.unconfigure()
    finished = exporter.get_finished_spans()
    named = {span.name: span for span in finished}
    first, second = [span for span in finished if span.name.startswith("invoke_agent")]
    assert first.parent.span_id == named["question"].context.span_id
    assert second.parent.span_id == named["decision"].context.span_id
    assert first.context.trace_id != second.context.trace_id
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert second.links[0].context.trace_id == first.context.trace_id
    assert not first.links
    greet = named["execute_tool demo__greet"]
    assert greet.parent.span_id == second.context.span_id  # it ran once approved
    assert Run.objects.get(pk=run.pk).trace_id == format(second.context.trace_id, "032x")
