"""Broken event streams are classified by what they say and by whether anything was shown.

- A stream that ends before its first content is retried like a connection that never
  opened; after a second such end the same payload is sent once without streaming
  (llama-cpp-python answers an overflowing streamed request with 200 and an empty body, and the
  same request unstreamed with a 400 naming its window, as measured on 0.3.36): its refusal, its
  reply or its error is the call's.
- An error object inside a 200 stream is mapped by what it says, and retried only before any
  content; llama.cpp frames it as data today and as an `error:` line in older builds.
- A stream that breaks off after content was shown is a clear error that is not retried.
- A stream without a usage chunk gives a reply whose usage is None.
"""

from __future__ import annotations

import json

import pytest

from agentloom.engine import CallStream, ModelRequest
from agentloom.providers import CallOptions, ModelEndpoint, ProviderError, RetryPolicy
from agentloom.providers.chat import (
    DeepSeekChatGateway,
    LMStudioChatGateway,
    OpenAIChatGateway,
    OpenAICompatibleChatGateway,
)
from tests.support.llama_double import LlamaServerDouble

QUESTION = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])
CHAT = "/v1/chat/completions"
EVENT_STREAM = {"Content-Type": "text/event-stream"}


def gateway(double, attempts=3):
    calls = CallOptions(
        allow_private_hosts=True, sleep=lambda _: None, retry=RetryPolicy(max_attempts=attempts)
    )
    return OpenAICompatibleChatGateway(ModelEndpoint(double.base_url, "sk-x", "m"), calls=calls)


def ask(double, attempts=3):
    shown: list[str] = []
    reply = gateway(double, attempts).complete(
        QUESTION, stream=CallStream(lambda content, reasoning, names: shown.append(content))
    )
    return reply, shown


def chunk(delta=None, finish=None):
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def events(*chunks, done=False) -> bytes:
    lines = [f"data: {json.dumps(item)}\n\n" for item in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def empty_stream(double):
    # What llama-cpp-python sends for a streamed request over its window: headers, no events.
    double.reply(body=b"", headers=EVENT_STREAM)


def test_an_empty_stream_is_retried_once_and_a_good_answer_then_kept(provider_double):
    empty_stream(provider_double)
    provider_double.reply_chat(content="after")
    reply, _ = ask(provider_double)
    assert reply.message["content"] == "after"
    assert provider_double.hits(CHAT) == 2


LONG = ModelRequest(
    purpose="action",
    messages=[{"role": "user", "content": "Tell me about rivers. " * 1200}],
    max_output_tokens=10,
)


def test_after_two_empty_streams_the_unstreamed_probe_names_the_window():
    # llama-cpp-python: a streamed overflow is an empty 200, the same request unstreamed a 400.
    with LlamaServerDouble(n_ctx=4096) as server:
        with pytest.raises(ProviderError) as caught:
            gateway(server).complete(LONG, stream=CallStream(lambda *_: None))
        bodies = server.chat_bodies()
    refusal = caught.value
    assert refusal.kind == "context_length" and refusal.window == 4096
    assert refusal.requested == server.counted[-1].requested > 4096
    assert refusal.evidence.startswith("maximum context length is 4096 tokens")
    # Two streamed attempts, then one probe: the same payload, not streamed.
    assert [c.stream for c in server.counted] == [True, True, False]
    assert bodies[2]["stream"] is False and "stream_options" not in bodies[2]
    assert {k: v for k, v in bodies[2].items() if not k.startswith("stream")} == {
        k: v for k, v in bodies[0].items() if not k.startswith("stream")
    }


def test_an_empty_stream_whose_probe_answers_is_a_successful_call_and_tools_go_unstreamed_after():
    # llama-cpp-python: `tool_choice: "auto"` with a stream is an empty 200, unstreamed a reply.
    with LlamaServerDouble(n_ctx=4096) as server:
        assert server.tool_choice_required
        chat = gateway(server)
        shown: list[str] = []
        tools = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
        request = ModelRequest(
            purpose="action",
            messages=[{"role": "user", "content": '/tool echo {"text": "hi"}'}],
            tools=tools,
        )
        reply = chat.complete(request, stream=CallStream(lambda c, r, n: shown.append(c)))
        assert [c.stream for c in server.counted] == [True, True, False]
        assert reply.message["tool_calls"][0]["function"]["name"] == "echo"
        assert reply.usage is not None and shown == []
        # The gateway learned it: a later request with tools is one unstreamed request, one
        # without tools is still streamed.
        again = chat.complete(request, stream=CallStream(lambda c, r, n: None))
        assert again.message["tool_calls"]
        plain = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])
        chat.complete(plain, stream=CallStream(lambda c, r, n: shown.append(c)))
        assert [c.stream for c in server.counted] == [True, True, False, False, True]
        assert shown


TOOLS = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
SPAN = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "echo"},
]


@pytest.mark.parametrize(
    ("gateway_class", "spelled"),
    [
        (OpenAICompatibleChatGateway, True),
        (LMStudioChatGateway, True),
        (OpenAIChatGateway, False),
        (DeepSeekChatGateway, False),
    ],
)
def test_a_server_of_unknown_make_gets_openais_defaults_written_out(gateway_class, spelled):
    chat = gateway_class(ModelEndpoint("http://127.0.0.1:9/v1", "sk-x", "m"))
    body = chat.payload(ModelRequest(purpose="action", messages=SPAN, tools=TOOLS))
    assert body.get("tool_choice") == ("auto" if spelled else None)
    assert body["messages"][1]["content"] == ("" if spelled else None)
    # What the engine asked for stays: `none` on a compaction request, no tools without tools.
    named = ModelRequest(purpose="compaction", messages=SPAN, tools=TOOLS, tool_choice="none")
    assert chat.payload(named)["tool_choice"] == "none"
    assert "tool_choice" not in chat.payload(ModelRequest(purpose="action", messages=SPAN))


