import contextlib
import dataclasses
import json

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextPolicy,
    ExecutionLimits,
    GatewayError,
    JournalContextManager,
    ModelBudget,
    ProjectedHistory,
    Tool,
    ToolError,
    builtin_tools,
    iter_frame_records,
)
from agentloom.engine._compaction_versions import CURRENT_COMPACTION
from agentloom.engine._rendering import CURRENT_RENDERING
from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response
from tests.engine.helpers import FakeClock, Recorder, keys, kinds, make_engine

UPSTREAM = GatewayError("upstream", "The provider failed to answer.")


def start(engine, question="q", *, run_number=1, history=None, system_prompt="sys"):
    return engine.start(
        run_number=run_number,
        attempt=1,
        system_prompt=system_prompt,
        question=question,
        history=history,
    )


def test_a_run_journals_each_step_and_saves_the_main_frame_after_each(scripted):
    gateway = scripted(tool_call_response(("echo", {"text": "hi"})), text_response("done"))
    recorder = Recorder()

    outcome = start(make_engine(gateway, recorder=recorder, clock=FakeClock()), run_number=3)

    assert (outcome.status, outcome.answer, outcome.error) == ("succeeded", "done", None)
    frame = outcome.frame
    assert keys(frame) == ["user_input", "assistant:1", "tool:r3-1-1", "assistant:2", "status:1"]
    assert frame["context"]["records"][-1]["message"] == {"status": "succeeded", "error": None}
    assert frame["context"]["counters"]["user_turns"] == 1
    assert frame["context"]["counters"]["model_steps"] == 2
    assert recorder.saves[-1] == json.loads(json.dumps(frame))
    assert any(save["state"]["pending_tool_calls"] for save in recorder.saves)
    for earlier, later in zip(recorder.saves, recorder.saves[1:], strict=False):
        count = len(earlier["context"]["records"])
        assert later["context"]["records"][:count] == earlier["context"]["records"]
    assert [c.purpose for c in recorder.calls] == ["action", "action"]
    assert all(c.request_estimate > 0 and c.error is None for c in recorder.calls)
    assert recorder.calls[1].response["message"]["content"] == "done"
    assert frame["binding"] == {
        "policy": ContextPolicy().bound(),
        "budget": {
            "context_window": 32_768,
            "max_output_tokens": 4_096,
            "safety_margin_tokens": 1_024,
        },
        "estimator": {
            "module_id": "agentloom.engine.budget.JsonBytesEstimator/1",
            "config": {"per_request": 16, "per_message": 12, "per_tool": 16},
        },
        "rendering": CURRENT_RENDERING,
        "compaction": CURRENT_COMPACTION,
    }


def test_a_request_over_the_effective_budget_never_reaches_the_gateway(scripted):
    gateway = scripted(text_response("never"))

    outcome = start(make_engine(gateway, budget=ModelBudget(4_000, 1_000, 0)), "x" * 5_000)

    assert gateway.requests == []
    assert outcome.status == "failed"
    assert outcome.error.startswith("context_budget_exceeded: the action request is estimated at")
    assert kinds(outcome.frame) == ["user_input", "feedback", "status"]
    assert outcome.frame["context"]["records"][0]["message"]["content"] == "x" * 5_000


class PreambleGateway(ScriptedGateway):
    """A gateway that sends a preamble of its own before the view: its payload is the larger."""

    def payload(self, request):
        body = super().payload(request)
        body["messages"] = [{"role": "system", "content": "p" * 3_000}, *body["messages"]]
        return body


class ViewMeasuringContext(JournalContextManager):
    """A context manager that measures the view it keeps instead of what the gateway sends."""

    def sent(self, request):
        return list(request.messages), list(request.tools)


@pytest.mark.parametrize("context_manager", [JournalContextManager, ViewMeasuringContext])
def test_a_payload_over_the_budget_is_refused_before_sending_though_its_view_fits(
    context_manager,
):
    # The view (system prompt and question) is far below the effective budget of 3,000; the
    # payload, with the gateway's 3,000-character preamble, is above it. Whatever the context
    # manager measured, the engine's own check on the payload refuses it before the call.
    gateway = PreambleGateway([text_response("never")])
    engine = make_engine(
        gateway, budget=ModelBudget(4_000, 1_000, 0), context_manager=context_manager
    )

    outcome = start(engine)

    assert gateway.requests == []
    assert outcome.status == "failed"
    assert outcome.error.startswith("context_budget_exceeded: the action request is estimated at")
    estimate = int(outcome.error.split("estimated at ")[1].split(",")[0])
    assert estimate > 3_000


