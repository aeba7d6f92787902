"""Approval of tool calls: a run waits before the group runs, and continues by the decisions."""

from __future__ import annotations

import json

from agentloom.engine import WAITING_APPROVAL, Decision, Tool
from agentloom.engine._approval import denied_result
from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response
from tests.engine.helpers import make_engine


class Transfer(Tool):
    """A tool with real effects: a person approves each call."""

    name = "transfer"
    description = "Move money."
    parameters = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    needs_approval = True

    def __init__(self):
        self.ran: list[dict] = []

    def run(self, arguments):
        self.ran.append(arguments)
        return f"moved {arguments['amount']}"


def _records(outcome, kind):
    return [r["message"] for r in outcome.frame["context"]["records"] if r["kind"] == kind]


def _start(tool, decisions, *replies):
    gateway = ScriptedGateway(list(replies))
    engine = make_engine(gateway, tools=[tool, "echo"], decisions=lambda: decisions)
    return engine, gateway, engine.start(run_number=1, attempt=1, system_prompt="s", question="q")


def test_a_call_that_needs_approval_stops_the_run_before_any_call_of_its_group_runs():
    tool, decisions = Transfer(), {}
    _engine, _gateway, outcome = _start(
        tool,
        decisions,
        tool_call_response(("echo", {"text": "first"}), ("transfer", {"amount": 5})),
    )
    assert outcome.status == WAITING_APPROVAL
    call_id = outcome.pending_approvals[0]["call_id"]
    assert outcome.pending_approvals == [
        {"call_id": call_id, "tool": "transfer", "arguments": json.dumps({"amount": 5})}
    ]
    assert tool.ran == [] and _records(outcome, "tool_result") == []
    assert _records(outcome, "status") == [], "waiting is not an end"
    assert [c["id"] for c in outcome.frame["state"]["pending_tool_calls"]][1] == call_id


def test_approved_calls_run_and_the_decision_is_journaled():
    tool, decisions = Transfer(), {}
    engine, gateway, outcome = _start(
        tool,
        decisions,
        tool_call_response(("echo", {"text": "first"}), ("transfer", {"amount": 5})),
        text_response("done"),
    )
    call_id = outcome.pending_approvals[0]["call_id"]
    decisions[call_id] = Decision(True, by="alice", at="2026-12-01T10:00:00Z")
    calls_before = outcome.frame["state"]["model_calls"]
    finished = engine.continue_run(outcome.frame)
    assert finished.status == "succeeded" and finished.answer == "done"
    assert tool.ran == [{"amount": 5}]
    contents = [m["content"] for m in _records(finished, "tool_result")]
    assert contents == ["first", "moved 5"]
    feedback = [m["content"] for m in _records(finished, "feedback")]
    assert any(
        f"transfer ({call_id}) approved by alice at 2026-12-01T10:00:00Z" in f for f in feedback
    )
    assert finished.frame["state"]["attempt"] == 1, "not a resume"
    assert finished.frame["state"]["model_calls"] == calls_before + 1, "the count goes on"
    assert len(gateway.requests) == 2


def test_a_denied_call_gets_a_denied_result_and_the_note_as_feedback():
    tool, decisions = Transfer(), {}
    engine, _gateway, outcome = _start(
        tool, decisions, tool_call_response(("transfer", {"amount": 500})), text_response("ok")
    )
    call_id = outcome.pending_approvals[0]["call_id"]
    decisions[call_id] = Decision(False, by="alice", at="2026-12-01T10:00:00Z", note="too much")
    finished = engine.continue_run(outcome.frame)
    assert finished.status == "succeeded"
    assert tool.ran == []
    assert [m["content"] for m in _records(finished, "tool_result")] == [denied_result("too much")]
    assert json.loads(denied_result("too much"))["status"] == "denied"
    feedback = [m["content"] for m in _records(finished, "feedback")]
    assert any("denied by alice" in f and "too much" in f for f in feedback)


def test_continuing_with_a_call_still_undecided_waits_again():
    tool, decisions = Transfer(), {}
    engine, _gateway, outcome = _start(
        tool,
        decisions,
        tool_call_response(("transfer", {"amount": 1}), ("transfer", {"amount": 2})),
    )
    first, second = (item["call_id"] for item in outcome.pending_approvals)
    decisions[first] = Decision(True, by="alice", at="t")
    again = engine.continue_run(outcome.frame)
    assert again.status == WAITING_APPROVAL
    assert [item["call_id"] for item in again.pending_approvals] == [second]
    assert tool.ran == []