def test_an_empty_stream_whose_probe_fails_raises_that_error_once(provider_double):
    empty_stream(provider_double)
    empty_stream(provider_double)
    provider_double.reply(status=503, json={"error": {"message": "busy", "type": "server_error"}})
    provider_double.reply_chat(content="never asked for")
    with pytest.raises(ProviderError) as caught:
        ask(provider_double, attempts=5)
    assert (caught.value.kind, caught.value.status) == ("upstream", 503)
    # The probe is sent once and not retried, however many attempts remain.
    assert provider_double.hits(CHAT) == 3
    assert provider_double.chat_bodies()[2]["stream"] is False


def test_without_retries_an_empty_stream_says_so(provider_double):
    empty_stream(provider_double)
    with pytest.raises(ProviderError) as caught:
        ask(provider_double, attempts=1)
    assert caught.value.kind == "upstream"
    assert caught.value.message == "The provider's stream ended before its first content."


def test_a_stream_that_breaks_before_content_is_retried(provider_double):
    # The role chunk arrived, then the connection closed: nothing was shown.
    provider_double.reply(
        body=events(chunk({"role": "assistant", "content": ""})), headers=EVENT_STREAM
    )
    provider_double.reply_chat(content="second try")
    reply, _ = ask(provider_double)
    assert reply.message["content"] == "second try"
    assert provider_double.hits(CHAT) == 2


def test_a_stream_that_breaks_after_content_is_a_clear_error_not_retried(provider_double):
    provider_double.reply(body=events(chunk({"content": "Half an ans"})), headers=EVENT_STREAM)
    provider_double.reply_chat(content="next run")
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    error = caught.value
    assert (error.kind, error.retryable) == ("protocol", False)
    assert "broke off after part of the answer had arrived" in error.message
    assert provider_double.hits(CHAT) == 1
    # The next call on the same connection is answered as usual.
    assert ask(provider_double)[0].message["content"] == "next run"


def test_a_stream_broken_after_reasoning_counts_as_shown(provider_double):
    provider_double.reply(body=events(chunk({"reasoning_content": "hmm"})), headers=EVENT_STREAM)
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    assert caught.value.kind == "protocol" and provider_double.hits(CHAT) == 1


def test_a_rate_limit_event_before_content_is_retried(provider_double):
    provider_double.reply_stream([{"error": {"message": "slow down", "code": 429}}])
    provider_double.reply_chat(content="ok now")
    reply, _ = ask(provider_double)
    assert reply.message["content"] == "ok now"
    assert provider_double.hits(CHAT) == 2


def test_a_server_error_event_after_content_is_not_retried(provider_double):
    provider_double.reply_stream(
        [
            chunk({"content": "partial"}),
            {"error": {"message": "boom", "type": "server_error", "code": 500}},
        ]
    )
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    assert (caught.value.kind, caught.value.retryable) == ("upstream", False)
    assert "boom" not in str(caught.value)
    assert provider_double.hits(CHAT) == 1


def test_a_rate_limit_event_says_rate_limit(provider_double):
    provider_double.reply_stream(
        [chunk({"content": "a"}), {"error": {"message": "x", "type": "rate_limit_error"}}]
    )
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    assert caught.value.kind == "rate_limit" and caught.value.retryable is False


def test_an_old_llama_cpp_error_line_is_read_as_the_error_it_is(provider_double):
    # Older llama.cpp servers wrote the error as an `error:` field, then `data: [DONE]`.
    body = (
        b'error: {"code":400,"message":"the request exceeds the available context size, try '
        b'increasing it","type":"exceed_context_size_error","n_prompt_tokens":4127,"n_ctx":4096}'
        b"\n\ndata: [DONE]\n\n"
    )
    provider_double.reply(body=body, headers=EVENT_STREAM)
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    assert (caught.value.kind, caught.value.window, caught.value.requested) == (
        "context_length",
        4096,
        4127,
    )
    assert provider_double.hits(CHAT) == 1


def test_a_json_error_answer_to_a_stream_request_is_classified(provider_double):
    provider_double.reply(
        json={
            "error": {
                "message": "request (5000 tokens) exceeds the available context size "
                "(4096 tokens), try increasing it",
                "type": "exceed_context_size_error",
            }
        }
    )
    with pytest.raises(ProviderError) as caught:
        ask(provider_double)
    assert (caught.value.kind, caught.value.window) == ("context_length", 4096)


def test_a_stream_without_usage_gives_no_usage_never_zeros(provider_double):
    provider_double.reply_stream(
        [chunk({"role": "assistant", "content": "Hello"}), chunk({}, finish="stop")]
    )
    reply, shown = ask(provider_double)
    assert reply.message["content"] == "Hello" and shown == ["Hello"]
    assert reply.usage is None


def test_a_stream_with_usage_keeps_it(provider_double):
    provider_double.reply_stream(
        [
            chunk({"content": "Hi"}),
            chunk({}, finish="stop"),
            {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
        ]
    )
    reply, _ = ask(provider_double)
    assert reply.usage == {"prompt_tokens": 5, "completion_tokens": 1}
