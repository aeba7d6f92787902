import copy
import dataclasses
import json
import logging

import pytest

from agentloom.engine import (
    GatewayError,
    LearnedLimit,
    LocalDemoGateway,
    ModelBudget,
    ModelRequest,
    PayloadRules,
    ProjectedHistory,
    check_payload,
)
from agentloom.engine.testing import (
    ScriptedGateway,
    ScriptExhausted,
    text_response,
    tool_call_response,
)
from tests.engine.helpers import assert_openai_valid, make_engine


def test_a_scripted_gateway_replays_responses_callables_and_errors():
    error = GatewayError("timeout", "The provider did not answer in time.")
    gateway = ScriptedGateway(
        [text_response("one"), lambda request: text_response(request.purpose), error]
    )
    request = ModelRequest(purpose="verification", messages=[{"role": "user", "content": "x"}])

    assert gateway.complete(request).message["content"] == "one"
    assert gateway.complete(request).message["content"] == "verification"
    with pytest.raises(GatewayError):
        gateway.complete(request)
    with pytest.raises(ScriptExhausted):
        gateway.complete(request)
    assert len(gateway.requests) == 4


@pytest.mark.parametrize(
    "messages",
    [
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "e", "arguments": "{}"}}
                ],
            },
            {"role": "user", "content": "between a call and its result"},
        ],
        [{"role": "tool", "tool_call_id": "nobody", "content": "orphan"}],
        [{"role": "robot", "content": "hi"}],
        [],
    ],
)
def test_the_contract_wrapper_refuses_what_openai_would_refuse(messages):
    gateway = ScriptedGateway([text_response("x")], validate=assert_openai_valid)

    with pytest.raises(AssertionError):
        gateway.complete(ModelRequest(purpose="action", messages=messages))
    assert gateway.requests == []


def demo(purpose, *messages):
    return LocalDemoGateway().complete(ModelRequest(purpose=purpose, messages=list(messages)))


def test_the_demo_model_calls_the_tool_named_in_the_latest_user_message():
    reply = demo("action", {"role": "user", "content": 'go /tool echo {"text": "hi"} now'})

    (call,) = reply.message["tool_calls"]
    assert call["function"] == {"name": "echo", "arguments": '{"text": "hi"}'}
    assert call["id"] == "local-1-1"
    assert "[local demo model]" in reply.message["content"]
    assert reply.usage["total_tokens"] > 0
    assert demo("action", {"role": "user", "content": "/tool echo {"}).message["tool_calls"]


def test_the_demo_model_leaves_directives_inside_arguments_to_the_sub_agent():
    task = (
        '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"inner\\"}"} '
        '/tool echo {"text": "b"}'
    )
    reply = demo("action", {"role": "user", "content": task})

    names = [call["function"]["name"] for call in reply.message["tool_calls"]]
    assert names == ["delegate_helper", "echo"]


def test_the_demo_model_answers_from_tool_results_and_questions():
    call = tool_call_response(("echo", {"text": "hi"})).message
    cited = demo(
        "action",
        {"role": "user", "content": "/tool echo {}"},
        call,
        {"role": "tool", "tool_call_id": "call_1", "content": "hi there"},
        {"role": "user", "content": "[feedback] something"},
    )
    plain = demo("action", {"role": "user", "content": "What is AgentLoom?"})

    assert "echo: hi there" in cited.message["content"]
    assert plain.message["content"] == "[local demo model] You asked: What is AgentLoom?"
    assert (
        demo("verification", {"role": "user", "content": "x"}).message["content"].startswith("PASS")
    )


def test_the_demo_summary_keeps_lines_with_facts_and_drops_the_rest():
    material = "\n".join(
        [
            "the weather was pleasant",
            "we met Alice at the station",
            "the total was 42 euros",
            "the code is NONCE-abc123",
            "nothing here at all",
            "an ACME product",
        ]
    )
    reply = demo(
        "compaction",
        {"role": "system", "content": "Summarise."},
        {"role": "user", "content": f"Summary so far:\n(none yet)\n\nNext material:\n{material}"},
    )

    text = reply.message["content"]
    assert text.startswith("[local demo model] handoff summary")
    for kept in ("Alice", "42 euros", "NONCE-abc123", "ACME"):
        assert kept in text
    for dropped in ("pleasant", "nothing here", "Summary so far"):
        assert dropped not in text


