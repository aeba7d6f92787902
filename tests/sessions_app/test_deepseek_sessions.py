"""Sessions on a DeepSeek connection in thinking mode, against the DeepSeek double."""

from __future__ import annotations

import pytest

from sessions_app.models import Run, SessionMessage
from sessions_app.selectors.context import run_context
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_resume
from tests.factories import ask
from tests.support.checkpoint_fixtures import load_session
from tests.support.deepseek_double import DeepSeekDouble

pytestmark = pytest.mark.django_db


@pytest.fixture
def deepseek(settings):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    with DeepSeekDouble() as double:
        yield double


@pytest.fixture
def deepseek_session(make_demo_session, deepseek):
    from models_app.models import ModelConnection

    session = make_demo_session(provider="deepseek")
    ModelConnection.objects.filter(pk=session.agent_version.model_connection_id).update(
        base_url=deepseek.base_url
    )
    return session


def test_two_tool_turns_and_a_plain_question_succeed_end_to_end(alice, deepseek, deepseek_session):
    first = ask(deepseek_session, alice, '/tool echo {"text": "NONCE-1"}')
    second = ask(deepseek_session, alice, '/tool calculator {"expression": "6*7"}')
    third = ask(deepseek_session, alice, "What did the tools say?")
    assert [r.status for r in (first, second, third)] == ["succeeded"] * 3, third.error
    assert all(not request.violations for request in deepseek.requests)
    last = deepseek.chat_bodies()[-1]
    assert "thinking" not in last  # thinking stayed on
    calls = [m for m in last["messages"] if m.get("tool_calls")]
    assert len(calls) == 2 and all(m["reasoning_content"] for m in calls)
    # The journal keeps the reasoning encrypted with the message, and replay compares it.
    row = SessionMessage.objects.filter(run=first, kind="assistant").first()
    assert row.message["reasoning_content"].startswith("thinking NONCE-R")
    assert replay_run(third).ok
    # Replay compares the reasoning too: a journal whose reasoning was altered differs.
    SessionMessage.objects.filter(pk=row.pk).update(
        message={**row.message, "reasoning_content": "NONCE-ALTERED"}
    )
    report = replay_run(first)
    assert not report.ok and any("NONCE-ALTERED" in d for d in report.differences)


def test_the_meter_measures_what_the_provider_is_sent(
    alice, deepseek, deepseek_session, monkeypatch
):
    from sessions_app.selectors import context as context_selectors

    deepseek.reasoning_padding = 20_000
    run = ask(deepseek_session, alice, "plain question")
    context = run_context(run)
    # The answer keeps its reasoning, which is not sent (no tool call in its span).
    assert "reasoning_content" in context["messages"][-1]
    monkeypatch.setattr(
        context_selectors, "sent_messages", lambda version, messages, tools: (messages, tools)
    )
    assert run_context(run)["estimate"] > context["estimate"]


def test_a_session_made_before_reasoning_was_kept_keeps_answering(alice, deepseek):
    session = load_session("rendering_v1_deepseek", user=alice, base_url=deepseek.base_url)
    run = ask(session, alice, '/tool echo {"text": "NONCE-AFTER"}')
    assert run.status == "succeeded", run.error
    assert "NONCE-AFTER" in run.answer
    assert all(not request.violations for request in deepseek.requests)
    # Its old tool-call spans have no reasoning to pass back: sent with thinking disabled.
    bodies = deepseek.chat_bodies()
    assert any(body.get("thinking") == {"type": "disabled"} for body in bodies)

    # Its last run, left failed by the code before this change, resumes on the double too.
    failed = Run.objects.get(session=session, status="failed")
    run_resume(user=alice, run=failed)
    run_execute(run_id=failed.pk)
    failed.refresh_from_db()
    assert failed.status == "succeeded", failed.error
    assert all(not request.violations for request in deepseek.requests)
