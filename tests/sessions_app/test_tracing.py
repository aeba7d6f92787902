"""Traces of a run in the GenAI conventions, against an in-memory exporter: their spans, parents
and attributes, and no content unless asked for."""

from __future__ import annotations

import itertools

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloom import tracing
from sessions_app.models import Run
from sessions_app.services.execution import run_execute
from tests.factories import ask

pytestmark = pytest.mark.django_db

NONCE = "NONCE-trace-7d21"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.configure(exporter=exporter)
    yield exporter
    tracing.unconfigure()


def _traced_run(session, alice, question=f'/tool echo {{"text": "{NONCE}"}} {NONCE}'):
    with tracing.span_from("request", {}):
        return ask(session, alice, question)


def test_a_run_is_a_tree_of_agent_chat_and_tool_spans(alice, gateway, make_demo_session, spans):
    session = make_demo_session()
    run = _traced_run(session, alice)
    assert run.status == Run.Status.SUCCEEDED
    found = {span.name: span for span in spans.get_finished_spans()}
    agent = found["invoke_agent Demo"]
    chats = [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]
    tool = found["execute_tool echo"]
    assert agent.parent.span_id == found["request"].context.span_id
    assert len(chats) == 2
    assert {span.parent.span_id for span in [*chats, tool]} == {agent.context.span_id}
    assert agent.attributes["gen_ai.conversation.id"] == str(session.pk)
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    chat = chats[0].attributes
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.provider.name"] == "local"
    assert chat["gen_ai.conversation.id"] == str(session.pk)
    assert tool.attributes["gen_ai.tool.name"] == "echo"


def test_no_content_reaches_a_span_unless_asked(
    alice, gateway, make_demo_session, spans, monkeypatch
):
    _traced_run(make_demo_session(), alice)
    text = repr([(span.name, dict(span.attributes)) for span in spans.get_finished_spans()])
    assert NONCE not in text
    spans.clear()
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    _traced_run(make_demo_session(), alice)
    answers = [
        span.attributes.get("gen_ai.output.messages", "") for span in spans.get_finished_spans()
    ]
    assert any(NONCE in answer for answer in answers)


def test_a_key_in_an_answer_is_redacted_even_when_content_is_captured(
    alice, gateway, make_demo_session, spans, monkeypatch
):
    from tests.sessions_app.conftest import SECRET

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    ask(make_demo_session(), alice, "[leak-key] tell me")
    text = repr([dict(span.attributes) for span in spans.get_finished_spans()])
    assert "gen_ai.output.messages" in text and SECRET not in text


def test_tracing_off_makes_no_span(alice, gateway, make_demo_session):
    assert tracing.tracer() is None
    with tracing.span_from("request", {}) as span:
        assert span is None


def test_a_runs_pages_show_its_trace_id_when_tracing_is_on(
    alice, gateway, make_demo_session, spans, client
):
    session = make_demo_session()
    run = Run.objects.get(pk=_traced_run(session, alice).pk)
    (agent,) = [span for span in spans.get_finished_spans() if span.name.startswith("invoke_")]
    assert run.trace_id == format(agent.context.trace_id, "032x")
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/context/").content.decode()
    assert f"<code>{run.trace_id}</code>" in page
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(alice)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["trace_id"] == run.trace_id
    # Off: no trace, nothing written.
    tracing.unconfigure()
    untraced = ask(session, alice, "NONCE-untraced")
    assert Run.objects.get(pk=untraced.pk).trace_id == ""


def test_a_chat_span_names_the_providers_completion_id(alice, make_demo_session, spans):
    from dataclasses import replace

    from agentloom.engine import LocalDemoGateway
    from context_app import engine_adapter

    class WithIds(LocalDemoGateway):
        def complete(self, request, stream=None):
            return replace(super().complete(request), id="chatcmpl-NONCE-SPAN")

    engine_adapter.set_gateway_factory(lambda version, connection: WithIds())
    try:
        _traced_run(make_demo_session(), alice)
    finally:
        engine_adapter.set_gateway_factory(None)
    chats = [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]
    assert chats and {span.attributes["gen_ai.response.id"] for span in chats} == {
        "chatcmpl-NONCE-SPAN"
    }