def test_a_demo_run_compacts_with_an_extractive_summary_and_keeps_every_fact():
    history = ProjectedHistory(
        messages=[
            item
            for n in range(10)
            for item in (
                {
                    "role": "user",
                    "content": f"NONCE-{n} is code {n}\n" + "plain filler words\n" * 25,
                },
                {"role": "assistant", "content": "noted"},
            )
        ],
        watermark=20,
        user_turns=10,
        model_steps=10,
    )
    gateway = LocalDemoGateway()
    requests = []

    def spy(request):
        assert_openai_valid(request)
        requests.append(request)
        return LocalDemoGateway.complete(gateway, request)

    gateway.complete = spy
    outcome = make_engine(gateway, budget=ModelBudget(8_000, 1_000, 0)).start(
        run_number=11, attempt=1, system_prompt="sys", question="which codes?", history=history
    )

    assert outcome.status == "succeeded"
    assert [r.purpose for r in requests] == ["compaction", "action"]
    view = json.dumps(outcome.frame["messages"])
    assert all(f"NONCE-{n}" in view for n in range(10))
    # Old filler is summarised away; only the most recent exchanges stay verbatim.
    assert "NONCE-0 is code 0\\nplain filler words" not in view
    assert view.count("plain filler words") < 25 * 10 / 2
    assert outcome.frame["state"]["compaction_log"][0]["outcome"] == "succeeded"


def test_the_demo_model_reports_compacted_progress_instead_of_starting_over():
    reply = demo(
        "action",
        {"role": "system", "content": "sys"},
        {"role": "user", "content": '/tool big_output {"chars": 1500}'},
        {"role": "user", "content": "[handoff summary] Earlier context…\nbig_output gave 1500 x"},
    )

    assert "tool_calls" not in reply.message
    assert "compacted progress" in reply.message["content"]
    assert "1500" in reply.message["content"]


def _material(*items: str) -> str:
    return "\n".join(f"--- next item ---\n{item}" for item in items)


def demo_summary(*records: str, room: int = 400) -> tuple[str, str]:
    """Return a first summary request's text over `records` and the demo model's summary of
    it, within `room` output tokens."""
    content = f"Summary so far:\n(none yet)\n\nNext material, in order:\n{_material(*records)}"
    reply = LocalDemoGateway().complete(
        ModelRequest(
            purpose="compaction",
            messages=[{"role": "user", "content": content}],
            max_output_tokens=room,
        )
    )
    return content, reply.message["content"]


def test_the_demo_summary_cuts_at_record_boundaries_never_inside_a_line():
    records = [
        f"[assistant]\n[local demo model] Calling tools.\n[tool call r{n}-1-1] echo({{}})\n"
        f"[tool result r{n}-1-1]\n[tool result hidden to save room; "
        f'read_record(ref="r{n}:3") shows it again]'
        for n in range(1, 30)
    ]
    content, text = demo_summary(*records)
    assert len(text) <= 400
    given = {line.strip() for line in content.splitlines()}
    body = [line for line in text.splitlines()[1:] if line]
    assert body and all(line in given for line in body), "every line is whole"
    blocks = text.split("\n\n")[1:]
    assert blocks[0].startswith("[tool call r") and blocks[-1].startswith("[tool call r29-1-1]")
    assert all(len(block.splitlines()) == 3 for block in blocks), "every record is whole"


def test_the_demo_model_answers_from_compacted_results_of_the_calls_it_was_asked_for():
    summary = (
        "[handoff summary] Earlier context was compacted.\n"
        "[local demo model] handoff summary (extractive)\n"
        "[run note] run 9 succeeded\n\n"
        '[tool call r11-1-1] delegate_researcher({"task": "look"})\n'
        "[tool result r11-1-1]\n"
        "- echo: hi"
    )
    reply = demo(
        "action",
        {"role": "user", "content": '/tool delegate_researcher {"task": "look"}'},
        {"role": "user", "content": summary},
    )
    assert reply.message["content"] == (
        "[local demo model] Based on the tool results (from the compacted progress on this "
        "question):\n- delegate_researcher: - echo: hi"
    )


