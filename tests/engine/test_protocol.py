"""The tool-call ordering rules: one check, read by the view, an inherited history and the gate."""

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextBinding,
    ContextPolicy,
    JournalContextManager,
    ModelBudget,
    ProjectedHistory,
)
from agentloom.engine._gate import PayloadRules, payload_problems
from agentloom.engine._protocol import order_problems, protocol_problems


def _call(*ids):
    calls = [
        {"id": i, "type": "function", "function": {"name": "echo", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _result(call_id):
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "q"}

# Each broken list: the rules it breaks, with the message each is found at (None: at the end).
BROKEN = {
    "orphan": ([USER, _result("c9")], [("orphan_tool_message", 1)]),
    "answered twice": (
        [USER, _call("c1"), _result("c1"), _result("c1")],
        [("orphan_tool_message", 3)],
    ),
    "between": (
        [USER, _call("c1"), USER, _result("c1")],
        [
            ("tool_call_order", 2),
            ("orphan_tool_message", 3),
        ],
    ),
    "unanswered": ([USER, _call("c1", "c2"), _result("c2")], [("tool_call_order", None)]),
    "duplicate": (
        [USER, _call("c1"), _result("c1"), _call("c1"), _result("c1")],
        [("duplicate_call_id", 3)],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_ordering_rule_is_found_where_it_breaks(case):
    messages, expected = BROKEN[case]
    assert [(problem.rule, problem.index) for problem in order_problems(messages)] == expected


def test_a_valid_group_breaks_nothing():
    messages = [USER, _call("c1", "c2"), _result("c2"), _result("c1"), USER]
    assert order_problems(messages) == [] and protocol_problems(messages) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_gate_and_the_view_report_the_same_problems(case):
    messages, _ = BROKEN[case]
    found = order_problems(messages)
    payload = {"messages": messages, "max_tokens": 10}
    gate = payload_problems(payload, PayloadRules(), purpose="action", notes_placed=False)
    assert gate == [(problem.rule, problem.text) for problem in found]
    assert protocol_problems(messages) == [problem.text for problem in found]


def test_an_inherited_history_that_breaks_the_order_is_refused_with_its_first_problem():
    messages, _ = BROKEN["between"]
    context = JournalContextManager(ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 0)))
    with pytest.raises(ConfigurationError) as refused:
        context.create(
            instance="main",
            system_prompt="sys",
            task="t",
            run_number=1,
            attempt=1,
            history=ProjectedHistory(messages=messages),
        )
    assert order_problems(messages)[0].text in str(refused.value)
