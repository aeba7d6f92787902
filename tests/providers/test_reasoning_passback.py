"""Reasoning on any endpoint: kept from every reply, passed back as the connection's rule says,
and learned from the refusal of a DeepSeek model behind a generic endpoint."""

from __future__ import annotations

import copy
import logging

import pytest

from agentloom.engine import LearnedLimit, ModelRequest, check_payload
from agentloom.providers import (
    CallOptions,
    DeepSeekChatGateway,
    ModelEndpoint,
    OpenAICompatibleChatGateway,
    ProviderError,
    gateway_for_provider,
)
from tests.support.deepseek_double import DeepSeekDouble, ProxiedDeepSeekDouble
from tests.support.provider_double import chat_completion

ECHO = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echo a text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
THOUGHT = "The user wants an echo."


def _call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}


@pytest.fixture
def proxied():
    with ProxiedDeepSeekDouble() as double:
        yield double


def chat(double, provider="openai_compatible", *, stream=True, **options):
    """Return the `provider` gateway at the double (LM Studio and Ollama take its origin)."""
    base = double.origin if provider in ("lmstudio", "ollama") else double.base_url
    endpoint = ModelEndpoint(base, "sk-test", "deepseek-v4-flash")
    calls = CallOptions(allow_private_hosts=True, stream=stream, sleep=lambda seconds: None)
    return gateway_for_provider(provider, endpoint, calls=calls, **options)


def ask(messages) -> ModelRequest:
    return ModelRequest(purpose="action", messages=list(messages), tools=[ECHO])


QUESTION = {"role": "user", "content": '/tool echo {"text": "NONCE-1"}'}


def first_tool_turn(gateway) -> list[dict]:
    """Ask a question that makes the model call a tool; return the messages with its result."""
    reply = gateway.complete(ask([QUESTION]))
    (call,) = reply.message["tool_calls"]
    return [QUESTION, reply.message, {"role": "tool", "tool_call_id": call["id"], "content": "x"}]


# --- 1. every reasoning_content a reply carries is kept ---------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    "provider", ["openai", "openai_compatible", "deepseek", "lmstudio", "ollama"]
)
def test_every_kind_keeps_the_reasoning_a_reply_carries(provider_double, provider, stream):
    reply = chat_completion(content=None, tool_calls=[_call("call_0")])
    reply["choices"][0]["message"]["reasoning_content"] = THOUGHT
    provider_double.reply(json=reply)
    message = chat(provider_double, provider, stream=stream).complete(ask([QUESTION])).message
    assert message["reasoning_content"] == THOUGHT
    assert message["tool_calls"][0]["id"] == "call_0"


def test_ollamas_native_answer_keeps_its_thinking_and_never_sends_it_back(provider_double):
    answer = {
        "model": "qwen3",
        "message": {"role": "assistant", "content": "4", "thinking": THOUGHT},
        "done": True,
        "done_reason": "stop",
    }
    provider_double.reply(path="/api/chat", json=answer)
    gateway = chat(provider_double, "ollama", num_ctx=8_192)
    message = gateway.complete(ask([QUESTION])).message
    assert message["reasoning_content"] == THOUGHT
    later = gateway.payload(ask([QUESTION, message, {"role": "user", "content": "And?"}]))
    assert not any("reasoning_content" in m or "thinking" in m for m in later["messages"])


# --- 2. learned, tool_spans, never against a DeepSeek model behind a generic endpoint ---------


def test_learned_answers_the_refusal_once_by_passing_reasoning_back(proxied):
    gateway = chat(proxied)
    assert gateway.payload_rules.reasoning == "never"
    messages = first_tool_turn(gateway)
    assert messages[1]["reasoning_content"].startswith("thinking NONCE-R")
    with pytest.raises(ProviderError) as refused:
        gateway.complete(ask(messages))
    assert refused.value.kind == "reasoning_missing"
    assert proxied.refused == 1

    learned = gateway.adapt(refused.value)
    assert learned == LearnedLimit(
        kind="reasoning",
        value="tool_spans",
        evidence="reasoning_content must be passed back",
        refused=None,
        largest_ok=None,
    )
    assert gateway.payload_rules.reasoning == "tool_spans"
    # The resend carries the reasoning the reply came with, and is answered.
    answer = gateway.complete(ask(messages))
    assert answer.message["content"].startswith("Tool results")
    sent = proxied.chat_bodies()[-1]["messages"]
    assert sent[1]["reasoning_content"] == messages[1]["reasoning_content"]
    check_payload(gateway.payload(ask(messages)), gateway.payload_rules, purpose="action",
                  notes_placed=True)  # fmt: skip
    # Learned once: a second refusal (or any other error) changes nothing.
    assert gateway.adapt(refused.value) is None
    assert gateway.adapt(ProviderError("reasoning_missing", status=400)) is None
    assert gateway.payload_rules.reasoning == "tool_spans"
    assert proxied.refused == 1


def test_learned_ignores_every_other_refusal(proxied):
    gateway = chat(proxied)
    for kind in ("bad_request", "context_length", "upstream"):
        assert gateway.adapt(ProviderError(kind, status=400)) is None
    assert gateway.payload_rules.reasoning == "never"