def test_the_demo_summary_keeps_a_repeated_result_in_its_latest_record():
    # The same result twice, the older copy far back: when room runs out the older record
    # goes, and the latest keeps its result.
    older = '[assistant]\n[tool call r1-1-1] echo({"text": "hi"})\n[tool result r1-1-1]\n- echo: hi'
    filler = [f"[system]\n[run note] run {n} succeeded with NONCE-{n:03}" for n in range(2, 40)]
    latest = (
        '[assistant]\n[tool call r40-1-1] echo({"text": "hi"})\n[tool result r40-1-1]\n- echo: hi'
    )
    _, text = demo_summary(older, *filler, latest)
    assert "r1-1-1" not in text, "the oldest record went for room"
    assert text.endswith(
        '[tool call r40-1-1] echo({"text": "hi"})\n[tool result r40-1-1]\n- echo: hi'
    )


def test_the_demo_model_does_not_cite_the_plan_a_summary_carries_as_a_result():
    summary = (
        "[handoff summary] Earlier context was compacted.\n"
        "[local demo model] handoff summary (extractive)\n"
        '[tool call r11-1-1] delegate_researcher({"task": "look"})\n'
        "[tool result r11-1-1]\n\n"
        "[current plan, kept as written]\n1. [in_progress] look it up"
    )
    reply = demo(
        "action",
        {"role": "user", "content": '/tool delegate_researcher {"task": "look"}'},
        {"role": "user", "content": summary},
    )
    assert "current plan" not in reply.message["content"]
    assert "look it up" not in reply.message["content"]


# --- reasoning: the base gateway applies its payload rules -----------------------------------


def _called(call_id):
    return {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}


SPAN = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "", "reasoning_content": "t1", "tool_calls": [_called("a")]},
    {"role": "tool", "tool_call_id": "a", "content": "r"},
    {"role": "assistant", "content": "done", "reasoning_content": "t2"},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": "plain", "reasoning_content": "t3"},
    {"role": "user", "content": "q3"},
]


class _SpansGateway(ScriptedGateway):
    """Any gateway that declares DeepSeek's rule."""

    payload_rules = PayloadRules(reasoning="tool_spans")


def test_any_gateway_declaring_tool_spans_passes_reasoning_back_and_passes_its_own_gate():
    gateway = _SpansGateway([text_response("x")])
    request = ModelRequest(purpose="action", messages=copy.deepcopy(SPAN))
    body = gateway.payload(request)
    assert [m.get("reasoning_content") for m in body["messages"]] == [
        None, "t1", None, "t2", None, None, None
    ]  # fmt: skip
    check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
    assert request.messages == SPAN  # nothing was changed in place


def test_a_gateway_under_never_sends_no_reasoning():
    body = ScriptedGateway([]).payload(ModelRequest(purpose="action", messages=SPAN))
    assert not any("reasoning_content" in m for m in body["messages"])
    assert "thinking" not in body


def test_the_fallback_disables_thinking_and_logs_one_line_without_content(caplog):
    stripped = copy.deepcopy(SPAN)
    del stripped[3]["reasoning_content"]
    gateway = _SpansGateway([])
    request = ModelRequest(purpose="action", messages=stripped)
    with caplog.at_level(logging.WARNING, logger="agentloom.engine"):
        bodies = [gateway.payload(request) for _ in range(3)]
    body = bodies[-1]
    assert body["thinking"] == {"type": "disabled"}
    assert not any("reasoning_content" in m for m in body["messages"])
    check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("agentloom.engine")]
    assert len(lines) == 1
    assert "1 of 2" in lines[0] and "positions 3" in lines[0] and "t1" not in lines[0]


def test_a_gateway_learns_nothing_by_default():
    assert ScriptedGateway([]).adapt(GatewayError("reasoning_missing", "refused")) is None
    assert LocalDemoGateway().adapt(GatewayError("context_length", "too long")) is None


def test_a_learned_limit_is_frozen():
    learned = LearnedLimit(kind="reasoning", value="tool_spans", evidence="e", refused=None,
                           largest_ok=None)  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        learned.value = "never"


def test_every_model_call_carries_the_engines_cache_key():
    gateway = ScriptedGateway([tool_call_response(("echo", {"text": "hi"})), text_response("done")])
    engine = make_engine(gateway, cache_key="agentloom-session-3")
    engine.start(run_number=1, attempt=1, system_prompt="s", question="q", history=None)
    assert [request.cache_key for request in gateway.requests] == ["agentloom-session-3"] * 2


def test_without_a_cache_key_calls_carry_none():
    gateway = ScriptedGateway([text_response("done")])
    make_engine(gateway).start(
        run_number=1, attempt=1, system_prompt="s", question="q", history=None
    )
    assert [request.cache_key for request in gateway.requests] == [None]
