"""Streamed completions: assembled whole, reported as they arrive, errors mapped, cancel fast."""

from __future__ import annotations

import threading
import time

import pytest

from agentloom.engine import CallStream, ModelRequest
from agentloom.providers import CallOptions, ModelEndpoint, ProviderError, RetryPolicy
from agentloom.providers.chat import DeepSeekChatGateway, OpenAIChatGateway
from tests.support.deepseek_double import DeepSeekDouble
from tests.support.provider_double import chat_completion

QUESTION = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])
TOOL = {
    "type": "function",
    "function": {"name": "echo", "parameters": {"type": "object", "properties": {}}},
}


def gateway(double, cls=OpenAIChatGateway, **calls):
    """Return a `cls` gateway at the double; `calls` are fields of its `CallOptions`."""
    options = CallOptions(**{"allow_private_hosts": True, "sleep": lambda _: None, **calls})
    return cls(ModelEndpoint(double.base_url, "sk-test", "m"), calls=options)


class Collect:
    def __init__(self):
        self.deltas: list[tuple[str, str, list[str]]] = []

    def __call__(self, content, reasoning, names):
        self.deltas.append((content, reasoning, names))


def test_a_streamed_answer_is_requested_with_usage_and_assembled_whole(provider_double):
    provider_double.reply_chat(content="The answer is forty-two.", usage={"prompt_tokens": 7})
    collect = Collect()
    reply = gateway(provider_double).complete(QUESTION, stream=CallStream(collect))
    body = provider_double.chat_bodies()[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert reply.message == {"role": "assistant", "content": "The answer is forty-two."}
    assert reply.usage == {"prompt_tokens": 7}
    assert reply.finish_reason == "stop"
    # The completion's id, as its chunks carry it: what a trace's `gen_ai.response.id` says.
    assert reply.id == "chatcmpl-double" and reply.to_dict()["id"] == "chatcmpl-double"
    pieces = [content for content, _, _ in collect.deltas]
    assert len(pieces) > 2 and "".join(pieces) == "The answer is forty-two."


def test_tool_call_arguments_are_assembled_and_names_reported_when_decided(provider_double):
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "echo", "arguments": '{"x": 1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "sleep", "arguments": "{}"}},
    ]
    provider_double.reply_chat(content=None, tool_calls=calls)
    collect = Collect()
    reply = gateway(provider_double).complete(
        ModelRequest("action", QUESTION.messages, tools=[TOOL]), stream=CallStream(collect)
    )
    assert reply.message["tool_calls"] == calls
    assert reply.finish_reason == "tool_calls"
    assert [names for _, _, names in collect.deltas if names] == [["echo"], ["sleep"]]


def test_deepseek_reasoning_deltas_are_assembled_and_kept():
    with DeepSeekDouble() as double:
        double.reasoning_padding = 40
        collect = Collect()
        reply = gateway(double, DeepSeekChatGateway).complete(QUESTION, stream=CallStream(collect))
    reasoning = "".join(thought for _, thought, _ in collect.deltas)
    assert reasoning.startswith("thinking NONCE-R1") and len(reasoning) > 40
    assert reply.message["reasoning_content"] == reasoning
    assert reply.message["content"] == "You asked: hi"


def test_a_server_that_ignores_stream_is_read_as_a_whole_answer(provider_double):
    provider_double.reply(json=chat_completion(content="whole"), headers={})
    reply = gateway(provider_double).complete(QUESTION, stream=CallStream(Collect()))
    assert reply.message["content"] == "whole"


def test_an_error_event_in_the_stream_is_mapped_without_its_text(provider_double):
    provider_double.reply_stream(
        [
            {"choices": [{"index": 0, "delta": {"content": "par"}}]},
            {"error": {"message": "echo sk-live-SECRET", "code": "insufficient_quota"}},
        ]
    )
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION, stream=CallStream(Collect()))
    assert caught.value.kind == "quota"
    assert "SECRET" not in str(caught.value) and "echo" not in str(caught.value)


def test_a_stream_broken_after_its_first_byte_is_not_retried(provider_double):
    provider_double.reply_stream([{"choices": [{"index": 0, "delta": {"content": "a"}}]}, "{not"])
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double, retry=RetryPolicy(max_attempts=3)).complete(
            QUESTION, stream=CallStream(Collect())
        )
    assert caught.value.kind == "protocol"
    assert provider_double.hits("/v1/chat/completions") == 1


def test_a_stream_error_status_is_retried_like_any_call(provider_double):
    provider_double.reply(status=503, json={"error": {"message": "busy"}})
    provider_double.reply_chat(content="after")
    reply = gateway(provider_double).complete(QUESTION, stream=CallStream(Collect()))
    assert reply.message["content"] == "after"


def test_a_cancel_closes_the_stream_at_once(provider_double):
    provider_double.chunk_chars = 2
    provider_double.chunk_delay = 0.2
    provider_double.reply_chat(content="x" * 200)  # 100 chunks: 20 s in all
    stream = CallStream(Collect())
    threading.Timer(0.5, stream.cancel).start()
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION, stream=stream)
    assert caught.value.kind == "cancelled"
    assert time.monotonic() - started < 1.5
    deadline = time.monotonic() + 2
    while not provider_double.streams_cut and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider_double.streams_cut == 1


def test_a_cancel_stops_a_silent_stream_too(provider_double):
    # The provider sends its first chunk, then thinks for 20 s without a byte.
    provider_double.chunk_delay = 20
    provider_double.reply_chat(content="late")
    stream = CallStream(Collect())
    threading.Timer(0.5, stream.cancel).start()
    started = time.monotonic()
    with pytest.raises(ProviderError):
        gateway(provider_double).complete(QUESTION, stream=stream)
    assert time.monotonic() - started < 1.5


def test_without_stream_the_gateway_sends_no_stream_fields(provider_double):
    provider_double.reply_chat(content="plain")
    reply = gateway(provider_double, stream=False).complete(QUESTION)
    assert "stream" not in provider_double.chat_bodies()[0]
    assert reply.message["content"] == "plain"
