"""Property tests over random histories, budgets, policies and model behaviour.

Every request any gateway receives here is checked against OpenAI's request schema and ordering
rules, and against the effective budget.
"""

from __future__ import annotations

import json
from itertools import count

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentloom.engine import (
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    ExecutionLimits,
    GatewayError,
    JournalContextManager,
    JournalRecord,
    ModelBudget,
    ModelGateway,
    ProjectedHistory,
    project_history,
)
from agentloom.engine._protocol import protocol_problems
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import FakeClock, Recorder, add_group, assert_openai_valid, make_engine
from tests.support.openai_contract import assert_valid_request

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def budgets(draw) -> ModelBudget:
    output = draw(st.integers(200, 2_000))
    margin = draw(st.integers(0, 500))
    window = draw(st.integers(output + margin + 1_500, 40_000))
    return ModelBudget(window, output, margin)


@st.composite
def policies(draw) -> ContextPolicy:
    context_ratio = draw(st.floats(0.3, 1.0))
    target_ratio = draw(st.floats(0.05, context_ratio * 0.95))
    return ContextPolicy(
        context_ratio=context_ratio,
        target_ratio=target_ratio,
        user_turns=draw(st.none() | st.integers(1, 3)),
        model_steps=draw(st.none() | st.integers(1, 4)),
        max_compaction_calls=draw(st.integers(1, 6)),
    )


SUMMARY_BEHAVIOURS = st.sampled_from(["short", "short", "empty", "error", "long"])
TOOL_CALLS = st.tuples(
    st.sampled_from(["echo", "echo", "fail", "nope", "bad_json"]), st.integers(0, 30_000)
)
ACTIONS = st.one_of(
    st.tuples(st.just("tools"), st.lists(TOOL_CALLS, min_size=1, max_size=3)),
    st.tuples(st.just("answer"), st.integers(0, 3_000)),
)


class CheckedContext(JournalContextManager):
    """The journal context manager, checking the compaction rules around every attempt."""

    def compact_if_triggered(self, tools, call_model):
        frame = self.frame
        before = json.loads(
            json.dumps([[r.to_dict() for r in frame.records], frame.messages, frame.compactions])
        )
        counters_before = frame.counters.to_dict()
        outcome = super().compact_if_triggered(tools, call_model)
        after = json.loads(
            json.dumps([[r.to_dict() for r in frame.records], frame.messages, frame.compactions])
        )
        assert after[0] == before[0], "compaction changed the records"
        if outcome is None or not outcome.succeeded:
            assert after[1:] == before[1:], "a failed or skipped compaction changed the view"
            assert frame.counters.to_dict() == counters_before
        else:
            assert outcome.after < outcome.before
            assert outcome.after < self.policy.trigger_at(self.budget)
            assert outcome.after == self.estimator.estimate(frame.messages, tools)
            assert outcome.target_reached == (outcome.after <= self.policy.target_at(self.budget))
            assert protocol_problems(frame.messages) == []
            assert frame.messages[0]["role"] == "system"
            task = frame.records[0].message
            assert frame.messages[frame.state.task_index] == task
            counters = frame.counters
            assert counters.baseline_user_turns == counters.user_turns
            assert counters.baseline_model_steps == counters.model_steps
        return outcome


class PropertyGateway(ModelGateway):
    """Follows a random script; refuses invalid or over-budget requests."""

    def __init__(self, budget, estimator, actions, summaries, verdicts):
        self.budget = budget
        self.estimator = estimator
        self.actions = iter(actions)
        self.summaries = iter(summaries)
        self.verdicts = iter(verdicts)
        self.requests = []

    def complete(self, request):
        assert_openai_valid(request)
        estimate = self.estimator.estimate(request.messages, request.tools)
        assert estimate <= self.budget.effective_input_budget, "an over-budget request was sent"
        self.requests.append(request)
        if request.purpose == "compaction":
            behaviour = next(self.summaries, "short")
            if behaviour == "error":
                raise GatewayError("upstream", "The provider failed to answer.")
            text = {"short": "summary NONCE-S 1", "empty": " ", "long": "long " * 4_000}
            return text_response(text[behaviour])
        if request.purpose == "verification":
            return text_response(next(self.verdicts, "PASS"))
        kind, detail = next(self.actions, ("answer", 10))
        if kind == "answer":
            return text_response("a" * detail)
        calls = []
        for name, size in detail:
            if name == "bad_json":
                calls.append(("echo", "{broken"))
            elif name == "echo":
                calls.append(("echo", {"text": "e" * size}))
            else:
                calls.append((name, {"message": "m" * min(size, 50)}))
        return tool_call_response(*calls)


