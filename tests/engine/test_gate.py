"""The integrity gate on hand-made payloads: each rule refused by name, a valid body passed."""

from __future__ import annotations

import pytest

from agentloom.engine import PayloadRules, check_payload
from agentloom.engine._errors import PayloadRuleBroken


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}


def body(*messages: dict, **fields) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "q"}, *messages], **fields}


ASKS = {"role": "assistant", "content": None, "tool_calls": [call("a")]}
ANSWER = {"role": "tool", "tool_call_id": "a", "content": "r"}
NOTE = "[run note] run 1 failed: upstream"


def test_a_valid_body_passes():
    check_payload(
        body(ASKS, ANSWER, max_tokens=10), PayloadRules(), purpose="action", notes_placed=True
    )


@pytest.mark.parametrize(
    ("payload", "rule"),
    [
        (body(ASKS, ANSWER, {**ASKS}, {**ANSWER}, max_tokens=10), "duplicate_call_id"),
        (body(ANSWER, max_tokens=10), "orphan_tool_message"),
        (body(ASKS, {"role": "user", "content": "x"}, ANSWER, max_tokens=10), "tool_call_order"),
        (body({"role": "user", "content": NOTE}, {"role": "user", "content": "q2"}, max_tokens=10),
         "run_note_placement"),
        (body({"role": "system", "content": NOTE}, max_tokens=10), "run_note_placement"),
        (body(max_tokens=10, max_completion_tokens=10), "output_limit_field"),
        (body(max_completion_tokens=10), "output_limit_field"),
        (body({"role": "assistant", "content": "a", "reasoning_content": "r"}, max_tokens=10),
         "reasoning"),
    ],
    ids=["duplicate", "orphan", "order", "note-voice", "note-last", "two-limits", "other-limit",
         "reasoning"],
)  # fmt: skip
def test_a_body_that_breaks_a_rule_is_refused_by_name(payload, rule):
    with pytest.raises(PayloadRuleBroken) as refused:
        check_payload(payload, PayloadRules(), purpose="action", notes_placed=True)

    assert refused.value.rule == rule


SPANS = PayloadRules(reasoning="tool_spans")
THOUGHT_ASKS = {**ASKS, "reasoning_content": "t"}


def test_under_tool_spans_an_assistant_of_a_tool_span_needs_its_reasoning():
    check_payload(body(THOUGHT_ASKS, ANSWER, max_tokens=10), SPANS, purpose="action",
                  notes_placed=True)  # fmt: skip
    with pytest.raises(PayloadRuleBroken) as refused:
        check_payload(body(ASKS, ANSWER, max_tokens=10), SPANS, purpose="action",
                      notes_placed=True)  # fmt: skip
    assert refused.value.rule == "reasoning"
    # With thinking disabled nothing is required.
    disabled = body(ASKS, ANSWER, max_tokens=10, thinking={"type": "disabled"})
    check_payload(disabled, SPANS, purpose="action", notes_placed=True)


def test_an_unknown_reasoning_rule_is_refused():
    with pytest.raises(ValueError, match="reasoning"):
        PayloadRules(reasoning="learned")