def test_a_gateway_error_fails_the_run_with_its_fixed_message_and_the_run_resumes(scripted):
    recorder = Recorder()
    failed = start(make_engine(scripted(UPSTREAM), recorder=recorder))

    assert (failed.status, failed.error) == ("failed", "upstream: The provider failed to answer.")
    assert recorder.calls[0].error == "upstream: The provider failed to answer."
    assert recorder.calls[0].response is None

    resumed = make_engine(scripted(text_response("fine"))).resume(failed.frame, attempt=2)

    assert (resumed.status, resumed.answer) == ("succeeded", "fine")
    assert keys(resumed.frame) == [
        "user_input",
        "feedback:1",
        "status:1",
        "assistant:1",
        "status:2",
    ]
    assert resumed.frame["state"]["attempt"] == 2


def test_verification_pass_ends_the_run_and_adds_no_step(scripted):
    gateway = scripted(text_response("answer"), text_response("PASS"))

    outcome = start(make_engine(gateway, verify_completion=True))

    assert outcome.status == "succeeded"
    assert gateway.purposes() == ["action", "verification"]
    assert kinds(outcome.frame) == ["user_input", "assistant", "feedback", "status"]
    assert outcome.frame["context"]["records"][2]["message"]["content"] == (
        "[feedback] verification: PASS"
    )
    assert outcome.frame["context"]["counters"]["model_steps"] == 1


@pytest.mark.parametrize("verdict", ["FAIL: units are missing", "I am not sure"])
def test_a_failed_or_unclear_verdict_is_fed_back_and_the_loop_continues(scripted, verdict):
    gateway = scripted(
        text_response("42"), text_response(verdict), text_response("42 m"), text_response("PASS")
    )

    outcome = start(make_engine(gateway, verify_completion=True))

    assert (outcome.status, outcome.answer) == ("succeeded", "42 m")
    assert gateway.purposes() == ["action", "verification", "action", "verification"]
    assert gateway.requests[2].messages[-1] == {
        "role": "user",
        "content": f"[feedback] verification: {verdict}",
    }
    assert outcome.frame["context"]["counters"]["model_steps"] == 2


def test_verification_over_budget_fails_the_run_and_keeps_the_candidate(scripted):
    gateway = scripted(text_response("c" * 5_200))

    outcome = start(
        make_engine(gateway, verify_completion=True, budget=ModelBudget(6_500, 1_000, 0))
    )

    assert gateway.purposes() == ["action"]
    assert outcome.status == "failed"
    assert outcome.error.startswith("context_budget_exceeded: the verification request")
    assert outcome.answer is None
    assert outcome.candidate_answer == "c" * 5_200
    assert outcome.frame["state"]["candidate_answer"] == "c" * 5_200


def test_a_verification_gateway_error_fails_the_run_and_keeps_the_candidate(scripted):
    outcome = start(make_engine(scripted(text_response("maybe"), UPSTREAM), verify_completion=True))

    assert outcome.status == "failed"
    assert outcome.error == "verification_failed: upstream: The provider failed to answer."
    assert outcome.candidate_answer == "maybe"


def test_unavailable_tools_and_bad_arguments_become_tool_errors_and_feedback(scripted):
    slept = []
    gateway = scripted(
        tool_call_response(
            ("calculator", {"expression": "1+1"}),
            ("echo", "{not json"),
            ("echo", {"text": 5}),
            ("sleep", {"seconds": 99}),
            ("echo", "[1]"),
        ),
        text_response("done"),
    )

    outcome = start(make_engine(gateway, tools=("echo", "sleep"), sleeper=slept.append))

    assert outcome.status == "succeeded"
    assert slept == []
    results = [m["content"] for m in gateway.requests[1].messages if m["role"] == "tool"]
    assert results == [
        "ERROR: tool 'calculator' is not available to this agent.",
        "ERROR: the arguments are not valid JSON (Expecting property name enclosed in double "
        "quotes)",
        "ERROR: invalid arguments: arguments.text must be of type string",
        "ERROR: invalid arguments: arguments.seconds must be at most 30",
        "ERROR: the arguments must be a JSON object",
    ]
    assert kinds(outcome.frame).count("feedback") == 5
    assert [t["function"]["name"] for t in gateway.requests[0].tools] == ["echo", "sleep"]


