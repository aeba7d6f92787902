"""A server's questions: forms from schemas, the answer's check, and the client in both eras."""

from __future__ import annotations

import pytest

from agentloom.toolservers import (
    AnswerError,
    ServerAddress,
    ToolServerError,
    call_tool,
    checked_content,
    question_of,
)
from tests.support.mcp_servers import BOOK_SCHEMA, BOOK_STATE, Calls, mcp_app, serve

FORM = question_of("day", {"mode": "form", "message": "When?", "requestedSchema": BOOK_SCHEMA})


def test_a_flat_schema_becomes_fields_and_anything_else_is_unsupported():
    assert [(f["name"], f["type"], f["required"]) for f in FORM["fields"]] == [
        ("day", "string", True),
        ("nights", "integer", True),
        ("breakfast", "boolean", False),
        ("size", "enum", False),
    ]
    nested = {"type": "object", "properties": {"address": {"type": "object"}}}
    assert (
        "not a string, number or boolean"
        in question_of("k", {"message": "m", "requestedSchema": nested})["unsupported"]
    )
    url = question_of("k", {"mode": "url", "message": "m", "url": "javascript:alert(1)"})
    assert url["unsupported"] and url["url"] == "javascript:alert(1)"
    shown = question_of("k", {"mode": "url", "message": "m", "url": "https://example.com/a?b=1"})
    assert shown["url"] == "https://example.com/a?b=1" and not shown["unsupported"]


def test_an_answer_is_typed_by_its_fields_or_refused_naming_the_field():
    content = {"day": "2026-12-24", "nights": "2", "breakfast": "true", "size": "single"}
    assert checked_content(FORM, content) == {
        "day": "2026-12-24",
        "nights": 2,
        "breakfast": True,
        "size": "single",
    }
    for wrong, field in (
        ({"day": "d"}, "content.nights"),
        ({"day": "d", "nights": "two"}, "content.nights"),
        ({"day": "d", "nights": 1, "size": "suite"}, "content.size"),
        ({"day": "d", "nights": 1, "extra": "x"}, "content"),
        ({"day": 5, "nights": 1}, "content.day"),
    ):
        with pytest.raises(AnswerError) as refused:
            checked_content(FORM, wrong)
        assert refused.value.field == field


@pytest.fixture(scope="module", params=["2026", "2025"])
def asking_server(request):
    calls = Calls()
    with serve(mcp_app(calls, era=request.param, asking=True)) as base:
        yield request.param, ServerAddress(base + "/mcp", allow_private_hosts=True), calls


def test_a_call_that_may_ask_gets_the_persons_answers_in_either_era(asking_server):
    era, address, calls = asking_server
    content = {"day": "2026-12-24", "nights": 2, "breakfast": False}
    asked = []

    def ask(questions, seconds):
        asked.append((questions, seconds))
        return {questions[0]["key"]: {"action": "accept", "content": content}}

    outcome = call_tool(
        address, "book", {"room": "blue"}, expected_schema=None, timeout=20, may_ask=True, ask=ask
    )
    if era == "2026":
        assert not asked, "a 2026-07-28 server asks in its result, not during the call"
        [question] = outcome.questions
        assert question["key"] == "day" and outcome.request_state
        outcome = call_tool(
            address,
            "book",
            {"room": "blue"},
            expected_schema=None,
            timeout=20,
            may_ask=True,
            input_responses={"day": {"action": "accept", "content": content}},
            request_state=outcome.request_state,
        )
        assert calls.answers[-1] == ("accept", content, BOOK_STATE)
    else:
        [(questions, seconds)] = asked
        assert questions[0]["message"] == "Which day for <b>blue</b>?"
        assert 0 < seconds <= 15, "the call's time less the margin left to the server"
    assert not outcome.input_required
    assert outcome.result["content"][0]["text"] == "booked blue on 2026-12-24 for 2 nights"


def test_a_call_that_may_not_ask_declares_no_elicitation(asking_server):
    era, address, calls = asking_server
    if era == "2026":
        outcome = call_tool(address, "book", {"room": "red"}, expected_schema=None, timeout=20)
        assert calls.declared[-1] is False
        assert outcome.result["isError"] is True
    else:
        # The SDK server refuses to elicit from a client that declared no such capability.
        with pytest.raises(ToolServerError, match="Elicitation not supported"):
            call_tool(address, "book", {"room": "red"}, expected_schema=None, timeout=20)


def test_a_server_tool_no_person_can_answer_declares_no_elicitation(asking_server):
    from agentloom.engine import ToolError
    from agentloom.toolservers import ServerTool, list_tools

    era, address, calls = asking_server
    [listed] = [tool for tool in list_tools(address).tools if tool.name == "book"]
    tool = ServerTool(
        name="demo__book",
        tool="book",
        description="",
        input_schema=listed.input_schema,
        address=lambda: address,
        call_seconds=20,
    )
    if era == "2026":
        output = tool.run({"room": "red"})  # a context without `ask`: a sub-agent's, a replay's
        assert calls.declared[-1] is False
        assert output.error and "no one to ask" in output.text
    else:
        with pytest.raises(ToolError, match="Elicitation not supported"):
            tool.run({"room": "red"})