def history_of(sizes: list[int]) -> ProjectedHistory:
    rows = []
    seq = count(1)
    for run, size in enumerate(sizes, start=1):
        rows.append(
            JournalRecord(
                next(seq), run, "main", "user_input", {"role": "user", "content": f"q{run}"}
            )
        )
        call = {"id": "c", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        rows.append(
            JournalRecord(
                next(seq),
                run,
                "main",
                "assistant",
                {"role": "assistant", "content": None, "tool_calls": [call]},
            )
        )
        rows.append(
            JournalRecord(
                next(seq),
                run,
                "main",
                "tool_result",
                {"role": "tool", "tool_call_id": "c", "content": "h" * size},
            )
        )
    return project_history(rows)


def assert_no_supplement_inside_groups(records: list[dict]) -> None:
    open_calls = 0
    for record in records:
        if record["kind"] == "assistant":
            open_calls = len(record["message"].get("tool_calls") or [])
        elif record["kind"] == "tool_result":
            open_calls -= 1
        elif record["kind"] in ("supplement", "user_input"):
            assert open_calls == 0, "a supplement split a tool group"


@PROPERTY_SETTINGS
@given(
    budget=budgets(),
    policy=policies(),
    history_sizes=st.lists(st.integers(0, 8_000), max_size=5),
    actions=st.lists(ACTIONS, max_size=8),
    summaries=st.lists(SUMMARY_BEHAVIOURS, max_size=12),
    verdicts=st.lists(st.sampled_from(["PASS", "FAIL: try again"]), max_size=4),
    verify=st.booleans(),
    supplement_at=st.sets(st.integers(0, 12), max_size=4),
    max_calls=st.integers(2, 16),
)
def test_random_runs_keep_protocol_budget_and_sources(
    budget, policy, history_sizes, actions, summaries, verdicts, verify, supplement_at, max_calls
):
    gateway = PropertyGateway(budget, None, actions, summaries, verdicts)
    recorder = Recorder()
    asked = count()
    keys = count()

    def supplements(final):
        return [(str(next(keys)), "more please")] if next(asked) in supplement_at else []

    engine = make_engine(
        gateway,
        tools=("echo", "fail"),
        policy=policy,
        budget=budget,
        recorder=recorder,
        context_manager=CheckedContext,
        supplements=supplements,
        verify_completion=verify,
        limits=ExecutionLimits(max_model_calls=max_calls),
    )
    gateway.estimator = engine.estimator

    outcome = engine.start(
        run_number=1,
        attempt=1,
        system_prompt="sys",
        question="the question",
        history=history_of(history_sizes),
    )

    assert outcome.status in ("succeeded", "failed")
    if outcome.status == "failed":
        assert outcome.error.startswith(
            ("context_budget_exceeded", "model_call_limit_reached", "verification_failed")
        ), outcome.error
    for earlier, later in zip(recorder.saves, recorder.saves[1:], strict=False):
        prefix = earlier["context"]["records"]
        assert later["context"]["records"][: len(prefix)] == prefix, "a record changed"
    records = outcome.frame["context"]["records"]
    assert_no_supplement_inside_groups(records)
    counters = outcome.frame["context"]["counters"]
    assert counters["user_turns"] == len(history_sizes) + 1
    assert counters["model_steps"] == len(history_sizes) + sum(
        1 for r in records if r["kind"] == "assistant"
    )
    event(f"status {outcome.status}: {(outcome.error or '').split(':')[0]}")
    for entry in outcome.frame["state"]["compaction_log"]:
        event(f"compaction {entry['outcome']} ({entry['reason']})")
        if entry["outcome"] == "succeeded":
            assert entry["after"] < entry["before"]
    model_calls = [r for r in gateway.requests]
    assert len(model_calls) <= max_calls


@PROPERTY_SETTINGS
@given(
    budget=budgets(),
    policy=policies(),
    groups=st.lists(
        st.lists(st.integers(0, 6_000), min_size=1, max_size=3), min_size=0, max_size=12
    ),
    notes=st.lists(st.integers(0, 11), max_size=4),
    summaries=st.lists(SUMMARY_BEHAVIOURS, max_size=8),
)
def test_compaction_of_random_views(budget, policy, groups, notes, summaries):
    context = CheckedContext(ContextBinding(policy, budget), ContextOptions(clock=FakeClock()))
    context.create(instance="main", system_prompt="sys", task="task", run_number=1, attempt=1)
    for index, results in enumerate(groups):
        add_group(context, ["r" * size for size in results])
        if index in notes:
            context.add_feedback(f"note {index}")
    gateway = PropertyGateway(budget, context.estimator, [], summaries, [])

    prepared = context.prepare("action", tools=[], call_model=gateway.complete)

    if prepared.compaction is not None:
        event(f"compaction {prepared.compaction.outcome} ({prepared.compaction.reason})")
    if prepared.request is None:
        assert prepared.stop_reason.startswith("context_budget_exceeded")
        assert prepared.estimate > budget.effective_input_budget
    else:
        assert_openai_valid(prepared.request)
        assert prepared.estimate <= budget.effective_input_budget


@st.composite
def journals(draw):
    """Random main-instance journals of interleaved runs, with missing and late results."""
    runs = draw(st.integers(1, 4))
    streams = [_run_events(draw, run) for run in range(1, runs + 1)]
    merged = _interleaved(draw, streams)
    seq = count(draw(st.integers(1, 50)), draw(st.integers(1, 3)))
    rows = []
    for kind, run, detail in merged:
        message = _journal_message(kind, run, detail, seq)
        rows.append(JournalRecord(next(seq), run, "main", kind, message))
    return rows


def _run_events(draw, run):
    """Return one run's events: its question, steps with some of their results, maybe a status."""
    events = [("user_input", run, None)]
    for step in range(draw(st.integers(0, 3))):
        calls = [f"call_{n}" for n in range(draw(st.integers(0, 3)))]
        events.append(("assistant", run, calls))
        answered = draw(st.lists(st.sampled_from(calls), unique=True)) if calls else []
        for call_id in answered:
            events.append(("tool_result", run, call_id))
            if draw(st.booleans()):
                events.append((draw(st.sampled_from(["feedback", "supplement"])), run, step))
    if draw(st.booleans()):
        events.append(("status", run, draw(st.sampled_from(["failed", "succeeded"]))))
    return events


def _interleaved(draw, streams):
    """Return the runs' events merged in random slices, each run's own order kept."""
    merged = []
    while any(streams):
        live = [s for s in streams if s]
        stream = draw(st.sampled_from(live))
        # Runs may be resumed later, so a stream is cut at any point and continued afterwards.
        take = draw(st.integers(1, len(stream)))
        merged.extend(stream[:take])
        del stream[:take]
    return merged


def _journal_message(kind, run, detail, seq):
    """Return the journaled message of one event (a tool result's text takes the next seq)."""
    if kind == "user_input":
        return {"role": "user", "content": f"question of run {run}"}
    if kind == "assistant":
        message = {"role": "assistant", "content": None if detail else "answer"}
        if detail:
            message["tool_calls"] = [
                {"id": c, "type": "function", "function": {"name": "echo", "arguments": "{}"}}
                for c in detail
            ]
        return message
    if kind == "tool_result":
        return {"role": "tool", "tool_call_id": detail, "content": f"R{next(seq)}"}
    if kind == "status":
        return {"status": detail, "error": None}
    return {"role": "user", "content": f"{kind} {detail}"}


@PROPERTY_SETTINGS
@given(rows=journals())
def test_projection_of_random_journals_is_valid_and_drops_nothing(rows):
    history = project_history(rows)

    messages = [{"role": "system", "content": "s"}, *history.messages]
    assert_valid_request(
        {"model": "x", "messages": [*messages, {"role": "user", "content": "new question"}]}
    )
    text = json.dumps(history.messages)
    for row in rows:
        if row.kind == "tool_result":
            assert row.message["content"] in text
    ids = [c["id"] for m in history.messages for c in m.get("tool_calls") or []]
    assert all(i.startswith("h") for i in ids)
    assert history.user_turns == sum(1 for r in rows if r.kind == "user_input")
    assert history.model_steps == sum(1 for r in rows if r.kind == "assistant")
