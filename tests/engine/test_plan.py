"""The `update_plan` tool: the plan it sets is capped, pinned by compaction and checkpointed."""

from __future__ import annotations

import json

from agentloom.engine import ContextPolicy, InstanceFrame, ModelBudget, ModelGateway, builtin_tools
from agentloom.engine._compaction import PLAN_HEADER
from agentloom.engine._measure import plan_reserve
from agentloom.engine._tools import render_plan
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import Recorder, make_engine

SMALL = ModelBudget(8_000, 1_000, 0)  # effective 7,000; trigger 5,600; target 4,200
STEPS = [
    {"step": "collect the NONCE facts", "status": "completed"},
    {"step": "check each one", "status": "in_progress"},
    {"step": "write the answer", "status": "pending"},
]
PLAN = (
    "1. [completed] collect the NONCE facts\n"
    "2. [in_progress] check each one\n"
    "3. [pending] write the answer"
)


class ActionsGateway(ModelGateway):
    """Answer action requests from a list; every summary request gets a short summary."""

    def __init__(self, *actions):
        self.actions = list(actions)
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        if request.purpose == "compaction":
            return text_response("summary of earlier work NONCE-SUMMARY")
        return self.actions.pop(0)


def start(engine):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question="the task")


def test_update_plan_renders_steps_with_their_status():
    assert render_plan(STEPS) == PLAN
    schema = builtin_tools()["update_plan"].schema()["function"]["parameters"]
    item = schema["properties"]["steps"]["items"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]


def test_the_plan_is_set_and_bad_steps_are_refused_with_feedback():
    gateway = ActionsGateway(
        tool_call_response(("update_plan", {"steps": STEPS})),
        tool_call_response(("update_plan", {"steps": [{"step": "x", "status": "done"}]})),
        text_response("finished"),
    )
    outcome = start(make_engine(gateway, tools=("update_plan",), budget=SMALL))

    assert outcome.status == "succeeded"
    assert outcome.frame["state"]["plan"] == PLAN
    results = [
        r["message"]["content"]
        for r in outcome.frame["context"]["records"]
        if r["kind"] == "tool_result"
    ]
    assert results[0] == f"plan updated: 3 steps, 1 completed\n{PLAN}"
    assert results[1].startswith("ERROR: invalid arguments: arguments.steps[0].status must be one")


def test_a_plan_over_its_size_limit_is_refused_and_the_previous_plan_stays():
    long_steps = [{"step": f"step {n} " + "w" * 90, "status": "pending"} for n in range(10)]
    gateway = ActionsGateway(
        tool_call_response(("update_plan", {"steps": STEPS})),
        tool_call_response(("update_plan", {"steps": long_steps})),
        text_response("finished"),
    )
    engine = make_engine(gateway, tools=("update_plan",), budget=SMALL)
    limit = plan_reserve(policy=ContextPolicy(), budget=SMALL, estimator=engine.estimator)

    outcome = start(engine)

    assert outcome.status == "succeeded"
    assert outcome.frame["state"]["plan"] == PLAN, "the refused plan did not replace the plan"
    records = outcome.frame["context"]["records"]
    refused = [r["message"]["content"] for r in records if r["kind"] == "tool_result"][1]
    assert refused.startswith("ERROR: the plan is ")
    assert f"above the limit of {limit}" in refused
    feedback = [r["message"]["content"] for r in records if r["kind"] == "feedback"]
    assert any("update_plan" in text and "limit" in text for text in feedback)


def test_the_plan_is_pinned_through_two_compactions_and_a_checkpoint_round_trip():
    big = [tool_call_response(("echo", {"text": f"NONCE-{n} " + "z" * 1_200})) for n in range(8)]
    gateway = ActionsGateway(
        tool_call_response(("update_plan", {"steps": STEPS})),
        *big,
        text_response("finished"),
    )
    recorder = Recorder()  # every save is rebuilt from its by-reference frame and compared
    engine = make_engine(gateway, tools=("echo", "update_plan"), budget=SMALL, recorder=recorder)

    outcome = start(engine)

    assert outcome.status == "succeeded", outcome.error
    frame = outcome.frame
    compactions = frame["context"]["compactions"]
    assert len(compactions) >= 2, "two compactions happened"
    for snapshot in compactions:
        summaries = [m["content"] for m in snapshot["messages"] if PLAN_HEADER in str(m["content"])]
        assert summaries, f"compaction {snapshot['revision']} pinned the plan"
        assert summaries[0].endswith(f"{PLAN_HEADER}\n{PLAN}"), "verbatim"
    # Every action request after the plan was set shows it, compacted or not.
    actions = [r for r in gateway.requests if r.purpose == "action"][2:]
    assert all(any(PLAN in str(m.get("content")) for m in r.messages) for r in actions)

    # The checkpoint keeps the plan: stored by reference, rebuilt, and resumed.
    stored = recorder.stored[-1]
    assert stored["state"]["plan"] == PLAN
    rebuilt = InstanceFrame.from_dict(stored, store=recorder.store())
    assert rebuilt.state.plan == PLAN
    assert InstanceFrame.from_dict(json.loads(json.dumps(frame))).state.plan == PLAN
    resumed = make_engine(
        ActionsGateway(text_response("again")), tools=("echo", "update_plan"), budget=SMALL
    ).resume(frame, attempt=2)
    assert resumed.frame["state"]["plan"] == PLAN
