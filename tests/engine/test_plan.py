"""The `update_plan` tool: the plan it sets is capped, pinned by compaction and checkpointed."""

from __future__ import annotations

import json

from agentloom.engine import (
    ContextPolicy,
    EngineConfig,
    GatewayError,
    InstanceFrame,
    JournalRecord,
    ModelBudget,
    ModelGateway,
    builtin_tools,
    inherited_plan,
)
from agentloom.engine._compaction import PLAN_HEADER
from agentloom.engine._measure import plan_reserve
from agentloom.engine._tools import render_plan
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
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
        action = self.actions.pop(0)
        if isinstance(action, Exception):
            raise action
        return action


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


def _steps(name: str) -> list[dict[str, str]]:
    return [{"step": f"NONCE-{name} step", "status": "in_progress"}]


def _plan(name: str) -> str:
    return render_plan(_steps(name))


class Session:
    """Runs of one session over one journal: each new question inherits what it holds."""

    def __init__(self, rendering: int | None = None):
        self.journal = MemoryJournal()
        self.rendering = rendering
        self.recorders: dict[int, Recorder] = {}

    def engine(self, run: int, *actions, **hooks):
        recorder = self.recorders.setdefault(run, Recorder(journal=self.journal, run_id=run))
        return make_engine(
            ActionsGateway(*actions),
            tools=("update_plan",),
            recorder=recorder,
            config=EngineConfig(record_store=recorder.store()),
            rendering=self.rendering,
            **hooks,
        )

    def ask(self, run: int, *actions, **hooks):
        history = self.journal.history(rendering=self.rendering)
        return self.engine(run, *actions, **hooks).start(
            run_number=run, attempt=1, system_prompt="sys", question=f"q{run}", history=history
        )

    def resume(self, run: int, *actions):
        stored = self.recorders[run].stored[-1]
        return self.engine(run, *actions).resume(stored, attempt=2)


def _set(name: str):
    return tool_call_response(("update_plan", {"steps": _steps(name)}))


def test_the_next_question_starts_with_the_plan_the_session_last_set():
    session = Session()
    first = session.ask(1, _set("A"), text_response("done"))
    assert first.frame["state"]["plan"] == _plan("A")
    second = session.ask(2, text_response("no plan call"))
    assert second.frame["state"]["plan"] == _plan("A")
    third = session.ask(3, _set("C"), text_response("done"))
    assert third.frame["state"]["plan"] == _plan("C")
    assert session.ask(4, text_response("x")).frame["state"]["plan"] == _plan("C")


def _a_b_c(session: Session) -> None:
    """A sets a plan and fails, B sets none, C sets another."""
    failed = session.ask(1, _set("A1"), GatewayError("upstream", "down"))
    assert failed.status == "failed"
    # A failed run's plan carries over: the history B inherits shows its update_plan.
    assert session.ask(2, text_response("B")).frame["state"]["plan"] == _plan("A1")
    session.ask(3, _set("C"), text_response("C"))


def test_a_resumed_run_keeps_its_checkpoint_plan_and_d_inherits_the_journal_order():
    session = Session()
    _a_b_c(session)
    # A resumed keeps its own plan, whatever the session set since; it sets none.
    resumed = session.resume(1, text_response("A again"))
    assert resumed.status == "succeeded"
    assert resumed.frame["state"]["plan"] == _plan("A1")
    # The last update_plan in journal order is still C's.
    assert session.ask(4, text_response("D")).frame["state"]["plan"] == _plan("C")


def test_a_plan_a_resumed_run_sets_after_c_is_the_one_d_inherits():
    session = Session()
    _a_b_c(session)
    resumed = session.resume(1, _set("A2"), text_response("A done"))
    assert resumed.frame["state"]["plan"] == _plan("A2")
    assert session.ask(4, text_response("D")).frame["state"]["plan"] == _plan("A2")


def test_a_plan_call_that_never_ran_or_was_refused_sets_no_plan():
    session = Session()
    session.ask(1, _set("A"), text_response("done"))
    bad = tool_call_response(("update_plan", {"steps": [{"step": " ", "status": "pending"}]}))
    session.ask(2, bad, text_response("refused"))
    assert session.ask(3, text_response("x")).frame["state"]["plan"] == _plan("A")
    # An echo that prints what update_plan would print is not a plan.
    rows = [
        JournalRecord(
            1,
            1,
            "main",
            "assistant",
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "echo", "arguments": "{}"},
                    }
                ],
            },
        ),
        JournalRecord(
            2,
            1,
            "main",
            "tool_result",
            {"role": "tool", "tool_call_id": "c1", "content": f"plan updated: 1 steps\n{PLAN}"},
        ),
    ]
    assert inherited_plan(reversed(rows)) is None


def _cancel_after(checks: int):
    """Return a `should_cancel` that answers yes from its `checks + 1`-th question on."""
    asked = iter(range(10_000))
    return lambda: next(asked) >= checks


def test_a_cancelled_run_passes_on_the_plan_it_set_but_not_a_call_cancelled_before_it_ran():
    session = Session()
    # Asked at the first safe point, after the response, before the call runs, then at the next
    # safe point: cancelled there, after its plan was set.
    cancelled = session.ask(1, _set("A"), text_response("x"), should_cancel=_cancel_after(3))
    assert cancelled.status == "cancelled"
    assert session.ask(2, text_response("x")).frame["state"]["plan"] == _plan("A")
    # Cancelled right after the response: the call is answered `cancelled` and never runs.
    never = session.ask(3, _set("C"), should_cancel=_cancel_after(1))
    assert never.status == "cancelled" and never.frame["state"]["plan"] == _plan("A")
    assert session.ask(4, text_response("x")).frame["state"]["plan"] == _plan("A")


def test_a_late_result_counts_where_the_journal_holds_it():
    def call(seq, run, call_id):
        message = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "update_plan", "arguments": "{}"},
                }
            ],
        }
        return JournalRecord(seq, run, "main", "assistant", message)

    def result(seq, run, call_id, plan):
        content = f"plan updated: 1 steps, 0 completed\n{plan}"
        return JournalRecord(
            seq,
            run,
            "main",
            "tool_result",
            {"role": "tool", "tool_call_id": call_id, "content": content},
        )

    rows = [
        call(1, 1, "x"),  # run 1's call, whose result was recorded after run 2's plan
        call(2, 2, "x"),
        result(3, 2, "x", "two"),
        result(4, 1, "x", "one"),
    ]
    assert inherited_plan(reversed(rows)) == "one"
    assert inherited_plan(reversed(rows[:3])) == "two"


def test_under_rendering_3_a_new_question_starts_without_a_plan():
    session = Session(rendering=3)
    session.ask(1, _set("A"), text_response("done"))
    assert session.ask(2, text_response("x")).frame["state"]["plan"] is None