@pytest.mark.real_worker
@pytest.mark.django_db(transaction=True)
def test_a_trace_goes_from_the_request_through_the_task_to_the_engine(
    alice, gateway, make_demo_session, spans, monkeypatch
):
    """The request that asks queues the task with its trace context in the task's headers; the
    worker's task span continues that trace, and the run's `invoke_agent` span is its child."""
    from celery import current_app
    from celery.utils.nodenames import gethostname
    from celery.worker.request import Request
    from kombu import Message, Producer
    from kombu.serialization import dumps
    from rest_framework.test import APIClient

    published = []
    monkeypatch.setattr(
        Producer, "publish", lambda self, body, **options: published.append((body, options))
    )
    tracing.instrument_frameworks()
    try:
        session = make_demo_session()
        api = APIClient()
        api.force_authenticate(alice)
        answer = api.post(f"/api/v1/sessions/{session.pk}/runs", {"question": "hi"}, "json")
        assert answer.status_code == 202
        ((body, options),) = published
        headers = options["headers"]
        assert headers["task"] == "sessions_app.tasks.execute_run"
        assert headers["traceparent"].startswith("00-")
        # As the worker does: the message as the broker delivers it, executed in the task's trace.
        content_type, encoding, data = dumps(body, serializer=options.get("serializer"))
        message = Message(
            body=data,
            content_type=content_type,
            content_encoding=encoding,
            headers=headers,
            properties={"correlation_id": headers["id"]},
            delivery_info={"routing_key": options.get("routing_key"), "exchange": ""},
        )
        task = current_app.tasks["sessions_app.tasks.execute_run"]
        Request(message, app=current_app, task=task, hostname=gethostname()).execute()
    finally:
        tracing.uninstrument_frameworks()
    assert Run.objects.get(pk=answer.json()["id"]).status == Run.Status.SUCCEEDED
    finished = spans.get_finished_spans()
    by_id = {span.context.span_id: span for span in finished}
    (request,) = [span for span in finished if span.name.startswith("POST")]
    (agent,) = [span for span in finished if span.name.startswith("invoke_agent")]
    (worker,) = [span for span in finished if span.name.startswith("run/")]
    assert worker.name == "run/sessions_app.tasks.execute_run"
    assert agent.parent.span_id == worker.context.span_id
    ancestors, span = [], agent
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        ancestors.append(span)
    assert request in ancestors and ancestors[-1] is request
    assert len({span.context.trace_id for span in finished}) == 1
    assert headers["traceparent"].split("-")[1] == format(request.context.trace_id, "032x")


def _children(spans, parent):
    return [span for span in spans if span.parent and span.parent.span_id == parent.context.span_id]


def test_a_sub_agents_invoke_agent_is_a_child_of_its_delegation_tool_span(
    alice, gateway, make_demo_session, spans
):
    """The conventions' agent invoked as a tool: the parent's `execute_tool delegate_helper`
    span holds the sub-agent's `invoke_agent helper`, which holds the sub-agent's own calls."""
    session = make_demo_session(
        sub_agents=[
            {"name": "helper", "description": "echoes", "system_prompt": "Echo.", "tools": ["echo"]}
        ]
    )
    run = ask(
        session, alice, '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"kid\\"}"}'
    )
    assert run.status == Run.Status.SUCCEEDED, run.error
    finished = spans.get_finished_spans()
    (main,) = [span for span in finished if span.name == "invoke_agent Demo"]
    (delegation,) = [span for span in finished if span.name == "execute_tool delegate_helper"]
    (helper,) = [span for span in finished if span.name == "invoke_agent helper"]
    (echo,) = [span for span in finished if span.name == "execute_tool echo"]
    assert delegation.parent.span_id == main.context.span_id
    assert helper.parent.span_id == delegation.context.span_id
    assert helper.attributes["gen_ai.agent.name"] == "helper"
    assert helper.attributes["gen_ai.conversation.id"] == str(session.pk)
    assert helper.attributes["agentloom.instance"] == f"{run.number}.1"
    assert helper.attributes["agentloom.instance.status"] == "succeeded"
    below = _children(finished, helper)
    assert echo in below and len([s for s in below if s.name.startswith("chat ")]) == 2
    assert len([s for s in _children(finished, main) if s.name.startswith("chat ")]) == 2
    assert delegation.start_time <= helper.start_time <= helper.end_time <= delegation.end_time


def test_a_compaction_span_lasts_its_work_and_holds_its_summary_call(
    alice, gateway, make_demo_session, spans
):
    from tests.sessions_app.conftest import long_question

    session = make_demo_session(context_window=9_000)
    for n in range(6):
        ask(session, alice, long_question(n))
    finished = spans.get_finished_spans()
    summaries = [
        span
        for span in finished
        if span.name == "agentloom.compaction"
        and span.attributes.get("agentloom.compaction.stage") == "summary"
    ]
    assert summaries
    compaction = summaries[0]
    assert compaction.attributes["agentloom.compaction.outcome"]
    assert compaction.attributes["agentloom.compaction.tokens_before"] > 0
    assert compaction.end_time > compaction.start_time
    chats = [span for span in _children(finished, compaction) if span.name.startswith("chat ")]
    assert chats and {span.attributes["agentloom.call.purpose"] for span in chats} == {"compaction"}
    assert all(compaction.start_time <= chat.start_time for chat in chats)
    assert all(chat.end_time <= compaction.end_time for chat in chats)
    agents = {span.context.span_id for span in finished if span.name.startswith("invoke_agent")}
    assert compaction.parent.span_id in agents

    # Each stage is a span of its own under its attempt, in order, as long as it lasted: a
    # summary stage holds the attempt's summary calls.
    for attempt in summaries:
        stages = sorted(
            (s for s in _children(finished, attempt) if s.name.startswith("agentloom.compaction.")),
            key=lambda s: s.start_time,
        )
        names = [s.attributes["agentloom.compaction.stage"] for s in stages]
        expected = attempt.attributes.get("agentloom.compaction.stages") or ["summary"]
        assert names == list(expected), names
        assert all(s.parent.span_id == attempt.context.span_id for s in stages)
        assert all(
            attempt.start_time <= s.start_time <= s.end_time <= attempt.end_time for s in stages
        )
        assert all(a.end_time <= b.start_time for a, b in itertools.pairwise(stages))
        summary = stages[-1]
        calls = [s for s in _children(finished, attempt) if s.name.startswith("chat ")]
        assert calls and all(summary.start_time <= c.start_time for c in calls)
        assert summary.attributes["agentloom.compaction.calls"] == len(calls)


