"""A tool-server tool inside the engine: its whole result journaled beside the text the model
sees, `isError` as a tool error with feedback, and a cancel stopping the call mid-call."""

from __future__ import annotations

import json

from agentloom.engine import INTERRUPTED_RESULT, EngineConfig
from agentloom.engine.testing import ScriptedGateway, text_response
from agentloom.engine.testing import tool_call_response as call
from agentloom.toolservers import ServerAddress, ServerTool, list_tools
from tests.engine.helpers import make_engine


def _tools(url: str) -> list[ServerTool]:
    address = ServerAddress(url, allow_private_hosts=True)
    return [
        ServerTool(
            name=f"demo__{tool.name}",
            tool=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            address=lambda: address,
            call_seconds=10,
        )
        for tool in list_tools(address).tools
    ]


def _run(url, *replies, **options):
    gateway = ScriptedGateway(list(replies))
    engine = make_engine(gateway, tools=_tools(url), **options)
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="q")
    records = outcome.frame["context"]["records"]
    return outcome, gateway, records


def _of(records, kind):
    return [record["message"] for record in records if record["kind"] == kind]


def test_the_record_keeps_the_whole_result_and_the_model_sees_only_text(server):
    url, _calls = server
    outcome, gateway, records = _run(
        url, call(("demo__weather", {"city": "Oslo"})), text_response("ok")
    )
    assert outcome.status == "succeeded"
    result = _of(records, "tool_result")[0]
    assert result["detail"]["mcp"]["structuredContent"] == {"city": "Oslo", "celsius": 21}
    second_request = gateway.requests[1].messages
    tool_messages = [m for m in second_request if m.get("role") == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": result["tool_call_id"], "content": "Oslo: 21 C"}
    ]
    assert "structuredContent" not in json.dumps(second_request)


def test_is_error_becomes_an_error_result_and_feedback(server):
    url, _calls = server
    outcome, _gateway, records = _run(url, call(("demo__broken", {})), text_response("ok"))
    assert outcome.status == "succeeded"
    assert _of(records, "tool_result")[0]["content"] == "ERROR: the disk is full"
    feedback = [m["content"] for m in _of(records, "feedback")]
    assert any("the tool server reported an error: the disk is full" in text for text in feedback)


def test_a_cancel_during_the_call_stops_it_mid_call(server):
    url, calls = server
    calls.started.clear()
    outcome, _gateway, records = _run(
        url,
        call(("demo__slow", {"seconds": 20})),
        should_cancel=calls.started.is_set,
        config=EngineConfig(cancel_poll_seconds=0.05),
    )
    assert calls.started.is_set(), "the call reached the server"
    assert outcome.status == "cancelled"
    assert _of(records, "tool_result")[0]["content"] == INTERRUPTED_RESULT
