"""A tool server asks the person, against real SDK servers on loopback in both protocol eras.

2026-07-28: the call answers `input_required`; the run waits `waiting_input` (no worker, no
lease), the creator answers, declines or cancels, and the same call goes again with the answers
and the server's request state. 2025: the server asks during the open call; the worker lists the
question with the call's deadline and declines when no one answers in time. Questions and answers
are journaled as feedback after the tool group.
"""

from __future__ import annotations

import threading
import time

import pytest

from agentloom.errors import Conflict, InvalidInput, NotFound
from sessions_app.models import Run, SessionMessage
from sessions_app.services.approvals import sweep_expired_approvals
from sessions_app.services.execution import run_execute
from sessions_app.services.questions import run_answer
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_ask, run_cancel
from tests.factories import approval_session, ask, make_space
from tests.support.mcp_servers import BOOK_STATE, Calls, mcp_app, serve

pytestmark = pytest.mark.django_db

BOOK = '/tool demo__book {"room": "blue"}'
DAY = {"day": "2026-12-24", "nights": 2, "breakfast": True, "size": "double"}


@pytest.fixture(scope="module")
def server_2026():
    calls = Calls()
    with serve(mcp_app(calls, asking=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture(scope="module")
def server_2025():
    calls = Calls()
    with serve(mcp_app(calls, era="2025", asking=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 20


def _session(user, url):
    return approval_session(
        user, make_space(admin=user), url, ["demo__book"], approval={"demo__book": "never"}
    )


def _rows(run, kind):
    return [row for row in SessionMessage.objects.filter(run=run, kind=kind).order_by("seq")]


def _books(calls) -> int:
    return len([call for call in calls.calls if call[0] == "book"])


@pytest.fixture
def waiting(alice, server_2026):
    url, _calls = server_2026
    session = _session(alice, url)
    run = ask(session, alice, BOOK)
    assert run.status == Run.Status.WAITING_INPUT, run.error
    return run


def test_an_input_required_call_waits_and_holds_no_worker_or_lease(alice, waiting, server_2026):
    _url, calls = server_2026
    run = waiting
    assert (run.lease_owner, run.lease_expires_at, run.finished_at) == ("", None, None)
    [question] = run.pending_questions
    assert question["server"] == "demo" and question["tool"] == "demo__book"
    assert question["mode"] == "form" and question["message"] == "Which day for <b>blue</b>?"
    assert [f["name"] for f in question["fields"]] == ["day", "nights", "breakfast", "size"]
    assert calls.declared[-1] is True, "the main instance declares the capability"
    # The server's request state (the SDK seals it) is in the checkpoint, which is encrypted.
    assert run.checkpoint["state"]["asking"]["request_state"]
    assert "request_state" not in question
    with pytest.raises(Conflict):
        run_ask(user=alice, session=run.session, question="another question")  # still active
    assert not _rows(run, "tool_result"), "the call has no result while it waits"


def test_an_answered_round_sends_the_same_call_with_the_answers(alice, waiting, server_2026):
    _url, calls = server_2026
    run, books = waiting, _books(server_2026[1])
    queued = run_answer(user=alice, run=run, key="day", action="accept", content=DAY)
    assert queued.status == Run.Status.QUEUED
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.attempt == 1, "a continuation is not a resume"
    assert _books(calls) == books + 1, "one logical call: sent once more, with the answers"
    assert calls.answers[-1] == ("accept", DAY, BOOK_STATE)
    [result] = _rows(run, "tool_result")
    assert result.message["content"] == "booked blue on 2026-12-24 for 2 nights"
    feedback = _rows(run, "feedback")
    texts = [row.message["content"] for row in feedback]
    asked = "tool server demo asked during demo__book"
    assert any(asked in t and "<b>blue</b>" in t for t in texts)
    assert any("question day of demo__book" in t and "accept by alice" in t for t in texts)
    assert all(row.seq > result.seq for row in feedback), "feedback after the tool group"
    assert run.pending_questions == []
    assert replay_run(run).ok, "a replay answers as the run did"


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_or_cancelled_question_is_sent_as_such(alice, waiting, server_2026, action):
    _url, calls = server_2026
    run = waiting
    run_answer(user=alice, run=run, key="day", action=action)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert calls.answers[-1] == (action, None, BOOK_STATE)
    [result] = _rows(run, "tool_result")
    assert result.message["content"] == f"not booked: the person chose {action}"
    texts = [row.message["content"] for row in _rows(run, "feedback")]
    assert any(f"{action} by alice" in t for t in texts)
    assert replay_run(run).ok


def test_answers_are_checked_against_the_form_and_taken_once(alice, bob, waiting):
    run = waiting
    with pytest.raises(InvalidInput) as wrong:
        run_answer(user=alice, run=run, key="day", action="accept", content={"day": "x"})
    assert wrong.value.field == "content.nights"
    with pytest.raises(InvalidInput) as wrong:
        run_answer(
            user=alice, run=run, key="day", action="accept", content={**DAY, "size": "suite"}
        )
    assert wrong.value.field == "content.size"
    with pytest.raises(InvalidInput) as wrong:
        run_answer(user=alice, run=run, key="day", action="accept", content={**DAY, "pin": "1"})
    assert wrong.value.field == "content"
    with pytest.raises(InvalidInput) as wrong:
        run_answer(user=alice, run=run, key="day", action="maybe")
    assert wrong.value.field == "action"
    with pytest.raises(InvalidInput) as wrong:
        run_answer(user=alice, run=run, key="nope", action="decline")
    assert wrong.value.field == "key"
    with pytest.raises(NotFound):
        run_answer(user=bob, run=run, key="day", action="decline")
    run_answer(user=alice, run=run, key="day", action="accept", content={**DAY, "nights": "3"})
    with pytest.raises(Conflict):
        run_answer(user=alice, run=run, key="day", action="decline")
    run.refresh_from_db()
    assert run.question_answers["day"]["content"]["nights"] == 3


def test_cancel_while_waiting_ends_the_run_and_refuses_a_later_answer(alice, waiting):
    run = run_cancel(user=alice, run=waiting)
    assert run.status == Run.Status.CANCELLED
    with pytest.raises(Conflict):
        run_answer(user=alice, run=run, key="day", action="decline")


def test_an_unanswered_wait_expires_as_cancelled(alice, waiting, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.RUN_APPROVAL_SECONDS = 60
    later = timezone.now() + timedelta(seconds=61)
    assert sweep_expired_approvals(now=later) == [waiting.pk]
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.CANCELLED
    assert waiting.error.startswith("input_expired: no answer within 60 seconds")


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_the_run_waits_leaves_it_to_continue_from_the_checkpoint(
    redis_url, alice, server_2026, tmp_path
):
    import os
    import signal

    from tests.sessions_app.test_worker import _send, _start_worker, _wait

    url, calls = server_2026
    session = _session(alice, url)
    run = run_ask(user=alice, session=session, question=BOOK)
    books = _books(calls)
    worker = _start_worker(redis_url, tmp_path, ALLOW_PRIVATE_TOOL_HOSTS="true")
    try:
        _send(redis_url, run.pk)
        _wait(
            lambda: Run.objects.get(pk=run.pk).status == Run.Status.WAITING_INPUT,
            60,
            "the run to wait for answers",
        )
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    run.refresh_from_db()
    assert run.lease_owner == "" and run.status == Run.Status.WAITING_INPUT
    run_answer(user=alice, run=run, key="day", action="accept", content=DAY)
    run_execute(run_id=run.pk)  # another worker
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert _books(calls) == books + 2, "the question's round and the answered one"
    assert calls.answers[-1] == ("accept", DAY, BOOK_STATE)
    assert run.attempt == 1
    assert replay_run(run).ok


def _answer_when_asked(alice, run_id: int, **answer) -> threading.Thread:
    """Answer the first question the running run lists, from another thread."""

    def answer_it() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            run = Run.objects.get(pk=run_id)
            if run.pending_questions:
                question = run.pending_questions[0]
                assert question["deadline"], "a question asked during a call states its deadline"
                run_answer(user=alice, run=run, key=question["key"], **answer)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=answer_it)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_2025_elicitation_is_answered_during_the_call(alice, server_2025):
    url, calls = server_2025
    session = _session(alice, url)
    run = run_ask(user=alice, session=session, question=BOOK)
    answer = {"action": "accept", "content": {"day": "2026-12-31", "nights": 1}}
    thread = _answer_when_asked(alice, run.pk, **answer)
    run_execute(run_id=run.pk)
    thread.join(30)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert calls.answers[-1] == (
        "accept",
        {"day": "2026-12-31", "nights": 1, "breakfast": False},
        None,
    )
    [result] = _rows(run, "tool_result")
    assert result.message["content"] == "booked blue on 2026-12-31 for 1 nights"
    feedback = _rows(run, "feedback")
    assert any("accept by alice" in row.message["content"] for row in feedback)
    assert all(row.seq > result.seq for row in feedback), "feedback after the tool group"
    assert run.pending_questions == []
    assert replay_run(run).ok


@pytest.mark.django_db(transaction=True)
def test_a_2025_elicitation_no_one_answers_in_time_is_declined(alice, server_2025, settings):
    settings.TOOL_CALL_SECONDS = 7  # 2 s for the person, 5 s left to the server
    url, calls = server_2025
    session = _session(alice, url)
    started = time.monotonic()
    run = ask(session, alice, BOOK)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert time.monotonic() - started < 7
    assert calls.answers[-1] == ("decline", None, None)
    assert _rows(run, "tool_result")[0].message["content"] == "not booked: the person chose decline"
    texts = [row.message["content"] for row in _rows(run, "feedback")]
    assert any("no one answered question elicitation-1 of demo__book" in t for t in texts)
    assert run.pending_questions == []
    assert replay_run(run).ok


def test_a_url_question_is_accepted_only_once_its_url_is_confirmed():
    from sessions_app.services.questions import _checked_answer

    question = {"key": "k", "mode": "url", "url": "https://example.com/x", "unsupported": ""}
    with pytest.raises(InvalidInput) as refused:
        _checked_answer(question, "accept", None, False)
    assert refused.value.field == "url_confirmed"
    assert _checked_answer(question, "accept", {"ignored": "x"}, True) is None
    assert _checked_answer(question, "decline", None, False) is None