def test_an_error_ends_a_span_with_its_kind_never_its_message(alice, make_demo_session, spans):
    """An exception's message may quote content: the span keeps its class name only."""
    from opentelemetry.trace import StatusCode

    from agentloom.engine import LocalDemoGateway
    from context_app import engine_adapter

    class Broken(LocalDemoGateway):
        def complete(self, request, stream=None):
            raise RuntimeError(f"the model choked on {NONCE}")

    engine_adapter.set_gateway_factory(lambda version, connection: Broken())
    try:
        run = _traced_run(make_demo_session(), alice)
    finally:
        engine_adapter.set_gateway_factory(None)
    assert run.status == Run.Status.FAILED
    finished = spans.get_finished_spans()
    (agent,) = [span for span in finished if span.name.startswith("invoke_agent")]
    assert agent.attributes["error.type"] == "RuntimeError"
    assert agent.status.status_code is StatusCode.ERROR
    seen = [
        (span.name, dict(span.attributes), span.status.description, span.events)
        for span in finished
    ]
    assert NONCE not in repr(seen) + repr([dict(e.attributes) for s in finished for e in s.events])


def test_a_run_ended_outside_its_engine_is_a_span_of_what_ended_it(
    alice, make_demo_session, spans, django_capture_on_commit_callbacks
):
    from sessions_app.services.runs import run_ask, run_cancel

    session = make_demo_session()
    queued = run_ask(user=alice, session=session, question=NONCE)
    with tracing.span_from("request", {}), django_capture_on_commit_callbacks(execute=True):
        run_cancel(user=alice, run=queued)
    finished = spans.get_finished_spans()
    (request,) = [span for span in finished if span.name == "request"]
    (end,) = [span for span in finished if span.name == "agentloom.run.end"]
    assert end.parent.span_id == request.context.span_id
    assert end.attributes["agentloom.run.status"] == "cancelled"
    assert end.attributes["agentloom.run.id"] == queued.pk
    assert end.attributes["gen_ai.conversation.id"] == str(session.pk)
    assert NONCE not in repr([dict(span.attributes) for span in finished])


def _tool_spans(spans):
    return [span for span in spans.get_finished_spans() if span.name.startswith("execute_tool")]


def test_a_call_that_never_ran_is_a_span_saying_why_without_its_content(
    alice, gateway, make_demo_session, spans
):
    """An unknown tool (its name is the model's: `other`) and arguments its schema refuses; a
    cancel seen before the calls of a response ran. Each is a failed `execute_tool` span under
    the run's, its call id and why, never what the model wrote."""
    from opentelemetry.trace import StatusCode

    from sessions_app.services.runs import run_ask, run_cancel

    session = make_demo_session()
    run = _traced_run(session, alice, f'/tool {NONCE} {{}}\n/tool echo {{"text": 5}}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    unknown, invalid = _tool_spans(spans)
    (agent,) = [span for span in spans.get_finished_spans() if span.name.startswith("invoke_")]
    assert (unknown.name, invalid.name) == ("execute_tool other", "execute_tool echo")
    assert unknown.attributes["error.type"] == "tool_unavailable"
    assert invalid.attributes["error.type"] == "invalid_arguments"
    for span in (unknown, invalid):
        assert span.parent.span_id == agent.context.span_id
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["gen_ai.tool.call.id"].startswith(f"r{run.number}-")
    assert NONCE not in repr([(s.name, dict(s.attributes)) for s in spans.get_finished_spans()])

    spans.clear()
    queued = run_ask(user=alice, session=session, question='/tool echo {"text": "a"}')
    gateway.during_call.append(lambda: run_cancel(user=alice, run=Run.objects.get(pk=queued.pk)))
    run_execute(run_id=queued.pk)
    (cancelled,) = _tool_spans(spans)
    assert cancelled.attributes["error.type"] == "cancelled"
    assert cancelled.attributes["gen_ai.tool.name"] == "echo"
