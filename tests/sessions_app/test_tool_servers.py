"""Tool-server tools in runs: chosen, frozen at publish, called, journaled whole, shown as text.

The server is a real MCP server built with the SDK on 127.0.0.1; the model is the demo model,
which calls `/tool NAME {json}` from the question.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from django.db import connection

from agentloom.engine import INTERRUPTED_RESULT, UNKNOWN_RESULT
from context_app.engine_adapter import input_check, offered_tools
from context_app.services.agents import agent_create, agent_publish, agent_update
from models_app.services.tool_servers import (
    tool_server_create,
    tool_server_refresh,
    tool_server_update,
)
from sessions_app.models import Run, SessionMessage
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    session_create,
    sweep_expired_leases,
)
from tests.factories import ask, make_connection, make_space
from tests.support.mcp_servers import BIG_RESULT_CHARS, PNG_BYTES, Calls, mcp_app, serve

pytestmark = pytest.mark.django_db

HEADER_SECRET = "tok-NONCE-h3ad3r-0123456789"
TOOLS = ["demo__greet", "demo__weather", "demo__picture", "demo__slow", "demo__broken", "demo__big"]


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
def space(alice):
    return make_space(admin=alice)


@pytest.fixture
def tool_server(alice, space, mcp_server):
    url, _calls = mcp_server
    server = tool_server_create(
        user=alice,
        space=space,
        name="demo",
        url=url,
        headers={"Authorization": f"Bearer {HEADER_SECRET}"},
    )
    return tool_server_refresh(user=alice, server=server)


def _session(alice, space, tools, *, context_window=200_000):
    connection = make_connection(
        space, context_window=context_window, max_output_tokens=1_000, safety_margin_tokens=200
    )
    agent = agent_create(
        user=alice,
        space=space,
        name="Tools",
        system_prompt="You use tools.",
        model_connection=connection.pk,
        tools=tools,
    )
    version = agent_publish(user=alice, agent=agent)
    return session_create(user=alice, agent_version=version), agent


def _result(run: Run) -> SessionMessage:
    return SessionMessage.objects.get(run=run, kind="tool_result")


def _feedback(run: Run) -> list[str]:
    return [
        row.message["content"] for row in SessionMessage.objects.filter(run=run, kind="feedback")
    ]


def test_publishing_freezes_each_chosen_tool(alice, space, tool_server):
    session, _agent = _session(alice, space, ["echo", "demo__greet"])
    frozen = session.agent_version.snapshot["server_tools"]
    assert frozen == [
        {
            "name": "demo__greet",
            "server_id": tool_server.pk,
            "server": "demo",
            "tool": "greet",
            "description": "Return a greeting for a name.",
            "input_schema": tool_server.tools[0]["input_schema"],
            "approval": False,
        }
    ]


def test_a_text_tool_is_journaled_whole_and_shown_as_its_text(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    message = _result(run).message
    assert message["content"] == "hello Ada"
    mcp = message["detail"]["mcp"]
    assert mcp["content"] == [{"type": "text", "text": "hello Ada"}]
    assert mcp["isError"] is False and mcp["protocol_version"] == "2026-07-28"
    shown = [m for m in frame_of(run).messages if m.get("role") == "tool"]
    assert shown == [
        {"role": "tool", "tool_call_id": message["tool_call_id"], "content": "hello Ada"}
    ]
    assert "hello Ada" in run.answer
    assert replay_run(run).ok


def test_structured_content_and_meta_are_journaled(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    run = ask(session, alice, '/tool demo__weather {"city": "Oslo"}')
    mcp = _result(run).message["detail"]["mcp"]
    assert mcp["structuredContent"] == {"city": "Oslo", "celsius": 21}
    assert mcp["_meta"]["source"] == "test"
    assert _result(run).message["content"] == "Oslo: 21 C"


def test_an_image_block_is_kept_and_the_model_sees_one_line(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    run = ask(session, alice, "/tool demo__picture {}")
    message = _result(run).message
    assert message["detail"]["mcp"]["content"][1]["mimeType"] == "image/png"
    assert message["content"] == (
        f"a picture follows\n[image block: image/png, {len(PNG_BYTES)} bytes]"
    )
    assert "iVBOR" not in json.dumps(frame_of(run).messages)


def test_is_error_is_a_tool_error_with_feedback_and_the_result_kept(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    run = ask(session, alice, "/tool demo__broken {}")
    assert run.status == Run.Status.SUCCEEDED, run.error
    message = _result(run).message
    assert message["content"] == "ERROR: the disk is full"
    assert message["detail"]["mcp"]["isError"] is True
    assert any("demo__broken" in text and "the disk is full" in text for text in _feedback(run))


def test_a_40000_character_result_is_excerpted_and_read_back(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS, context_window=16_000)
    run = ask(session, alice, "/tool demo__big {}")
    assert run.status == Run.Status.SUCCEEDED, run.error
    message = _result(run).message
    assert len(message["content"]) == BIG_RESULT_CHARS, "the journal keeps it whole"
    shown = next(m for m in frame_of(run).messages if m.get("role") == "tool")["content"]
    assert len(shown) < 10_000 and "read_record(" in shown
    ref = shown.split('read_record(ref="', 1)[1].split('"', 1)[0]
    again = ask(session, alice, f'/tool read_record {{"ref": "{ref}", "offset": 39000}}')
    assert again.status == Run.Status.SUCCEEDED, again.error
    piece = _result(again).message["content"]
    assert message["content"][39_000:39_100] in piece


def test_schema_drift_between_publish_and_call_is_a_tool_error(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    # The server now lists another schema for the tool than the one this version froze.
    other_calls = Calls()
    with serve(mcp_app(other_calls, drift=True)) as base:
        tool_server_update(user=alice, server=tool_server, url=base + "/mcp")
        run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    content = _result(run).message["content"]
    assert content.startswith("ERROR: demo__greet:") and "publish the agent again" in content
    assert any("demo__greet" in text for text in _feedback(run))
    assert other_calls.calls == [], "the drifted tool was never called"


def test_an_unreachable_server_is_reported_as_a_tool_error(alice, space, tool_server):
    session, _agent = _session(alice, space, TOOLS)
    tool_server_update(user=alice, server=tool_server, url="http://127.0.0.1:9/mcp")
    run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    content = _result(run).message["content"]
    assert content == "ERROR: demo__greet: The tool server could not be reached."


def test_header_values_are_never_journaled(alice, space, tool_server, mcp_server):
    _url, calls = mcp_server
    session, _agent = _session(alice, space, TOOLS)
    question = f'/tool demo__greet {{"who": "{HEADER_SECRET}"}}'
    run = ask(session, alice, question)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert calls.headers[-1]["authorization"] == f"Bearer {HEADER_SECRET}", "it was sent"
    rows = [json.dumps(row.message) for row in SessionMessage.objects.filter(run=run)]
    assert rows and not any(HEADER_SECRET in row for row in rows)
    assert any("[redacted]" in row for row in rows)
    assert HEADER_SECRET not in json.dumps(frame_of(run).messages)
    run.refresh_from_db()
    assert HEADER_SECRET not in run.question + (run.answer or "")


# Another thread cancels while the worker's thread waits on the server: two connections at once,
# which the in-memory SQLite of the other leg cannot serve. The engine-level test of the same
# stop runs everywhere (tests/toolservers/test_server_tool.py).
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_call_cancelled_mid_call_is_stopped_and_never_presumed_done(
    alice, space, tool_server, mcp_server
):
    _url, calls = mcp_server
    session, _agent = _session(alice, space, TOOLS)
    calls.started.clear()
    run = run_ask(user=alice, session=session, question='/tool demo__slow {"seconds": 20}')

    def cancel_once_called():
        try:
            assert calls.started.wait(15)
            run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel_once_called)
    canceller.start()
    run_execute(run_id=run.pk)
    canceller.join(20)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert _result(run).message["content"] == INTERRUPTED_RESULT


def test_a_later_version_without_the_tool_cannot_call_it(alice, space, tool_server, mcp_server):
    _url, calls = mcp_server
    session, agent = _session(alice, space, TOOLS)
    first = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert first.status == Run.Status.SUCCEEDED
    agent_update(user=alice, agent=agent, tools=["echo"])
    later = session_create(user=alice, agent_version=agent_publish(user=alice, agent=agent))
    before = len(calls.calls)
    # History of this session shows the tool; the new version does not have it.
    run = ask(later, alice, '/tool demo__greet {"who": "Bob"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "not available" in _result(run).message["content"]
    assert any("unavailable tool 'demo__greet'" in text for text in _feedback(run))
    assert len(calls.calls) == before
    # The first session's version keeps its own frozen tools.
    again = ask(session, alice, '/tool demo__greet {"who": "Cy"}')
    assert _result(again).message["content"] == "hello Cy"
    assert len(calls.calls) == before + 1


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_during_a_call_leaves_it_unknown_and_never_runs_it_again(
    redis_url, alice, mcp_server, tmp_path
):
    from tests.sessions_app.test_worker import _send, _start_worker, _wait

    _url, calls = mcp_server
    space = make_space(admin=alice)
    tool_server_refresh(
        user=alice,
        server=tool_server_create(user=alice, space=space, name="demo", url=_url),
    )
    session, _agent = _session(alice, space, TOOLS)
    calls.started.clear()
    slow_calls = len([call for call in calls.calls if call[0] == "slow"])
    run = run_ask(user=alice, session=session, question='/tool demo__slow {"seconds": 30}')
    worker = _start_worker(
        redis_url, tmp_path, ALLOW_PRIVATE_TOOL_HOSTS="true", TOOL_CALL_SECONDS="60"
    )
    try:
        _send(redis_url, run.pk)
        assert calls.started.wait(60), "the worker called the tool"
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    time.sleep(3.5)  # one lease (3 s): the killed worker renews nothing more
    assert sweep_expired_leases() == [run.pk]
    failed = Run.objects.get(pk=run.pk)
    assert (failed.status, failed.error) == ("failed", "worker_lost")

    run_resume(user=alice, run=failed)
    run_execute(run_id=run.pk)
    done = _wait(lambda: Run.objects.get(pk=run.pk), 5, "the resumed run")
    assert done.status == Run.Status.SUCCEEDED, done.error
    results = [row.message for row in SessionMessage.objects.filter(run=run, kind="tool_result")]
    assert [message["content"] for message in results] == [UNKNOWN_RESULT]
    assert len([call for call in calls.calls if call[0] == "slow"]) == slow_calls + 1, (
        "the call with real effects was never run again"
    )


def test_frozen_schemas_are_offered_to_the_model_and_counted(alice, space, tool_server, gateway):
    session, _agent = _session(alice, space, ["echo", "demo__greet"])
    snapshot = session.agent_version.snapshot
    offered = {tool["function"]["name"]: tool["function"] for tool in offered_tools(snapshot)}
    assert offered["demo__greet"]["parameters"] == snapshot["server_tools"][0]["input_schema"]
    without = dict(snapshot, tools=["echo"], server_tools=[])
    question = "how large is the room?"
    assert (
        input_check(session.agent_version, question).limit
        < input_check(SimpleNamespace(snapshot=without), question).limit
    ), "the server tool's schema takes room like a built-in one"
    run = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    sent = {tool["function"]["name"] for tool in gateway.action_requests()[0].tools}
    assert sent >= {"echo", "demo__greet"}


@pytest.fixture
def small_pool(monkeypatch):
    """A worker's pool of 3 connections that gives up after 2 s, and its 2 database slots."""
    from sessions_app.services import execution
    from sessions_app.services.slots import DatabaseSlots

    options = connection.settings_dict["OPTIONS"]
    if not options.get("pool"):
        pytest.skip("needs the connection pool (DATABASE_POOL_SIZE above 0)")
    pool = options["pool"]
    connection.close()
    connection.close_pool()
    options["pool"] = {**pool, "max_size": 3, "timeout": 2}
    monkeypatch.setattr(execution, "database_slots", DatabaseSlots(2))
    yield
    connection.close()
    connection.close_pool()
    options["pool"] = pool


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_more_slow_tool_calls_than_connections_all_start_and_none_fails(
    alice, space, tool_server, mcp_server, small_pool
):
    """Four runs call a 4 s tool at once in a worker with 2 slots and 3 connections: no run
    holds a connection while its call waits on the server."""
    _url, calls = mcp_server
    sessions = [_session(alice, space, TOOLS)[0] for _ in range(4)]
    runs = [
        run_ask(user=alice, session=session, question='/tool demo__slow {"seconds": 4}')
        for session in sessions
    ]
    connection.close()
    before = len([call for call in calls.calls if call[0] == "slow"])

    def execute(run_id: int) -> None:
        try:
            run_execute(run_id=run_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=execute, args=(run.pk,)) for run in runs]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        while len([call for call in calls.calls if call[0] == "slow"]) < before + 4:
            assert time.monotonic() - started < 3.5, "every call started while the others wait"
            time.sleep(0.05)
    finally:
        for thread in threads:
            thread.join(30)
    for run in Run.objects.filter(pk__in=[run.pk for run in runs]):
        assert run.status == Run.Status.SUCCEEDED, run.error
        assert _result(run).message["content"] == "done waiting"
