"""Compaction version 3: the summary request is the conversation as last sent, instruction last.

Its messages and tools are those of the action request the provider has just seen (so a prompt
cache serves them), with `tool_choice: "none"`; where it does not fit, or its call fails or calls
a tool, the segmented request of version 2 takes over with the calls that are left.
"""

from __future__ import annotations

import json

from agentloom.engine import ContextPolicy, GatewayError, ModelBudget
from agentloom.engine._compaction import PREFIX_MARK, SECTIONED_INSTRUCTIONS
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import add_group
from tests.engine.test_compaction import SMALL, grown_context

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
]


# The view compacts at 70% of the budget: the conversation plus the instruction still fits.
POLICY = ContextPolicy(context_ratio=0.7, target_ratio=0.5)


def _context(**options):
    options.setdefault("policy", POLICY)
    return grown_context(groups=5, **options)


def _prepare(context, gateway, tools=TOOLS):
    return context.prepare("action", tools=tools, call_model=gateway.complete)


def test_the_summary_request_extends_the_last_action_request(scripted):
    context = _context()
    gateway = scripted(text_response("the summary NONCE-S"), text_response("next"))
    # What goes on the wire for the view: the action request the provider would see.
    sent_before, _ = context._sent_view(list(context.frame.messages), TOOLS)

    outcome = _prepare(context, gateway).compaction

    assert outcome.succeeded and outcome.calls == 1
    assert outcome.details["form"] == "prefix"
    (request,) = gateway.requests
    assert request.purpose == "compaction"
    # Byte for byte, the request the provider saw last, then the new records, then the
    # instruction: the same tools, which it must not call.
    prefix = json.dumps(sent_before)
    assert json.dumps(request.messages[:-1]) == prefix
    assert request.tools == TOOLS and request.tool_choice == "none"
    instruction = request.messages[-1]
    assert instruction["role"] == "user" and instruction["content"].startswith(PREFIX_MARK)
    # It names the messages that stay after the summary as they are.
    view = context.frame.messages
    (summary_at,) = [i for i, m in enumerate(view) if str(m["content"]).startswith("[handoff")]
    assert f"except its last {len(view) - summary_at - 1} messages" in instruction["content"]
    row = context.frame.state.compaction_log[-1]
    assert (row["form"], row["calls"]) == ("prefix", 1)
    assert "the summary NONCE-S" in context.frame.messages[2]["content"]


def test_a_long_prefix_summary_is_kept_whole_below_the_trigger(scripted):
    # The reply ignores the limit it was asked for (the room under the target, compaction 7):
    # it is kept whole, since the view it makes is still below the trigger.
    long = "the long summary NONCE-S " + "s" * 1_400
    context = _context()
    gateway = scripted(text_response(long), text_response("next"))

    outcome = _prepare(context, gateway).compaction

    assert outcome.succeeded and outcome.details["form"] == "prefix"
    assert outcome.details["summary_room"] < len(long)
    assert outcome.details["summary_cut"] is False
    assert long in context.frame.messages[2]["content"]
    assert outcome.after < POLICY.trigger_at(SMALL)


def test_a_prefix_request_over_the_budget_falls_back_to_segments_without_a_call(scripted):
    # The view is over the hard budget: the conversation itself cannot be resent.
    budget = ModelBudget(8_000, 1_000, 0)
    context = grown_context(groups=9, chars=800, budget=budget)
    add_group(context, ["huge " + "y" * 2_500])
    gateway = scripted(*[text_response("short summary")] * 10)

    outcome = _prepare(context, gateway).compaction

    assert outcome.succeeded and outcome.details["form"] == "segmented"
    assert all(not r.messages[-1]["content"].startswith(PREFIX_MARK) for r in gateway.requests)
    assert gateway.requests[0].messages[0]["content"].startswith(SECTIONED_INSTRUCTIONS)
    assert outcome.calls == len(gateway.requests)


def test_a_failed_or_tool_calling_prefix_call_falls_back_within_the_call_limit(scripted):
    for first in (
        GatewayError("upstream", "The provider failed to answer."),
        # Text beside a tool call is not a summary: the request said not to call tools.
        tool_call_response(("echo", {"text": "no"}), content="NONCE-NOT-A-SUMMARY"),
        text_response("  "),
    ):
        context = _context()
        gateway = scripted(first, text_response("segmented summary NONCE-F"))
        outcome = _prepare(context, gateway).compaction
        assert outcome.succeeded and outcome.details["form"] == "segmented", first
        assert outcome.calls == 2 == len(gateway.requests)
        assert "segmented summary NONCE-F" in context.frame.messages[2]["content"]
        assert "NONCE-NOT-A-SUMMARY" not in context.frame.messages[2]["content"]
    # With one call allowed, the failed prefix call is the attempt.
    context = _context(policy=ContextPolicy(context_ratio=0.7, max_compaction_calls=1))
    gateway = scripted(GatewayError("upstream", "The provider failed to answer."))
    outcome = _prepare(context, gateway).compaction
    assert (outcome.outcome, outcome.reason, outcome.calls) == (
        "failed",
        "gateway_error: upstream",
        1,
    )


def test_version_2_runs_keep_the_segmented_request(scripted):
    context = _context(compaction=2)
    gateway = scripted(*[text_response("short summary")] * 10)
    outcome = _prepare(context, gateway).compaction
    assert outcome.succeeded and "form" not in outcome.details
    assert gateway.requests[0].tools == [] and gateway.requests[0].tool_choice is None
    assert "form" not in context.frame.state.compaction_log[-1]


def test_the_demo_model_summarises_the_conversation_above_the_kept_messages(scripted):
    from agentloom.engine import LocalDemoGateway

    context = _context(budget=SMALL)
    add_group(context, ["NONCE-LATEST the newest result"])
    gateway = LocalDemoGateway()
    outcome = _prepare(context, gateway).compaction
    assert outcome.succeeded and outcome.details["form"] == "prefix"
    summary = context.frame.messages[2]["content"]
    assert "result 0.0" in summary  # the oldest result, summarised
    # The newest group is kept as it is after the summary, and not repeated in it.
    assert "NONCE-LATEST" not in summary.split("Kept verbatim")[0]
    assert context.frame.messages[-1]["content"].startswith("NONCE-LATEST")


def test_a_compaction_row_records_what_its_calls_cost_and_the_steps_it_came_at(scripted):
    context = _context()
    usage = {"prompt_tokens": 5_000, "completion_tokens": 90, "prompt_tokens_details": {}}
    usage["prompt_tokens_details"]["cached_tokens"] = 4_096
    gateway = scripted(text_response("the summary", usage=usage))
    steps = context.frame.counters.model_steps
    assert _prepare(context, gateway).compaction.succeeded
    row = context.frame.state.compaction_log[-1]
    assert row["spent"] == {
        "prompt_tokens": 5_000,
        "cached_tokens": 4_096,
        "completion_tokens": 90,
        "unreported": 0,
    }
    assert row["steps"] == steps
    # A call that reports no usage is counted as such, not as zero tokens.
    context = _context()
    assert _prepare(context, scripted(text_response("the summary"))).compaction.succeeded
    assert context.frame.state.compaction_log[-1]["spent"]["unreported"] == 1
