"""One named test per reason a compaction fails; each keeps the view, the sources and baselines."""

from __future__ import annotations

from agentloom.engine import (
    BudgetCompactionPolicy,
    CompactionRequest,
    ContextBudgetExceeded,
    ContextPolicy,
    GatewayError,
    JsonBytesEstimator,
    text_response,
)
from tests.engine.helpers import snapshot
from tests.engine.test_compaction import SMALL, grown_context


def _fails(scripted, reply, reason):
    """Compact a view above its trigger with `reply`; check it failed for `reason`, harmlessly."""
    context = grown_context(groups=6)  # above the trigger, within the effective budget
    before = snapshot(context)
    baselines = context.frame.counters.to_dict()

    prepared = context.prepare("action", call_model=scripted(reply).complete)

    outcome = prepared.compaction
    assert (outcome.outcome, outcome.reason) == ("failed", reason)
    assert snapshot(context) == before, "view, records and snapshots stay as they were"
    assert context.frame.counters.to_dict() == baselines, "baselines do not advance"
    assert context.frame.state.compaction_log[-1]["reason"] == reason
    assert prepared.request is not None, "a failed compaction does not stop the run"
    return outcome


def test_empty_summary(scripted):
    _fails(scripted, text_response("  \n "), "empty_summary")


def test_no_reduction(scripted):
    outcome = _fails(scripted, text_response("padding " * 3_000), "no_reduction")
    assert outcome.after >= outcome.before


def test_above_trigger(scripted):
    # Smaller than before, but not below the trigger: not accepted.
    outcome = _fails(scripted, text_response("x" * 2_600), "above_trigger")
    assert ContextPolicy().trigger_at(SMALL) <= outcome.after < outcome.before


def test_gateway_error(scripted):
    failure = GatewayError("upstream", "The provider failed to answer.")
    outcome = _fails(scripted, failure, "gateway_error: upstream")
    assert outcome.calls == 1, "the failed call counts"


def _request(messages, summarise, *, task_index=None):
    return CompactionRequest(
        messages=messages,
        tools=[],
        task_index=task_index,
        plan=None,
        triggers=("budget",),
        policy=ContextPolicy(),
        budget=SMALL,
        estimator=JsonBytesEstimator(),
        summarise=summarise,
    )


def test_summary_request_over_budget():
    context = grown_context(groups=6)
    calls = []

    def refuse(messages):
        calls.append(messages)
        raise ContextBudgetExceeded("context_budget_exceeded: the compaction request is too big")

    outcome = BudgetCompactionPolicy().compact(
        _request(list(context.frame.messages), refuse, task_index=context.frame.state.task_index)
    )

    assert (outcome.outcome, outcome.reason) == ("failed", "summary_request_over_budget")
    assert outcome.messages is None
    assert outcome.calls == 0, "nothing was sent"
    assert len(calls) == 1


def test_boundary_violation():
    # A tool result whose call is not in the view: no summary may be built on it.
    broken = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task " + "t" * 3_000},
        {"role": "tool", "tool_call_id": "orphan", "content": "r" * 3_000},
        {"role": "assistant", "content": "a" * 3_000},
    ]
    sent = []

    outcome = BudgetCompactionPolicy().compact(
        _request(broken, lambda messages: sent.append(messages) or "summary", task_index=1)
    )

    assert (outcome.outcome, outcome.reason) == ("failed", "boundary_violation")
    assert sent == [], "no summary call is spent on a broken view"
    assert outcome.messages is None


def test_a_task_inside_a_tool_group_is_a_boundary_violation():
    view = [
        {"role": "system", "content": "sys"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 7_000},
    ]

    outcome = BudgetCompactionPolicy().compact(
        _request(view, lambda messages: "summary", task_index=2)
    )

    assert (outcome.outcome, outcome.reason) == ("failed", "boundary_violation")
