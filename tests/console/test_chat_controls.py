"""The chat's controls: titles from the first question, rename, delete, thinking, feedback."""

from __future__ import annotations

import itertools
import re
from datetime import datetime

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from sessions_app.console import presenters
from sessions_app.models import Run, Session, SessionDeletion, SessionMessage
from sessions_app.selectors.runs import model_call_in_flight
from sessions_app.services.journal import append_records
from sessions_app.services.runs import run_ask, session_create, title_from_question
from tests.factories import ask

pytestmark = pytest.mark.django_db
KEYS = itertools.count(1)


def test_an_untitled_session_is_named_after_its_first_question(version, alice):
    session = session_create(user=alice, agent_version=version)
    ask(session, alice, "\n  What is the boiling point of water?\nAt sea level.")
    ask(session, alice, "A second question does not rename it")
    session.refresh_from_db()
    assert session.title == "What is the boiling point of water?"


def test_a_given_title_is_kept_and_long_questions_are_cut_at_a_word(session, alice):
    ask(session, alice, "hello")
    session.refresh_from_db()
    assert session.title == "Alice's chat"
    title = title_from_question("word " * 40)
    assert len(title) <= 80 and title.endswith("word…")


def test_the_creator_renames_and_a_bad_title_is_refused(client_for, session, alice, carol):
    url = reverse("console-session-rename", args=[session.pk])
    response = client_for(alice).post(url, {"title": "  Water facts  "}, follow=True)
    assert "Renamed to “Water facts”." in response.content.decode()
    session.refresh_from_db()
    assert session.title == "Water facts"

    response = client_for(alice).post(url, {"title": "x" * 201}, follow=True)
    assert "Not renamed: At most 200 characters." in response.content.decode()
    assert client_for(carol).post(url, {"title": "mine"}).status_code == 404
    session.refresh_from_db()
    assert session.title == "Water facts"


def test_delete_goes_through_the_soft_delete_service(client_for, session, alice, carol):
    url = reverse("console-session-delete", args=[session.pk])
    # A member who neither created it nor administers the space may not (as in the API).
    assert client_for(carol).post(url).status_code == 403
    response = client_for(alice).post(url, follow=True)
    assert response.redirect_chain[-1][0] == reverse("home")
    assert "Deleted “Alice&#x27;s chat”." in response.content.decode()
    assert Session.objects.get(pk=session.pk).deleted_at is not None
    assert SessionDeletion.objects.get().deleted_by == alice
    chat = reverse("console-chat", args=[session.pk])
    assert client_for(alice).get(chat).status_code == 404


def test_delete_is_refused_while_a_run_is_active(client_for, session, alice):
    run_ask(user=alice, session=session, question="still queued")
    url = reverse("console-session-delete", args=[session.pk])
    response = client_for(alice).post(url, follow=True)
    assert response.redirect_chain[-1][0] == reverse("console-chat", args=[session.pk])
    assert "Not deleted: A run of this session is still active" in response.content.decode()
    assert Session.objects.get(pk=session.pk).deleted_at is None


def _record(run, kind, message):
    with transaction.atomic():
        append_records(
            session_id=run.session_id,
            run_id=run.pk,
            records=[("main", kind, f"test-{next(KEYS)}", message, timezone.now(), None)],
        )


def test_a_model_call_is_in_flight_while_the_latest_record_awaits_the_model(session, alice):
    run = run_ask(user=alice, session=session, question="hi")
    assert not model_call_in_flight(run)  # queued: nothing is asked yet
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    run.refresh_from_db()
    assert model_call_in_flight(run)  # running, the question not journaled yet
    _record(run, "user_input", {"role": "user", "content": "hi"})
    assert model_call_in_flight(run)
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    _record(run, "assistant", {"role": "assistant", "content": None, "tool_calls": [call]})
    assert not model_call_in_flight(run)  # the tool runs
    _record(run, "tool_result", {"role": "tool", "tool_call_id": "c1", "content": "ok"})
    assert model_call_in_flight(run)
    _record(run, "assistant", {"role": "assistant", "content": "done"})
    assert not model_call_in_flight(run)


def test_the_chat_shows_feedback_as_a_notice_without_its_prefix(client_for, session, alice):
    run = ask(session, alice, "hello")
    _record(run, "feedback", {"role": "user", "content": "[feedback] tool echo failed"})
    html = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    assert '<span class="feedback-label">Note to the agent</span>' in html
    assert "tool echo failed" in html and "[feedback]" not in html
    assert SessionMessage.objects.filter(kind="feedback").count() == 1


def test_the_chat_and_the_journal_show_reasoning_folded_as_thinking(client_for, session, alice):
    run = ask(session, alice, "hello")
    thought = {"role": "assistant", "content": "answer", "reasoning_content": "NONCE-THOUGHT <b>"}
    _record(run, "assistant", thought)
    for page in ("console-chat", "console-journal"):
        html = client_for(alice).get(reverse(page, args=[session.pk])).content.decode()
        assert '<details class="thinking"' in html and "<summary>Thinking</summary>" in html
        assert "NONCE-THOUGHT &lt;b&gt;" in html
    # Records without reasoning show no empty fold.
    assert html.count('class="thinking"') == 1


def test_the_meter_never_says_zero_beside_a_fill():
    assert presenters.share_text(0, 5_000) == "0"
    assert presenters.share_text(20, 5_000) == "<1"
    assert presenters.share_text(50, 5_000) == "1"
    assert presenters.share_text(4_000, 5_000) == "80"


def test_the_panel_counts_this_run_apart_from_the_session(client_for, session, alice):
    ask(session, alice, '/tool echo {"text": "one"}')
    ask(session, alice, '/tool echo {"text": "two"}')
    html = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    # Run #2 alone: a tool call and an answer; the context's counters carry both runs.
    assert "<dd data-live-run-steps>2</dd>" in html
    assert "<dd data-live-turns>2</dd>" in html
    # No compaction yet, so nothing is counted "since the last compaction".
    assert "<dd data-live-steps>4</dd>" in html and "since the last compaction" not in html
    assert html.index('id="run-counts"') < html.index('id="session-counts"')


def test_an_approval_note_shows_its_time_as_a_readable_local_time(client_for, alice, settings):
    from sessions_app.services.approvals import run_decide
    from sessions_app.services.execution import run_execute
    from tests.factories import approval_session, make_space
    from tests.support.mcp_servers import Calls, mcp_app, serve

    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TIME_ZONE = "Europe/Berlin"
    with serve(mcp_app(Calls())) as base:
        session = approval_session(alice, make_space(admin=alice), base + "/mcp", ["demo__greet"])
        run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
        [pending] = run.pending_approvals
        run_decide(user=alice, run=run, call_id=pending["call_id"], decision="deny", note="no")
        run_execute(run_id=run.pk)
    at = Run.objects.get(pk=run.pk).approval_decisions[pending["call_id"]]["at"]
    assert re.search(r"T\d\d:\d\d:\d\d\.\d+", at), "stored as ISO 8601, microseconds and all"
    local = timezone.localtime(datetime.fromisoformat(at))
    readable = f"denied by alice at {local:%Y-%m-%d %H:%M:%S} {local.tzname()}: no"
    client = client_for(alice)
    for page in ("console-chat", "console-journal"):
        html = client.get(reverse(page, args=[session.pk])).text
        assert readable in html, page
        shown = re.sub(r"<[^>]*>", "", html)  # a <time datetime="…"> keeps its ISO 8601
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", shown), page