def test_a_tool_that_crashes_gives_a_short_error_not_an_exception(scripted):
    class Broken(Tool):
        name = "broken"
        description = "Raises."
        parameters = {"type": "object", "properties": {}}

        def run(self, arguments):
            raise ValueError("internal detail")

    gateway = scripted(tool_call_response(("broken", {})), text_response("ok"))

    outcome = start(make_engine(gateway, tools=[Broken()]))

    assert outcome.status == "succeeded"
    assert gateway.requests[1].messages[3]["content"] == (
        "ERROR: the tool failed unexpectedly (ValueError)"
    )


class WorkerDied(BaseException):
    """Stands in for a worker process dying in the middle of a tool."""


def launcher(executions: list) -> Tool:
    """Return a tool with side effects whose worker dies while it runs."""

    class Launch(Tool):
        name = "launch"
        description = "Has side effects."
        parameters = {"type": "object", "properties": {}}

        def run(self, arguments):
            executions.append(arguments)
            raise WorkerDied

    return Launch()


def crash_during_tool(scripted, executions) -> dict:
    """Start a run whose worker dies inside a tool; return the last saved checkpoint."""
    recorder = Recorder()
    engine = make_engine(
        scripted(tool_call_response(("launch", {}))),
        tools=[launcher(executions)],
        recorder=recorder,
    )
    with pytest.raises(WorkerDied):
        start(engine)
    return recorder.saves[-1]


def test_resume_answers_a_pending_call_as_unknown_and_never_runs_it_again(scripted):
    executions = []
    checkpoint = crash_during_tool(scripted, executions)
    assert [c["name"] for c in checkpoint["state"]["pending_tool_calls"]] == ["launch"]
    gateway = scripted(text_response("I cannot tell whether it launched."))

    outcome = make_engine(gateway, tools=[launcher(executions)]).resume(checkpoint, attempt=2)

    assert executions == [{}]
    assert outcome.status == "succeeded"
    unknown = outcome.frame["context"]["records"][2]
    assert (unknown["kind"], unknown["entry_key"]) == ("tool_result", "tool:r1-1-1")
    assert json.loads(unknown["message"]["content"])["status"] == "unknown"
    assert gateway.requests[0].messages[-1]["role"] == "tool"
    assert outcome.frame["context"]["counters"] == {
        "user_turns": 1,
        "model_steps": 2,
        "baseline_user_turns": 0,
        "baseline_model_steps": 0,
    }


