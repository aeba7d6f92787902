import json

import pytest

from agentloom.engine import (
    ConfigurationError,
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    EngineError,
    InstanceFrame,
    JournalContextManager,
    ModelBudget,
    ProjectedHistory,
    Redactor,
)
from tests.engine.helpers import FakeClock, add_group, new_context


def test_a_new_run_view_is_system_history_then_the_task():
    history = ProjectedHistory(
        messages=[{"role": "user", "content": "old"}, {"role": "assistant", "content": "old a"}],
        watermark=12,
        user_turns=1,
        model_steps=1,
    )

    context = new_context(history=history)

    frame = context.frame
    assert [m["content"] for m in frame.messages] == ["sys", "old", "old a", "the task NONCE-TASK"]
    assert frame.state.task_index == 3
    assert frame.inherited_watermark == 12
    assert frame.counters.to_dict() == {
        "user_turns": 2,
        "model_steps": 1,
        "baseline_user_turns": 0,
        "baseline_model_steps": 0,
    }
    assert [(r.seq, r.kind, r.entry_key) for r in frame.records] == [
        (1, "user_input", "user_input")
    ]
    assert frame.records[0].at == "2026-10-09T12:00:01+00:00"


def test_history_that_breaks_the_protocol_is_refused():
    broken = ProjectedHistory(messages=[{"role": "tool", "tool_call_id": "x", "content": "?"}])

    with pytest.raises(ConfigurationError) as caught:
        new_context(history=broken)

    assert caught.value.field == "history"


def test_entry_keys_follow_the_scheme_and_call_ids_are_assigned_by_the_engine():
    context = new_context()

    add_group(context, ["a", "b"])
    context.add_feedback("note")
    context.queue_supplement("sup-7", "more")
    context.accept_supplements()
    context.add_assistant({"role": "assistant", "content": "done"})
    context.add_status("succeeded", None)

    assert [r.entry_key for r in context.frame.records] == [
        "user_input",
        "assistant:1",
        "tool:r1-1-1",
        "tool:r1-1-2",
        "feedback:1",
        "supplement:sup-7",
        "assistant:2",
        "status:1",
    ]
    assert [r.seq for r in context.frame.records] == list(range(1, 9))


def test_a_repeated_status_under_one_attempt_keeps_both_records():
    context = new_context()

    context.add_status("failed", "first")
    context.add_status("failed", "second")

    assert [r.entry_key for r in context.frame.records[1:]] == ["status:1", "status:1.2"]


def test_a_long_tool_result_is_whole_in_the_record_and_capped_in_the_view():
    context = new_context()
    result = "".join(f"{n:06d}" for n in range(5_000))  # 30,000 characters

    add_group(context, [result])

    assert context.frame.records[-1].message["content"] == result
    shown = context.frame.messages[-1]["content"]
    assert shown.startswith(result[:24_000])
    assert result[:24_001] not in shown
    assert "[truncated: 6000 characters cut from this tool result" in shown


def test_feedback_and_supplements_wait_until_the_tool_group_is_complete():
    context = new_context()
    record = context.add_assistant(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
            ],
        }
    )
    first, second = (call["id"] for call in record.message["tool_calls"])

    context.add_tool_result(first, "one")
    context.add_feedback("first call was odd")
    context.queue_supplement("s1", "user adds this")
    assert context.accept_supplements() == []
    assert [m["role"] for m in context.frame.messages] == ["system", "user", "assistant", "tool"]

    context.add_tool_result(second, "two")
    assert context.accept_supplements()[0].entry_key == "supplement:s1"
    assert [m["role"] for m in context.frame.messages[2:]] == [
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
    ]
    assert context.frame.messages[-2]["content"] == "[feedback] first call was odd"
    assert context.frame.messages[-1]["content"] == "user adds this"
    assert context.frame.counters.user_turns == 1


def test_a_supplement_handed_out_twice_is_journaled_once():
    context = new_context()

    context.queue_supplement("s1", "once")
    context.queue_supplement("s1", "once")
    context.accept_supplements()
    context.queue_supplement("s1", "once")

    assert context.accept_supplements() == []
    assert [r.kind for r in context.frame.records].count("supplement") == 1


def test_status_records_are_not_shown_in_the_view():
    context = new_context()
    before = list(context.frame.messages)

    context.add_status("failed", "boom")

    assert context.frame.messages == before
    assert context.frame.state.terminal == {"status": "failed", "error": "boom"}


def test_an_action_request_above_the_effective_budget_is_not_prepared():
    budget = ModelBudget(2_000, 500, 500)
    context = new_context(budget=budget, task="x" * 1_500, policy=ContextPolicy())

    prepared = context.prepare("action", tools=[], call_model=None)

    assert prepared.request is None
    assert prepared.stop_reason.startswith("context_budget_exceeded: the action request")
    assert prepared.estimate > budget.effective_input_budget


def test_an_action_request_cannot_be_prepared_while_calls_are_pending():
    context = new_context()
    context.add_assistant(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        }
    )

    with pytest.raises(EngineError):
        context.prepare("action")
    assert [r.kind for r in context.settle_pending()] == ["tool_result"]
    assert json.loads(context.frame.messages[-1]["content"])["status"] == "unknown"


def test_the_verification_request_shows_task_evidence_and_candidate():
    context = new_context()
    add_group(context, ["evidence NONCE-EV"])
    context.add_assistant({"role": "assistant", "content": "the answer"})

    prepared = context.prepare("verification", candidate_answer="the answer")

    system, question = prepared.request.messages
    assert system["role"] == "system" and "PASS" in system["content"]
    assert "Task:\nthe task NONCE-TASK" in question["content"]
    assert "evidence NONCE-EV" in question["content"]
    assert question["content"].count("the answer") == 1
    assert prepared.request.tools == []


def test_a_compaction_request_needs_its_messages():
    with pytest.raises(ConfigurationError):
        new_context().prepare("compaction")


def test_a_restored_legacy_view_with_unanswered_calls_lists_them_as_pending():
    legacy = {
        "format": 1,
        "instance": "main",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
                ],
            },
        ],
        "state": {},
    }
    context = JournalContextManager(
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 1_024)),
        ContextOptions(clock=FakeClock()),
    )

    context.restore(InstanceFrame.from_dict(legacy))

    assert [call["id"] for call in context.frame.state.pending_tool_calls] == ["x"]
    context.settle_pending()
    assert context.frame.records[0].entry_key == "tool:x"


def test_the_models_messages_and_tool_results_are_redacted_before_they_are_recorded():
    secret = "sk-live-NONCE-0123456789"
    context = new_context(redactor=Redactor([secret]))
    call = {"id": "p", "type": "function"}
    call["function"] = {"name": "echo", "arguments": json.dumps({"text": secret})}
    record = context.add_assistant(
        {
            "role": "assistant",
            "content": f"using {secret}",
            "reasoning_content": f"the key {secret} works",
            "tool_calls": [call],
        }
    )
    context.add_tool_result(record.message["tool_calls"][0]["id"], f"echo: {secret}")

    stored = json.dumps([r.to_dict() for r in context.frame.records])
    shown = json.dumps(context.frame.messages)
    assert secret not in stored and secret not in shown
    assert stored.count("[redacted]") == 4  # content, reasoning, arguments, tool result
