"""DeepSeek thinking mode: the double follows the guide, and the engine passes reasoning back.

The double's checks are built from the guide's own multi-turn tool-call example
(api-docs.deepseek.com/api_samples/thinking_mode_api_example_tool_call, read 2026-12-01).
"""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from agentloom.engine import EngineConfig, ModelRequest, check_payload
from agentloom.engine._errors import PayloadRuleBroken
from agentloom.engine.testing import MemoryJournal
from agentloom.providers import (
    CallOptions,
    DeepSeekChatGateway,
    ModelEndpoint,
    OpenAIChatGateway,
    gateway_for_provider,
)
from tests.engine.helpers import Recorder, make_engine
from tests.support.deepseek_double import DeepSeekDouble, ProxiedDeepSeekDouble, missing_reasoning

# The guide's example: tools, and turn 1 as its loop appends it (every message whole).
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_date",
            "description": "Get the current date",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": (
                "Get weather of a location, the user should supply the location and date."
            ),
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "date": {"type": "string"}},
                "required": ["location", "date"],
            },
        },
    },
]


HELPER = {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TURN_1 = [
    {"role": "user", "content": "How's the weather in Hangzhou Tomorrow"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I need the date first.",
        "tool_calls": [_call("call_1", "get_date", "{}")],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "2025-12-01"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Tomorrow is 2025-12-02.",
        "tool_calls": [
            _call("call_2", "get_weather", '{"location": "Hangzhou", "date": "2025-12-02"}')
        ],
    },
    {"role": "tool", "tool_call_id": "call_2", "content": "Cloudy 7~13°C"},
    {
        "role": "assistant",
        "content": "Tomorrow in Hangzhou: cloudy, 7~13°C.",
        "reasoning_content": "I have the forecast.",
    },
]
TURN_2 = {"role": "user", "content": "How's the weather in Guangzhou Tomorrow"}


@pytest.fixture
def deepseek():
    with DeepSeekDouble() as double:
        yield double


def _post(double, messages, **extra):
    body = {"model": "deepseek-v4-pro", "messages": messages, "tools": TOOLS, "max_tokens": 4096}
    return httpx.post(f"{double.base_url}/chat/completions", json={**body, **extra}, timeout=5)


def test_the_guides_second_turn_with_every_message_whole_is_accepted(deepseek):
    answer = _post(deepseek, [*TURN_1, TURN_2])
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["reasoning_content"]


@pytest.mark.parametrize("index", [1, 3, 5])
@pytest.mark.parametrize("value", [None, ""])
def test_a_tool_call_span_without_its_reasoning_is_refused_in_every_later_request(
    deepseek, index, value
):
    messages = copy.deepcopy([*TURN_1, TURN_2])
    if value is None:
        del messages[index]["reasoning_content"]
    else:
        messages[index]["reasoning_content"] = value
    answer = _post(deepseek, messages)
    assert answer.status_code == 400
    assert f"message index {index}" in answer.json()["error"]["message"]
    # The same body with thinking disabled asks for no reasoning.
    assert _post(deepseek, messages, thinking={"type": "disabled"}).status_code == 200


def test_a_span_without_tool_calls_needs_no_reasoning(deepseek):
    plain = [
        {"role": "user", "content": "9.11 and 9.8, which is greater?"},
        {"role": "assistant", "content": "9.8 is greater."},
        {"role": "user", "content": "How many Rs are there in 'strawberry'?"},
    ]
    assert _post(deepseek, plain).status_code == 200


def _gateway(double, cls=DeepSeekChatGateway):
    endpoint = ModelEndpoint(double.base_url, "sk-test", "deepseek-v4-flash")
    return cls(endpoint, calls=CallOptions(allow_private_hosts=True))


def _run(journal, number, gateway, question, **options):
    recorder = Recorder(journal=journal, run_id=number)
    engine = make_engine(
        gateway,
        tools=("echo", "calculator"),
        recorder=recorder,
        config=EngineConfig(record_store=recorder.store()),
        **options,
    )
    outcome = engine.start(
        run_number=number,
        attempt=1,
        system_prompt="sys",
        question=question,
        history=journal.history(),
    )
    return outcome, recorder


def _assistants(body):
    return [m for m in body["messages"] if m["role"] == "assistant"]


def test_reasoning_on_a_tool_call_is_passed_back_in_the_next_request_and_later_runs(deepseek):
    journal = MemoryJournal()
    gateway = _gateway(deepseek)
    first, _ = _run(journal, 1, gateway, '/tool echo {"text": "NONCE-1"}')
    assert first.status == "succeeded", first.error
    record = first.frame["context"]["records"][1]["message"]
    assert record["reasoning_content"].startswith("thinking NONCE-R")
    second_request = deepseek.chat_bodies()[1]
    assert _assistants(second_request)[0]["reasoning_content"] == record["reasoning_content"]

    # Two tool turns, then a plain question: the history keeps every span's reasoning.
    second, _ = _run(journal, 2, gateway, '/tool calculator {"expression": "6*7"}')
    third, _ = _run(journal, 3, gateway, "What did the tools say?")
    assert (second.status, third.status) == ("succeeded", "succeeded")
    last = deepseek.chat_bodies()[-1]
    assert "thinking" not in last
    assert all(m.get("reasoning_content") for m in _assistants(last))
    assert all(not r.violations for r in deepseek.requests)


def test_reasoning_survives_a_resume(deepseek):
    journal = MemoryJournal()
    recorder = Recorder(journal=journal, run_id=1)
    engine = make_engine(
        _gateway(deepseek),
        recorder=recorder,
        config=EngineConfig(record_store=recorder.store()),
    )
    deepseek.reply(status=503, json={"error": {"message": "busy"}})
    deepseek.reply(status=503, json={"error": {"message": "busy"}})
    deepseek.reply(status=503, json={"error": {"message": "busy"}})
    engine.gateway._sleep = lambda seconds: None
    failed = engine.start(
        run_number=1, attempt=1, system_prompt="sys", question='/tool echo {"text": "x"}'
    )
    assert failed.status == "failed"
    resumed = engine.resume(recorder.stored[-1], attempt=2)
    assert resumed.status == "succeeded", resumed.error
    last = deepseek.chat_bodies()[-1]
    assert _assistants(last)[0]["reasoning_content"]
    assert not deepseek.requests[-1].violations


def test_reasoning_is_kept_through_a_compaction_and_a_sub_agent(deepseek):
    journal = MemoryJournal()
    gateway = _gateway(deepseek)
    outcome, recorder = _run(
        journal,
        1,
        gateway,
        '/tool echo {"text": "%s"} /tool delegate_helper {"task": "/tool echo {}"}' % ("a" * 4_000),
        policy={"model_steps": 1},
        sub_agents=[HELPER],
    )
    assert outcome.status == "succeeded", outcome.error
    assert any(call.purpose == "compaction" for call in recorder.calls)
    # Views and snapshots hold the reasoning by reference: the stored checkpoint has none of
    # its text, the frame it rebuilds has all of it.
    stored, full = json.dumps(recorder.stored[-1]), json.dumps(recorder.saves[-1])
    assert "thinking NONCE-R" not in stored and "thinking NONCE-R" in full
    assert recorder.saves[-1]["context"]["compactions"]
    child = outcome.frame["state"]["children"]["1.1"]
    child_assistant = child["context"]["records"][1]["message"]
    assert child_assistant["reasoning_content"]
    assert all(not r.violations for r in deepseek.requests)
    again, _ = _run(journal, 2, gateway, "And now?", policy={"model_steps": 1})
    assert again.status == "succeeded", again.error
    assert all(not r.violations for r in deepseek.requests)


def test_openai_payloads_never_carry_reasoning_even_with_deepseek_history(
    deepseek, provider_double
):
    journal = MemoryJournal()
    made, _ = _run(journal, 1, _gateway(deepseek), '/tool echo {"text": "NONCE-1"}')
    assert made.status == "succeeded"
    # A newer version of the agent runs on OpenAI: the double checks OpenAI's rules.
    provider_double.reply_chat(content="fine")
    openai = _gateway(provider_double, OpenAIChatGateway)
    elsewhere, _ = _run(journal, 2, openai, "continue elsewhere")
    assert elsewhere.status == "succeeded", elsewhere.error
    body = provider_double.chat_bodies()[-1]
    assert any(m.get("tool_calls") for m in body["messages"])
    assert "max_completion_tokens" in body
    assert not any("reasoning_content" in m for m in body["messages"])


def test_a_payload_that_breaks_a_rule_never_reaches_the_gateway(deepseek):
    gateway = _gateway(deepseek)
    body = gateway.payload(ModelRequest(purpose="action", messages=[*TURN_1, TURN_2]))
    broken = copy.deepcopy(body)
    del broken["messages"][3]["reasoning_content"]
    with pytest.raises(PayloadRuleBroken, match="reasoning"):
        check_payload(broken, gateway.payload_rules, purpose="action", notes_placed=True)


def test_records_without_reasoning_are_sent_with_thinking_disabled(deepseek):
    stripped = copy.deepcopy([*TURN_1, TURN_2])
    for message in stripped:
        message.pop("reasoning_content", None)
    gateway = _gateway(deepseek)
    body = gateway.payload(ModelRequest(purpose="action", messages=stripped, tools=TOOLS))
    assert body["thinking"] == {"type": "disabled"}
    assert not any("reasoning_content" in m for m in body["messages"])
    check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
    assert gateway.complete(ModelRequest(purpose="action", messages=stripped, tools=TOOLS))


def test_an_answer_cut_by_the_output_limit_before_any_text_is_a_run_error(deepseek):
    deepseek.thinking_tokens = 10_000  # more than the 4,096 the request may produce
    outcome, recorder = _run(MemoryJournal(), 1, _gateway(deepseek), "think hard")
    assert outcome.status == "failed"
    assert outcome.error.startswith("output_limit: the answer was cut by the output limit (4096")
    assert outcome.answer is None and outcome.candidate_answer is None
    assert recorder.calls[-1].response["finish_reason"] == "length"


def test_a_summary_cut_by_the_output_limit_is_not_an_empty_summary(deepseek):
    journal = MemoryJournal()
    gateway = _gateway(deepseek)
    first, _ = _run(journal, 1, gateway, '/tool echo {"text": "a"}', policy={"model_steps": 1})
    assert first.status == "succeeded"
    deepseek.thinking_tokens = 10_000
    second, _ = _run(journal, 2, gateway, "again", policy={"model_steps": 1})
    reasons = [row["reason"] for row in second.frame["state"]["compaction_log"]]
    assert "gateway_error: output_limit" in reasons
    assert "empty_summary" not in reasons


class _WorkerDied(Exception):
    pass


class _DyingRecorder(Recorder):
    """Saves like the application, then dies right after the save that holds pending calls."""

    def save(self, checkpoint):
        super().save(checkpoint)
        if checkpoint.frame["state"]["pending_tool_calls"]:
            raise _WorkerDied


def test_reasoning_is_passed_back_around_unknown_results_after_a_crash(deepseek):
    recorder = _DyingRecorder(journal=MemoryJournal(), run_id=1)
    config = EngineConfig(record_store=recorder.store())
    engine = make_engine(_gateway(deepseek), recorder=recorder, config=config)
    with pytest.raises(_WorkerDied):
        engine.start(run_number=1, attempt=1, system_prompt="sys", question='/tool echo {"t": 1}')
    # Resumed, the call without a result is answered `unknown`, never re-executed.
    again = make_engine(_gateway(deepseek), recorder=Recorder(recorder.journal), config=config)
    resumed = again.resume(recorder.stored[-1], attempt=2)
    assert resumed.status == "succeeded", resumed.error
    last = deepseek.chat_bodies()[-1]
    assert '"status": "unknown"' in last["messages"][-1]["content"]
    assert _assistants(last)[0]["reasoning_content"]
    assert "thinking" not in last and not deepseek.requests[-1].violations


# --- a DeepSeek model behind a generic (OpenAI-compatible) endpoint -------------------------

# The engine asks `ModelGateway.adapt` on a refusal and resends once; it reports what a run
# applied to `EngineHooks.on_learned`.
QUESTIONS = (
    '/tool echo {"text": "NONCE-1"}',
    "What did the tool say?",
    '/tool calculator {"expression": "6*7"}',
    "And now?",
    "Thanks.",
)


@pytest.fixture
def proxied():
    with ProxiedDeepSeekDouble() as double:
        yield double


def _proxied_session(double, reasoning):
    """Run every question of `QUESTIONS` as the application would: a gateway per run, at the
    connection's rule, which becomes what a run learned once one did."""
    journal = MemoryJournal()
    learned, statuses, first = [], [], None
    for number, question in enumerate(QUESTIONS, start=1):
        endpoint = ModelEndpoint(double.base_url, "sk-test", "deepseek-v4-flash")
        calls = CallOptions(allow_private_hosts=True)
        gateway = gateway_for_provider(
            "openai_compatible", endpoint, calls=calls, reasoning=reasoning
        )
        outcome, _ = _run(journal, number, gateway, question, on_learned=learned.append)
        statuses.append(outcome.status)
        first = first or outcome.frame["context"]["records"][1]["message"]
        if learned:
            reasoning = learned[-1].value
    return statuses, learned, first


def test_behind_a_generic_endpoint_learned_answers_every_question_after_a_tool_call(proxied):
    statuses, learned, first = _proxied_session(proxied, "learned")
    assert statuses == ["succeeded"] * len(QUESTIONS)
    assert [(limit.kind, limit.value) for limit in learned] == [("reasoning", "tool_spans")]
    assert learned[0].evidence == "reasoning_content must be passed back"
    assert proxied.refused == 1
    assert first["reasoning_content"].startswith("thinking NONCE-R")


def test_behind_a_generic_endpoint_tool_spans_answers_every_question_after_a_tool_call(proxied):
    statuses, _, first = _proxied_session(proxied, "tool_spans")
    assert statuses == ["succeeded"] * len(QUESTIONS)
    assert proxied.refused == 0
    # The reasoning of a generic endpoint's reply is journaled and passed back.
    assert first["tool_calls"] and first["reasoning_content"].startswith("thinking NONCE-R")
    last = proxied.chat_bodies()[-1]["messages"]
    assert missing_reasoning(last) == [] and any(m.get("reasoning_content") for m in last)


def test_behind_a_generic_endpoint_never_is_refused_after_the_first_tool_call(proxied):
    statuses, _, first = _proxied_session(proxied, "never")
    assert statuses == ["failed"] * len(QUESTIONS)
    assert proxied.refused == len(QUESTIONS)
    assert first["reasoning_content"]
