import json
from datetime import UTC, datetime

import pytest

from agentloom.engine import (
    BUILTIN_TOOL_NAMES,
    ConfigurationError,
    SubAgent,
    Tool,
    ToolError,
    ToolOutput,
    builtin_tools,
)
from agentloom.engine._tools import argument_errors, build_toolset, evaluate_arithmetic
from tests.support.openai_contract import assert_valid_request


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("-(2 ** 10) // 3", -342),
        ("7 % 3", 1),
        ("1 / 4", 0.25),
        ("-+-5", 5),
        ("2 ** -1", 0.5),
        ("10 ** 1000 // 10 ** 999", 10),
        ("1.5e3 - 0.5", 1499.5),
    ],
)
def test_calculator_does_arithmetic(expression, value):
    assert evaluate_arithmetic(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "x + 1",
        "abs(-1)",
        "(1).real",
        "__import__('os').system('true')",
        "'a' * 3",
        "True + 1",
        "[1, 2]",
        "1 < 2",
        "1 if 1 else 2",
        "lambda: 1",
        "1 << 8",
        "2 ** 100000",
        "(10 ** 1000) ** 1000",
        "9 ** 999 * 9 ** 999 * 9 ** 999 * 9 ** 999",
        "1e308 * 10",
        "(-8) ** 0.5",
        "1 / 0",
        "5 % 0",
        "1 +",
        "-" * 999 + "1",
        "1" * 1001,
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression):
    with pytest.raises(ToolError):
        evaluate_arithmetic(expression)


def test_builtins_have_valid_openai_schemas_and_the_published_names():
    tools = builtin_tools()

    assert tuple(tools) == BUILTIN_TOOL_NAMES
    assert_valid_request(
        {
            "model": "x",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [tool.schema() for tool in tools.values()],
        }
    )


def test_builtin_tools_do_what_they_say():
    slept = []
    moment = datetime(2026, 10, 9, 8, 30, tzinfo=UTC)
    tools = builtin_tools(clock=lambda: moment, sleeper=slept.append)

    assert tools["echo"].run({"text": "hi"}) == "hi"
    assert tools["current_time"].run({}) == "2026-10-09T08:30:00+00:00"
    assert tools["calculator"].run({"expression": "6*7"}) == "42"
    assert tools["sleep"].run({"seconds": 1.5}) == "slept 1.5 seconds"
    assert slept == [1.5]
    assert len(tools["big_output"].run({"chars": 200_000})) == 200_000
    with pytest.raises(ToolError, match="boom"):
        tools["fail"].run({"message": "boom"})


@pytest.mark.parametrize(
    ("name", "arguments", "problem"),
    [
        ("echo", {}, "arguments.text is required"),
        ("echo", {"text": 1}, "arguments.text must be of type string"),
        ("echo", {"text": "a", "extra": 1}, "arguments.extra is not a known argument"),
        ("sleep", {"seconds": 31}, "arguments.seconds must be at most 30"),
        ("sleep", {"seconds": -1}, "arguments.seconds must be at least 0"),
        ("sleep", {"seconds": True}, "arguments.seconds must be of type number"),
        ("big_output", {"chars": 200_001}, "arguments.chars must be at most 200000"),
        ("big_output", {"chars": 1.5}, "arguments.chars must be of type integer"),
        ("calculator", {"expression": "1" * 1001}, "at most 1000 characters"),
    ],
)
def test_arguments_are_checked_against_the_schema(name, arguments, problem):
    errors = argument_errors(builtin_tools()[name].parameters, arguments)

    assert any(problem in error for error in errors), errors


def test_sub_agents_refuse_model_and_policy_fields():
    good = {"name": "researcher", "description": "d", "system_prompt": "p", "tools": ["echo"]}

    assert SubAgent.from_dict(good).to_dict() == good
    for field in ("model", "context_policy", "budget"):
        with pytest.raises(ConfigurationError) as caught:
            SubAgent.from_dict({**good, field: "x"})
        assert caught.value.field == f"sub_agents.{field}"
    with pytest.raises(ConfigurationError):
        SubAgent.from_dict({**good, "name": "has space"})


def test_a_toolset_offers_only_the_tools_it_was_built_with():
    toolset = build_toolset(["echo", "calculator"], builtin_tools())

    assert toolset.names == ("echo", "calculator")
    assert toolset.get("fail") is None
    assert [s["function"]["name"] for s in toolset.schemas()] == ["echo", "calculator"]
    with pytest.raises(ConfigurationError) as caught:
        build_toolset(["echo", "rm_rf"], builtin_tools())
    assert caught.value.field == "tools"


class _DetailedTool(Tool):
    """A tool with more to keep than the model reads, failing when asked to."""

    name = "detailed"
    description = "Return text with a detail."
    parameters = {"type": "object", "properties": {"fail": {"type": "boolean"}}}

    def run(self, arguments):
        if arguments.get("fail"):
            return ToolOutput("it broke", detail={"raw": [1, 2]}, error="it broke")
        return ToolOutput("short text", detail={"raw": [1, 2, 3], "secret": "sk-NONCE-1234567"})


def test_a_tool_output_keeps_its_detail_in_the_record_and_out_of_the_view():
    from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response
    from tests.engine.helpers import make_engine

    gateway = ScriptedGateway(
        [
            tool_call_response(("detailed", {}), ("detailed", {"fail": True})),
            text_response("done"),
        ]
    )
    engine = make_engine(gateway, tools=[_DetailedTool()], secrets=("sk-NONCE-1234567",))
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="q")
    records = outcome.frame["context"]["records"]
    results = [r["message"] for r in records if r["kind"] == "tool_result"]
    assert results[0]["content"] == "short text"
    assert results[0]["detail"] == {"raw": [1, 2, 3], "secret": "[redacted]"}
    assert results[1]["content"] == "ERROR: it broke" and results[1]["detail"] == {"raw": [1, 2]}
    feedback = [r["message"]["content"] for r in records if r["kind"] == "feedback"]
    assert any("detailed" in text and "failed: it broke" in text for text in feedback)
    sent = gateway.requests[1].messages
    assert [m for m in sent if m.get("role") == "tool"] == [
        {"role": "tool", "tool_call_id": results[0]["tool_call_id"], "content": "short text"},
        {"role": "tool", "tool_call_id": results[1]["tool_call_id"], "content": "ERROR: it broke"},
    ]
    # A view rebuilt from the checkpoint shows no detail either.
    again = ScriptedGateway([text_response("again")])
    resumed = make_engine(again, tools=[_DetailedTool()])
    resumed.resume(outcome.frame, attempt=2)
    assert '"detail"' not in json.dumps(again.requests[0].messages)
    assert "short text" in json.dumps(again.requests[0].messages)