def test_queued_supplements_enter_the_view_after_pending_calls_on_resume(scripted):
    executions = []
    checkpoint = crash_during_tool(scripted, executions)
    gateway = scripted(text_response("ok"))
    engine = make_engine(
        gateway,
        tools=[launcher(executions)],
        supplements=lambda final: [] if final else [("q-1", "extra")],
    )

    outcome = engine.resume(checkpoint, attempt=2)

    assert outcome.status == "succeeded"
    assert executions == [{}]
    assert [m["role"] for m in gateway.requests[0].messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert gateway.requests[0].messages[-1]["content"] == "extra"
    assert kinds(outcome.frame)[2:4] == ["tool_result", "supplement"]


def test_cancellation_stops_at_a_safe_point_and_keeps_the_partial_journal(scripted):
    gateway = scripted(tool_call_response(("echo", {"text": "x"})), text_response("never"))

    outcome = start(make_engine(gateway, should_cancel=lambda: len(gateway.requests) >= 1))

    assert outcome.status == "cancelled"
    assert outcome.error is None
    assert len(gateway.requests) == 1
    assert kinds(outcome.frame) == ["user_input", "assistant", "tool_result", "feedback", "status"]
    assert outcome.frame["context"]["records"][-1]["message"] == {
        "status": "cancelled",
        "error": None,
    }


def test_a_supplement_arriving_during_the_last_step_is_journaled_and_answered(scripted):
    queue = []
    asked = []

    def supplements(final):
        asked.append(final)
        items, queue[:] = list(queue), []
        return items

    def answer_while_user_types(request):
        queue.append(("sup-1", "also mention NONCE-SUP"))
        return text_response("first answer")

    gateway = scripted(answer_while_user_types, text_response("second answer, NONCE-SUP"))

    outcome = start(make_engine(gateway, supplements=supplements))

    assert (outcome.status, outcome.answer) == ("succeeded", "second answer, NONCE-SUP")
    assert asked == [False, True, False, True]
    assert gateway.requests[1].messages[-1] == {"role": "user", "content": "also mention NONCE-SUP"}
    assert "supplement:sup-1" in keys(outcome.frame)
    assert outcome.frame["context"]["counters"]["user_turns"] == 1
    assert queue == []


def test_supplements_are_taken_only_at_safe_points(scripted):
    recorder = Recorder()
    numbers = iter(range(100))

    def supplements(final):
        # Never called while the saved frame has calls waiting for results.
        assert not recorder.saves or not recorder.saves[-1]["state"]["pending_tool_calls"]
        return [] if final else [(str(next(numbers)), "more")]

    gateway = scripted(
        tool_call_response(("echo", {"text": "a"}), ("echo", {"text": "b"})),
        tool_call_response(("echo", {"text": "c"})),
        text_response("done"),
    )

    outcome = start(make_engine(gateway, recorder=recorder, supplements=supplements))

    assert outcome.status == "succeeded"
    records = outcome.frame["context"]["records"]
    open_calls = 0
    for record in records:
        if record["kind"] == "assistant":
            open_calls = len(record["message"].get("tool_calls") or [])
        elif record["kind"] == "tool_result":
            open_calls -= 1
        elif record["kind"] == "supplement":
            assert open_calls == 0


def test_the_model_call_limit_fails_the_run_and_resets_on_resume(scripted):
    looping = [tool_call_response(("echo", {"text": "again"}))] * 2
    limits = ExecutionLimits(max_model_calls=2)

    failed = start(make_engine(scripted(*looping), limits=limits))

    assert failed.status == "failed"
    assert failed.error == (
        "model_call_limit_reached: 2 model calls used in this execution (limit 2)"
    )
    gateway = scripted(tool_call_response(("echo", {"text": "x"})), text_response("done"))
    resumed = make_engine(gateway, limits=limits).resume(failed.frame, attempt=2)
    assert resumed.status == "succeeded"
    assert resumed.frame["state"]["model_calls"] == 2
    assert resumed.frame["context"]["counters"]["model_steps"] == 4


def test_the_candidate_answer_is_kept_when_the_limit_ends_the_run(scripted):
    gateway = scripted(text_response("candidate"), text_response("FAIL: again"))

    outcome = start(
        make_engine(gateway, verify_completion=True, limits=ExecutionLimits(max_model_calls=2))
    )

    assert outcome.status == "failed"
    assert outcome.error.startswith("model_call_limit_reached")
    assert outcome.candidate_answer == "candidate"


def _history(pairs: int, filler: int = 600) -> ProjectedHistory:
    messages = []
    for n in range(pairs):
        messages.append({"role": "user", "content": f"question {n} " + "f" * filler})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    return ProjectedHistory(
        messages=messages, watermark=2 * pairs, user_turns=pairs, model_steps=pairs
    )


def test_compaction_calls_are_reported_and_count_against_the_limit(scripted):
    budget = ModelBudget(8_000, 1_000, 0)
    recorder = Recorder()
    gateway = scripted(text_response("summary NONCE-S"), text_response("answer"))

    limited = start(
        make_engine(gateway, budget=budget, recorder=recorder, limits=ExecutionLimits(1)),
        history=_history(8),
    )

    assert limited.status == "failed"
    assert limited.error.startswith("model_call_limit_reached")
    assert [c.purpose for c in recorder.calls] == ["compaction"]
    assert limited.frame["context"]["compactions"][0]["metrics"]["calls"] == 1

    recorder = Recorder()
    gateway = scripted(text_response("summary NONCE-S"), text_response("answer"))
    outcome = start(make_engine(gateway, budget=budget, recorder=recorder), history=_history(8))
    assert outcome.status == "succeeded"
    assert [c.purpose for c in recorder.calls] == ["compaction", "action"]
    assert "summary NONCE-S" in gateway.requests[1].messages[1]["content"]
    counters = outcome.frame["context"]["counters"]
    assert (counters["user_turns"], counters["model_steps"]) == (9, 9)
    assert (counters["baseline_user_turns"], counters["baseline_model_steps"]) == (9, 8)


def test_a_failed_compaction_does_not_stop_the_run(scripted):
    budget = ModelBudget(8_000, 1_000, 0)
    gateway = scripted(UPSTREAM, text_response("answer"))

    # Version 2: one summary request, which fails (version 3 would fall back to a second one).
    outcome = start(make_engine(gateway, budget=budget, compaction=2), history=_history(8))

    assert outcome.status == "succeeded"
    log = outcome.frame["state"]["compaction_log"]
    assert [(e["outcome"], e["reason"]) for e in log] == [("failed", "gateway_error: upstream")]
    assert outcome.frame["context"]["compactions"] == []


RESEARCHER = {
    "name": "researcher",
    "description": "Looks things up.",
    "system_prompt": "You research.",
    "tools": ["calculator"],
}


def test_delegation_runs_a_child_instance_whose_answer_is_the_tool_result(scripted):
    gateway = scripted(
        tool_call_response(("delegate_researcher", {"task": "compute 6*7"})),
        tool_call_response(("calculator", {"expression": "6*7"})),
        text_response("42 NONCE-CHILD"),
        text_response("The answer is 42"),
    )
    recorder = Recorder()

    outcome = start(make_engine(gateway, recorder=recorder, sub_agents=[RESEARCHER]))

    assert (outcome.status, outcome.answer) == ("succeeded", "The answer is 42")
    assert [r.instance for r in gateway.requests] == ["main", "1.1", "1.1", "main"]
    assert [t["function"]["name"] for t in gateway.requests[1].tools] == ["calculator"]
    assert [t["function"]["name"] for t in gateway.requests[0].tools] == [
        "echo",
        "delegate_researcher",
    ]
    assert [c.instance for c in recorder.calls] == ["main", "1.1", "1.1", "main"]
    main_result = outcome.frame["context"]["records"][2]
    assert main_result["message"]["content"] == "42 NONCE-CHILD"
    child = outcome.frame["state"]["children"]["1.1"]
    assert child["instance"] == "1.1"
    assert kinds(child) == ["user_input", "assistant", "tool_result", "assistant", "status"]
    assert child["messages"][0] == {"role": "system", "content": "You research."}
    assert child["context"]["counters"]["model_steps"] == 2
    assert outcome.frame["context"]["counters"]["model_steps"] == 2
    assert outcome.frame["context"]["counters"]["user_turns"] == 1
    assert "You research." not in json.dumps(outcome.frame["messages"])
    instances = [instance for instance, _ in iter_frame_records(outcome.frame)]
    assert instances == ["main"] * 5 + ["1.1"] * 5
    assert any("1.1" in save["state"]["children"] for save in recorder.saves[:-1])


def test_the_span_hook_holds_each_operation_while_it_lasts(scripted):
    """A tool call's span holds what it does (a delegation: the sub-agent's span, which holds the
    child's calls); each model call is reported inside the operation that made it."""
    events = []

    class Calls(Recorder):
        def on_model_call(self, record):
            events.append(("call", record.instance))

    @contextlib.contextmanager
    def span(kind, facts):
        events.append(("open", kind, facts["name"]))
        late = {}
        yield late
        events.append(("close", kind, late.get("error") or late.get("status")))

    gateway = scripted(
        tool_call_response(("delegate_researcher", {"task": "compute 6*7"})),
        tool_call_response(("calculator", {"expression": "6*"})),
        text_response("no answer"),
        text_response("The answer is unknown"),
    )
    outcome = start(make_engine(gateway, recorder=Calls(), sub_agents=[RESEARCHER], span=span))

    assert outcome.status == "succeeded"
    assert events == [
        ("call", "main"),
        ("open", "execute_tool", "delegate_researcher"),
        ("open", "invoke_agent", "researcher"),
        ("call", "1.1"),
        ("open", "execute_tool", "calculator"),
        ("close", "execute_tool", "tool_error"),
        ("call", "1.1"),
        ("close", "invoke_agent", "succeeded"),
        ("close", "execute_tool", None),
        ("call", "main"),
    ]


class SpanLog:
    """A `span` hook that keeps each tool call's span as (name, call id, error)."""

    def __init__(self):
        self.tools: list[tuple[str, str, str | None]] = []

    @contextlib.contextmanager
    def __call__(self, kind, facts):
        late = {}
        yield late
        if kind == "execute_tool":
            self.tools.append((facts["name"], facts["call_id"], late.get("error")))


class Transfer(Tool):
    name = "transfer"
    description = "Move money."
    parameters = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    needs_approval = True

    def run(self, arguments):
        raise AssertionError("a denied call never runs")


def test_a_call_that_never_runs_still_has_its_span_saying_why(scripted):
    """Every call the model made is a span: one the engine refuses says why it did not run."""
    from agentloom.engine import NOT_RUN, Decision

    spans = SpanLog()
    gateway = scripted(
        tool_call_response(
            ("nosuch", {}),
            ("echo", "{not json"),
            ("echo", {"text": 5}),
            ("echo", {"text": "ran"}),
        ),
        text_response("done"),
    )
    assert start(make_engine(gateway, span=spans)).status == "succeeded"
    assert spans.tools == [
        ("nosuch", "r1-1-1", "tool_unavailable"),
        ("echo", "r1-1-2", "invalid_arguments"),
        ("echo", "r1-1-3", "invalid_arguments"),
        ("echo", "r1-1-4", None),
    ]

    # Cancelled: the calls of a response that came after the cancel request, and a call of a
    # group reached after it.
    spans = SpanLog()
    gateway = scripted(tool_call_response(("echo", {"text": "a"}), ("echo", {"text": "b"})))
    outcome = start(
        make_engine(gateway, span=spans, should_cancel=lambda: len(gateway.requests) >= 1)
    )
    assert outcome.status == "cancelled"
    assert spans.tools == [("echo", "r1-1-1", "cancelled"), ("echo", "r1-1-2", "cancelled")]
    spans, stop = SpanLog(), []

    class Stop(Tool):
        name = "stop"
        description = "Asks the run to stop."
        parameters = {"type": "object", "properties": {}}

        def run(self, arguments):
            stop.append(True)
            return "stopping"

    gateway = scripted(tool_call_response(("stop", {}), ("echo", {"text": "b"})))
    engine = make_engine(gateway, tools=[Stop(), "echo"], span=spans, should_cancel=lambda: stop)
    assert start(engine).status == "cancelled"
    assert spans.tools == [("stop", "r1-1-1", None), ("echo", "r1-1-2", "cancelled")]

    # Denied by a person.
    spans, decisions = SpanLog(), {}
    engine = make_engine(
        scripted(tool_call_response(("transfer", {"amount": 9})), text_response("ok")),
        tools=[Transfer()],
        decisions=lambda: decisions,
        span=spans,
    )
    waiting = start(engine)
    decisions[waiting.pending_approvals[0]["call_id"]] = Decision(False, by="alice", at="t")
    assert engine.continue_run(waiting.frame).status == "succeeded"
    assert spans.tools == [("transfer", "r1-1-1", "denied")]

    # Found pending by a resume: answered `unknown`, never run again.
    spans, executions = SpanLog(), []
    checkpoint = crash_during_tool(scripted, executions)
    engine = make_engine(scripted(text_response("?")), tools=[launcher(executions)], span=spans)
    assert engine.resume(checkpoint, attempt=2).status == "succeeded"
    assert spans.tools == [("launch", "r1-1-1", "outcome_unknown")]
    assert executions == [{}]
    assert set(NOT_RUN) == {
        "tool_unavailable",
        "invalid_arguments",
        "cancelled",
        "denied",
        "outcome_unknown",
    }


def test_child_ids_continue_across_resumes_and_child_failures_are_tool_errors(scripted):
    gateway = scripted(
        tool_call_response(("delegate_researcher", {"task": "one"})),
        UPSTREAM,  # the child's first call
        UPSTREAM,  # the parent's next call
    )
    failed = start(make_engine(gateway, sub_agents=[RESEARCHER]))
    assert failed.status == "failed"
    assert failed.frame["context"]["records"][2]["message"]["content"] == (
        "ERROR: sub-agent researcher (1.1) failed: upstream: The provider failed to answer."
    )

    gateway = scripted(
        tool_call_response(("delegate_researcher", {"task": "two"})),
        text_response("child two"),
        text_response("done"),
    )
    resumed = make_engine(gateway, sub_agents=[RESEARCHER]).resume(failed.frame, attempt=2)

    assert resumed.status == "succeeded"
    assert sorted(resumed.frame["state"]["children"]) == ["1.1", "1.2"]
    assert resumed.frame["state"]["next_child"] == 3


def test_secrets_are_redacted_everywhere_the_engine_writes(scripted):
    secret = "sk-SECRET-123"
    recorder = Recorder()
    gateway = scripted(
        tool_call_response(("echo", {"text": f"key {secret}"}), ("fail", {"message": secret})),
        text_response(f"the key is {secret}"),
        text_response(f"PASS {secret}"),
    )

    outcome = start(
        make_engine(
            gateway,
            tools=("echo", "fail"),
            recorder=recorder,
            secrets=[secret],
            verify_completion=True,
            supplements=lambda final: [] if final else [("s", f"use {secret}")],
        ),
        question=f"my key is {secret}",
        system_prompt=f"system knows {secret}",
        history=ProjectedHistory(messages=[{"role": "user", "content": f"old {secret}"}]),
    )

    assert outcome.status == "succeeded"
    emitted = {
        "outcome": dataclasses.asdict(outcome),
        "saves": recorder.saves,
        "calls": [dataclasses.asdict(c) for c in recorder.calls],
        "requests": [dataclasses.asdict(r) for r in gateway.requests],
    }
    text = json.dumps(emitted)
    assert secret not in text
    assert text.count("[redacted]") >= 8


def test_resume_uses_the_budget_the_run_was_bound_to(scripted):
    small = ModelBudget(4_000, 1_000, 0)
    failed = start(make_engine(scripted(UPSTREAM), budget=small), "y" * 2_000)
    gateway = scripted(text_response("never"))
    bigger = make_engine(
        gateway,
        budget=ModelBudget(200_000, 1_000, 0),
        supplements=lambda final: [] if final else [("s", "z" * 1_500)],
    )

    outcome = bigger.resume(failed.frame, attempt=2)

    assert outcome.frame["binding"]["budget"] == small.to_dict()
    assert outcome.status == "failed"
    assert outcome.error.startswith("context_budget_exceeded")
    assert "action" not in gateway.purposes()


def test_an_engine_refuses_tools_the_registry_does_not_know(scripted):
    with pytest.raises(ConfigurationError):
        make_engine(scripted(), tools=("echo", "launch_missiles"))
    with pytest.raises(ConfigurationError):
        make_engine(scripted(), sub_agents=[{**RESEARCHER, "tools": ["nope"]}])
    with pytest.raises(ConfigurationError):
        make_engine(scripted(), sub_agents=[{**RESEARCHER, "model": "gpt"}])


def test_tools_given_as_objects_replace_builtins_of_the_same_name(scripted):
    class LoudEcho(Tool):
        name = "echo"
        description = "Shouts."
        parameters = builtin_tools()["echo"].parameters

        def run(self, arguments):
            if not arguments["text"]:
                raise ToolError("nothing to shout")
            return arguments["text"].upper()

    gateway = scripted(tool_call_response(("echo", {"text": "hi"})), text_response("ok"))

    start(make_engine(gateway, tools=[LoudEcho()]))

    assert gateway.requests[1].messages[-1]["content"] == "HI"