def test_tool_spans_is_never_refused(proxied):
    gateway = chat(proxied, reasoning="tool_spans")
    messages = first_tool_turn(gateway)
    answer = gateway.complete(ask(messages))
    later = [*messages, answer.message, {"role": "user", "content": "And now?"}]
    gateway.complete(ask(later))
    assert proxied.refused == 0
    assert all(not request.violations for request in proxied.requests)
    assert proxied.chat_bodies()[-1]["messages"][1]["reasoning_content"]


def test_never_is_refused_and_learns_nothing(proxied):
    gateway = chat(proxied, reasoning="never")
    messages = first_tool_turn(gateway)
    with pytest.raises(ProviderError) as refused:
        gateway.complete(ask(messages))
    assert refused.value.kind == "reasoning_missing"
    assert gateway.adapt(refused.value) is None
    assert not any("reasoning_content" in m for m in proxied.chat_bodies()[-1]["messages"])


@pytest.mark.parametrize(
    ("provider", "options", "rule"),
    [
        ("openai_compatible", {}, "never"),
        ("openai_compatible", {"reasoning": "tool_spans"}, "tool_spans"),
        ("lmstudio", {}, "never"),
        ("ollama", {}, "never"),
        ("openai", {}, "never"),
        ("openai", {"reasoning": "tool_spans"}, "tool_spans"),
        ("deepseek", {}, "tool_spans"),
        ("deepseek", {"reasoning": "learned"}, "tool_spans"),
        ("deepseek", {"thinking": "disabled"}, "never"),
        ("deepseek", {"thinking": "disabled", "reasoning": "tool_spans"}, "never"),
    ],
)
def test_every_chat_gateway_takes_the_reasoning_option(provider_double, provider, options, rule):
    gateway = chat(provider_double, provider, **options)
    assert gateway.payload_rules.reasoning == rule
    default = {"openai_compatible": "learned", "lmstudio": "learned", "ollama": "learned"}
    if not options:
        assert gateway.reasoning == default.get(provider, gateway.reasoning)


@pytest.mark.parametrize(
    ("provider", "options"),
    [("openai_compatible", {}), ("deepseek", {}), ("deepseek", {"thinking": "disabled"})],
)
def test_an_unknown_reasoning_option_is_refused(provider_double, provider, options):
    with pytest.raises(ValueError, match="reasoning"):
        chat(provider_double, provider, reasoning="always", **options)


def test_deepseek_with_never_sends_tool_spans_with_thinking_disabled():
    with DeepSeekDouble() as double:
        gateway = chat(double, "deepseek", reasoning="never")
        messages = first_tool_turn(gateway)
        gateway.complete(ask(messages))
        body = double.chat_bodies()[-1]
        assert body["thinking"] == {"type": "disabled"}
        assert not any("reasoning_content" in m for m in body["messages"])
        assert all(not request.violations for request in double.requests)
        # A question with no tool-call span keeps thinking on.
        assert "thinking" not in gateway.payload(ask([QUESTION]))


# --- 3. the thinking settings and the fallback -----------------------------------------------


def test_with_thinking_returns_a_new_body(provider_double):
    gateway = chat(provider_double, "deepseek", thinking="enabled", reasoning_effort="max")
    body = {"model": "m", "messages": [], "max_tokens": 10, "temperature": 0.3}
    before = copy.deepcopy(body)
    made = gateway.with_thinking(body)
    assert body == before
    assert made["thinking"] == {"type": "enabled"} and "temperature" not in made


STRIPPED = [
    {"role": "user", "content": "q1 with SECRET-WORDS"},
    {"role": "assistant", "content": "", "tool_calls": [_call("a")]},
    {"role": "tool", "tool_call_id": "a", "content": "r"},
    {"role": "assistant", "content": "done", "reasoning_content": "kept thought"},
    {"role": "user", "content": "q2"},
]


@pytest.mark.parametrize("provider", ["openai_compatible", "deepseek"])
def test_a_message_without_reasoning_to_pass_back_is_logged_once(provider_double, provider, caplog):
    gateway = chat(provider_double, provider, reasoning="tool_spans")
    with caplog.at_level(logging.WARNING, logger="agentloom.engine"):
        for _ in range(3):  # measured, checked, sent: one line
            body = gateway.payload(ask(STRIPPED))
    assert body["thinking"] == {"type": "disabled"}
    assert not any("reasoning_content" in m for m in body["messages"])
    check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
    [record] = [r for r in caplog.records if "Reasoning to pass back" in r.getMessage()]
    line = record.getMessage()
    assert "1 of 2" in line and "positions 1" in line
    assert "SECRET-WORDS" not in line and "kept thought" not in line


def test_deepseek_official_keeps_its_rule(provider_double):
    gateway = chat(provider_double, "deepseek")
    assert isinstance(gateway, DeepSeekChatGateway)
    assert gateway.adapt(ProviderError("reasoning_missing", status=400)) is None
    whole = copy.deepcopy(STRIPPED)
    whole[1]["reasoning_content"] = "first thought"
    body = gateway.payload(ask(whole))
    assert "thinking" not in body
    assert [m.get("reasoning_content") for m in body["messages"]] == [
        None,
        "first thought",
        None,
        "kept thought",
        None,
    ]
    assert isinstance(chat(provider_double), OpenAICompatibleChatGateway)
