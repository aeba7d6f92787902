"""Rendering 5 on the database journal: a new run's first request starts with the last request
of the run before it, byte for byte, its excerpts named as that run named them; from compaction
version 5 its masked results stay masked where the view rule saves the masking's view, and from
rendering 7 also where it refuses it (the new run projects the journal, and shows each result a
run masked as that run's stub)."""

from __future__ import annotations

import json

import pytest

from context_app.services.agents import agent_create, agent_publish
from models_app.services.tool_servers import tool_server_create, tool_server_refresh
from sessions_app.models import Run, SessionView
from sessions_app.services.approvals import run_decide
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    session_create,
    supplement_add,
)
from tests.factories import ask, make_connection, make_space
from tests.sessions_app.test_history import INTERLEAVED
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db


def test_a_new_run_extends_the_last_request_of_the_run_before_it(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    first = ask(session, alice, '/tool big_output {"chars": 3000} NONCE-1')
    assert first.status == "succeeded", first.error
    last = gateway.action_requests()[-1]
    gateway.requests.clear()
    second = ask(session, alice, "NONCE-2 and now?")
    assert second.status == "succeeded", second.error
    after = gateway.action_requests()[0]
    assert json.dumps(after.tools) == json.dumps(last.tools)
    shown = [json.dumps(message) for message in last.messages]
    assert [json.dumps(message) for message in after.messages[: len(shown)]] == shown
    assert len(after.messages) > len(shown)
    assert 'read_record(ref=\\"r1:' in json.dumps(after.messages)
    assert replay_run(second).ok


def _masking_boundaries(session, alice, gateway, questions: int):
    """Ask `questions` tool questions; return, for each run whose last compaction only masked,
    (its last request, the next run's first request, whether that run compacted before it)."""
    found, masked_last = [], None
    for n in range(questions):
        gateway.requests.clear()
        run = ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
        assert run.status == "succeeded", run.error
        requests = gateway.action_requests()
        log = run.checkpoint["state"]["compaction_log"]
        if masked_last is not None:
            # A compaction before its first request covers only the question (its record 1).
            found.append((masked_last, requests[0], any(row["covered_seq"] == 1 for row in log)))
        done = [row for row in log if row["outcome"] == "succeeded"]
        masked_last = requests[-1] if done and done[-1]["reason"] == "masked" else None
    return found


def _texts(request) -> list[str]:
    return [json.dumps(message) for message in request.messages]


def test_a_masked_result_stays_masked_in_the_next_runs_first_request(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    boundaries = _masking_boundaries(session, alice, gateway, 10)
    # Where the new question leaves the view under the trigger (elsewhere it summarises first).
    extended = [(last, first) for last, first, compacted in boundaries if not compacted]
    assert extended, "the session was meant to mask"
    for last, first in extended:
        # The next run starts from the masking's view: the prefix as sent, its stubs included.
        shown = _texts(last)
        assert any("hidden to save room" in text for text in shown)
        assert _texts(first)[: len(shown)] == shown


def test_before_compaction_5_the_next_run_shows_masked_results_whole(
    alice, gateway, make_demo_session, monkeypatch
):
    monkeypatch.setattr("agentloom.engine._compaction_versions.CURRENT_COMPACTION", 4)
    monkeypatch.setattr("agentloom.engine._rendering.CURRENT_RENDERING", 6)
    session = make_demo_session(context_window=9_000)
    boundaries = _masking_boundaries(session, alice, gateway, 10)
    assert boundaries, "the session was meant to mask"
    # A new run projects the journal, its results whole, so it masks again before its first
    # request, with its own choice of what.
    assert all(compacted for _, _, compacted in boundaries)


def _stubs(request) -> dict[str, str]:
    """Return the request's masked results: call id -> the stub message's JSON."""
    return {
        message["tool_call_id"]: json.dumps(message)
        for message in request.messages
        if message.get("role") == "tool" and "hidden to save room" in str(message["content"])
    }


def _shown_results(request) -> dict[str, str]:
    """Return the request's tool messages: call id -> the message's JSON."""
    return {
        message["tool_call_id"]: json.dumps(message)
        for message in request.messages
        if message.get("role") == "tool"
    }


def test_from_rendering_7_masks_no_view_keeps_reach_the_next_run_as_they_were_sent(
    alice, gateway, make_demo_session, monkeypatch, view_refusals
):
    # Before compaction 5 a compaction that only masked saves no view: the next run projects.
    monkeypatch.setattr("agentloom.engine._compaction_versions.CURRENT_COMPACTION", 4)
    session = make_demo_session(context_window=9_000)
    boundaries = _masking_boundaries(session, alice, gateway, 10)
    assert boundaries, "the session was meant to mask"
    assert any("only masked" in reason for reasons in view_refusals.values() for reason in reasons)
    extended = [(last, first) for last, first, compacted in boundaries if not compacted]
    assert extended, "a new run started from the stubs instead of masking again"
    for last, first in extended:
        stubs = _stubs(last)
        assert stubs
        assert len(_stubs(first)) == len(stubs), "nothing else was masked"
        shown = _shown_results(first)
        assert {call: shown.get(call) for call in stubs} == stubs
        assert _texts(first)[: len(last.messages)] == _texts(last)


def _failed_and_resumed(session, alice, question: str):
    """Ask `question`, which fails once, then resume its run, asking it again in a supplement,
    to its end; return the run."""
    run = ask(session, alice, f"{question} [boom]")
    assert run.status == "failed"
    run_resume(user=alice, run=run)
    supplement_add(user=alice, run=run, text=f"{question} again")
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    return run


def test_a_run_resumed_after_failing_keeps_its_masks_for_the_next_run(
    alice, gateway, make_demo_session, view_refusals
):
    session = make_demo_session(context_window=9_000)
    refused = None
    for n in range(10):
        gateway.requests.clear()
        run = _failed_and_resumed(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
        if _last_masking_refused(run):
            refused = run
            break
    assert refused is not None, "a resumed run's masking was meant to be refused as a view"
    assert (
        "terminal records inside the covered range are not in the view"
        in (view_refusals[refused.pk])
    )
    _next_run_shows_the_stubs(session, alice, gateway, refused)


def _last_masking_refused(run) -> bool:
    """Say whether the run's last compaction only masked and was saved as no view."""
    done = [row for row in run.checkpoint["state"]["compaction_log"] if row["revision"]]
    return (
        bool(done)
        and done[-1]["reason"] == "masked"
        and not SessionView.objects.filter(run=run, snapshot_revision=done[-1]["revision"])
    )


def _next_run_shows_the_stubs(session, alice, gateway, masking) -> None:
    """Ask a new question after `masking`, the last run, and check that its first request shows
    every stub `masking` last sent, byte for byte, with no masking of its own before it (a
    summary on the conversation's prefix may come first: it sends that conversation)."""
    stubs = _stubs(gateway.action_requests()[-1])
    assert stubs
    gateway.requests.clear()
    after = ask(session, alice, "NONCE-NEXT and now?")
    assert after.status == "succeeded", after.error
    # A masking calls no model, so the log says whether one came first.
    log = after.checkpoint["state"]["compaction_log"]
    first = [row for row in log if row["covered_seq"] == 1]
    assert not [row for row in first if "masked" in (row["reason"], row.get("stage"))], first
    assert not [row for row in first if (row.get("sources") or {}).get("masked", {}).get("session")]
    shown = _shown_results(gateway.requests[0])
    assert {call: shown.get(call) for call in stubs} == stubs
    report = replay_run(after)
    assert report.ok, "\n".join(report.differences)


def test_a_run_with_another_runs_supplement_inside_keeps_its_masks_for_the_next_run(
    alice, gateway, make_demo_session, view_refusals
):
    session = make_demo_session(context_window=9_000)
    refused = None
    for n in range(10):
        failed = ask(session, alice, f"NONCE-A{n} [boom]")
        assert failed.status == "failed"
        run = run_ask(
            user=alice, session=session, question=f'/tool big_output {{"chars": 1500}} {n}'
        )
        gateway.during_call.append(
            lambda failed=failed: supplement_add(user=alice, run=failed, text="NONCE-SUPPLEMENT")
        )
        gateway.requests.clear()
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == "succeeded", run.error
        if _last_masking_refused(run):
            refused = run
            break
    assert refused is not None, "a masking was meant to be refused as a view"
    assert INTERLEAVED in view_refusals[refused.pk]
    _next_run_shows_the_stubs(session, alice, gateway, refused)


@pytest.fixture
def greeter(alice, settings):
    """Return a session on a 9,000-token window whose `demo__greet` calls wait for approval."""
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 10
    space = make_space(admin=alice)
    with serve(mcp_app(Calls())) as base:
        server = tool_server_create(
            user=alice, space=space, name="demo", url=base + "/mcp", approval="always"
        )
        tool_server_refresh(user=alice, server=server)
        connection = make_connection(
            space, context_window=9_000, max_output_tokens=1_000, safety_margin_tokens=200
        )
        agent = agent_create(
            user=alice,
            space=space,
            name="Careful",
            model_connection=connection.pk,
            tools=["big_output", "demo__greet"],
        )
        yield session_create(user=alice, agent_version=agent_publish(user=alice, agent=agent))


def test_a_run_cancelled_while_a_call_waits_keeps_its_masks_for_the_next_run(
    alice, gateway, greeter, view_refusals
):
    refused = None
    for n in range(10):
        assert ask(greeter, alice, f'/tool big_output {{"chars": 1500}} {n}').status == "succeeded"
        gateway.requests.clear()
        run = ask(greeter, alice, '/tool demo__greet {"who": "Ada"}')
        assert run.status == Run.Status.WAITING_APPROVAL
        if _last_masking_refused(run):
            refused = run_cancel(user=alice, run=run)
            break
        [pending] = run.pending_approvals
        run_decide(user=alice, run=run, call_id=pending["call_id"], decision="approve")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == "succeeded", run.error
    assert refused is not None, "a masking was meant to be refused as a view"
    assert refused.status == Run.Status.CANCELLED
    assert "pending tool calls" in view_refusals[refused.pk]
    _next_run_shows_the_stubs(greeter, alice, gateway, refused)
