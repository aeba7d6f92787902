"""One named test per reason a compaction fails; each keeps the view, the sources and baselines."""

from __future__ import annotations

import pytest

from agentloom.engine import (
    BudgetCompactionPolicy,
    CompactionRequest,
    ContextPolicy,
    GatewayError,
    JsonBytesEstimator,
)
from agentloom.engine._compaction import HANDOFF_HEADER, SUMMARY_CUT
from agentloom.engine._errors import ContextBudgetExceeded
from agentloom.engine.testing import text_response
from tests.engine.helpers import snapshot
from tests.engine.test_compaction import SMALL, grown_context


def _fails(scripted, reply, reason):
    """Compact a view above its trigger with `reply`; check it failed for `reason`, harmlessly."""
    # Above the trigger, within the effective budget; the segmented request of version 2 (a
    # failed request on the conversation's prefix falls back to it: test_prefix_summary.py).
    context = grown_context(groups=6, compaction=2)
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


@pytest.mark.parametrize("reply", ["padding " * 3_000, "x" * 2_600])
def test_a_summary_longer_than_its_room_is_cut_to_fit(scripted, reply):
    # Once larger than the view it replaced, or not below the trigger: the summary's output
    # limit is what is left under the trigger, and a reply over it is cut to fit.
    context = grown_context(groups=6)
    gateway = scripted(text_response(reply))

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert (outcome.outcome, outcome.details["summary_cut"]) == ("succeeded", True)
    assert outcome.after < ContextPolicy().trigger_at(SMALL)
    room = outcome.details["summary_room"]
    assert gateway.requests[0].max_output_tokens == min(room, SMALL.max_output_tokens)
    summary = next(m for m in context.frame.messages if SUMMARY_CUT.strip() in str(m["content"]))
    assert summary["content"].startswith(HANDOFF_HEADER)


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

    def refuse(messages, limit):
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
        _request(broken, lambda messages, limit: sent.append(messages) or "summary", task_index=1)
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
        _request(view, lambda messages, limit: "summary", task_index=2)
    )

    assert (outcome.outcome, outcome.reason) == ("failed", "boundary_violation")
