"""Chat gateways against the provider double: payloads, replies, retries and error kinds."""

from __future__ import annotations

import logging
import socket
from dataclasses import replace

import pytest

from agentloom.engine import ModelGateway, ModelRequest
from agentloom.providers import (
    CallOptions,
    DeepSeekChatGateway,
    ModelEndpoint,
    OpenAIChatGateway,
    OpenAICompatibleChatGateway,
    OutputLimits,
    ProviderError,
    RetryPolicy,
    Timeouts,
    gateway_for_provider,
    parse_chat_completion,
)
from tests.support.openai_contract import assert_valid_request
from tests.support.provider_double import chat_completion

KEY = "sk-test-chat-Q8v1SECRET"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Return the weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def ask(text="Hello", **fields):
    return ModelRequest(purpose="action", messages=[{"role": "user", "content": text}], **fields)


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def gateway(double, cls=OpenAIChatGateway, *, output=None, calls=None):
    """Return a `cls` gateway at the double, reaching its private address, never sleeping."""
    calls = replace(calls or CallOptions(sleep=Sleeps()), allow_private_hosts=True)
    endpoint = ModelEndpoint(double.base_url, KEY, "gpt-4.1")
    return cls(endpoint, output=output or OutputLimits(), calls=calls)


def test_openai_sends_max_completion_tokens_and_no_max_tokens(provider_double):
    reply = gateway(provider_double, output=OutputLimits(2_000)).complete(ask())
    assert reply.message == {"role": "assistant", "content": "ok"}
    [body] = provider_double.chat_bodies()
    assert body["max_completion_tokens"] == 2_000
    assert "max_tokens" not in body
    assert "tools" not in body
    assert body["model"] == "gpt-4.1"
    assert provider_double.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert_valid_request(body)


def test_openai_sends_the_sessions_cache_key_as_prompt_cache_key(provider_double):
    chat = gateway(provider_double)
    chat.complete(ask(cache_key="agentloom-session-7"))
    chat.complete(ask())
    keyed, plain = provider_double.chat_bodies()
    assert keyed["prompt_cache_key"] == "agentloom-session-7"
    assert "prompt_cache_key" not in plain
    assert_valid_request(keyed)


@pytest.mark.parametrize("cls", [DeepSeekChatGateway, OpenAICompatibleChatGateway])
def test_other_providers_send_no_prompt_cache_key(provider_double, cls):
    gateway(provider_double, cls).complete(ask(cache_key="agentloom-session-7"))
    [body] = provider_double.chat_bodies()
    assert "prompt_cache_key" not in body


@pytest.mark.parametrize("cls", [DeepSeekChatGateway, OpenAICompatibleChatGateway])
def test_deepseek_and_compatible_send_max_tokens_clamped_to_the_cap(provider_double, cls):
    chat = gateway(provider_double, cls, output=OutputLimits(16_000, 8_192))
    chat.complete(ask(max_output_tokens=16_000))
    [body] = provider_double.chat_bodies()
    assert body["max_tokens"] == 8_192
    assert "max_completion_tokens" not in body


def test_a_smaller_request_limit_wins(provider_double):
    chat = gateway(provider_double, output=OutputLimits(4_096, 32_768))
    chat.complete(ask(max_output_tokens=512))
    assert provider_double.chat_bodies()[-1]["max_completion_tokens"] == 512
    assert chat.max_output_tokens == 4_096


def test_the_configured_limit_never_exceeds_the_cap():
    chat = OpenAIChatGateway(
        ModelEndpoint("https://api.openai.com/v1", KEY, "gpt-4o"),
        output=OutputLimits(50_000, 16_384),
    )
    assert chat.max_output_tokens == 16_384
    assert chat.payload(ask(max_output_tokens=100_000))["max_completion_tokens"] == 16_384


def test_tools_and_tool_calls_round_trip(provider_double):
    call = {
        "id": "call_weather_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    provider_double.reply_chat(content=None, tool_calls=[call])
    provider_double.reply_chat(content="It is sunny in Oslo.")
    chat = gateway(provider_double)
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    first = chat.complete(ModelRequest(purpose="action", messages=messages, tools=[WEATHER_TOOL]))
    assert first.message == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert first.finish_reason == "tool_calls"
    messages += [first.message, {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    second = chat.complete(ModelRequest(purpose="action", messages=messages, tools=[WEATHER_TOOL]))
    assert second.message["content"] == "It is sunny in Oslo."
    bodies = provider_double.chat_bodies()
    assert bodies[0]["tools"] == [WEATHER_TOOL]
    assert bodies[1]["messages"][1]["tool_calls"] == [call]
    assert all(not r.violations for r in provider_double.requests)


def test_usage_model_and_finish_reason_are_returned(provider_double):
    usage = {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234}
    provider_double.reply_chat(content="done", usage=usage, model="gpt-4.1-2025-04-14")
    reply = gateway(provider_double).complete(ask())
    assert reply.usage == usage
    assert reply.model == "gpt-4.1-2025-04-14"
    assert reply.finish_reason == "stop"
    assert reply.to_dict()["usage"] == usage


def test_a_request_breaking_ordering_rules_gets_400_from_the_double(provider_double):
    broken = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "Never mind."},
    ]
    chat = gateway(provider_double)
    with pytest.raises(ProviderError) as caught:
        chat.complete(ModelRequest(purpose="action", messages=broken, tools=[WEATHER_TOOL]))
    assert (caught.value.kind, caught.value.status) == ("bad_request", 400)
    [request] = provider_double.requests
    assert any("before tool results" in problem for problem in request.violations)
    assert chat._sleep == []


def test_a_request_breaking_the_schema_gets_400_from_the_double(provider_double):
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(
            ModelRequest(purpose="action", messages=[{"role": "wizard", "content": "hi"}])
        )
    assert caught.value.kind == "bad_request"
    assert provider_double.requests[-1].violations


def test_retries_with_backoff_on_429_and_503_then_succeeds(provider_double):
    provider_double.reply(status=429, json={"error": {"message": "slow down"}})
    provider_double.reply(status=503, json={"error": {"message": "overloaded"}})
    provider_double.reply_chat(content="finally")
    sleeps = Sleeps()
    chat = gateway(provider_double, calls=CallOptions(sleep=sleeps, retry=RetryPolicy(backoff=0.5)))
    assert chat.complete(ask()).message["content"] == "finally"
    assert provider_double.hits("/v1/chat/completions") == 3
    assert sleeps == [0.5, 1.0]


def test_retry_after_is_honoured_up_to_a_limit(provider_double):
    provider_double.reply(status=429, json={}, headers={"Retry-After": "2"})
    provider_double.reply_chat()
    sleeps = Sleeps()
    gateway(
        provider_double, calls=CallOptions(sleep=sleeps, retry=RetryPolicy(backoff=0.5))
    ).complete(ask())
    assert sleeps == [2.0]

    provider_double.reply(status=429, json={}, headers={"Retry-After": "3600"})
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double, calls=CallOptions(sleep=sleeps)).complete(ask())
    assert caught.value.kind == "rate_limit"
    assert sleeps == [2.0]


def test_retries_are_bounded(provider_double):
    for _ in range(5):
        provider_double.reply(status=500, json={"error": {"message": "boom"}})
    sleeps = Sleeps()
    with pytest.raises(ProviderError) as caught:
        calls = CallOptions(sleep=sleeps, retry=RetryPolicy(max_attempts=3, backoff=1.0))
        gateway(provider_double, calls=calls).complete(ask())
    assert (caught.value.kind, caught.value.status) == ("upstream", 500)
    assert provider_double.hits("/v1/chat/completions") == 3
    assert sleeps == [1.0, 2.0]


def test_network_failures_are_retried():
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    sleeps = Sleeps()
    chat = OpenAICompatibleChatGateway(
        ModelEndpoint(f"http://127.0.0.1:{port}/v1", KEY, "m"),
        calls=CallOptions(allow_private_hosts=True, sleep=sleeps),
    )
    with pytest.raises(ProviderError) as caught:
        chat.complete(ask())
    assert caught.value.kind == "network"
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            401,
            {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}},
            "auth",
        ),
        (403, {"error": {"message": "Forbidden"}}, "auth"),
        (402, {"error": {"message": "Insufficient Balance"}}, "quota"),
        (400, {"error": {"message": "bad", "code": "context_length_exceeded"}}, "context_length"),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 131072 tokens. However, "
                    "you requested 150000 tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                }
            },
            "context_length",
        ),
        (
            400,
            {"object": "error", "message": "prompt is longer than max_model_len"},
            "context_length",
        ),
        (413, {"error": {"message": "Request too large"}}, "context_length"),
        (400, {"error": {"message": "Invalid value for 'temperature'"}}, "bad_request"),
        (
            404,
            {"error": {"message": "The model does not exist", "code": "model_not_found"}},
            "model_unknown",
        ),
        (404, {"error": {"message": "Not found"}}, "not_found"),
        (429, {"error": {"message": "quota", "code": "insufficient_quota"}}, "quota"),
    ],
)
def test_rejections_are_not_retried_and_keep_their_kind(provider_double, status, body, kind):
    provider_double.reply(status=status, json=body)
    sleeps = Sleeps()
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double, calls=CallOptions(sleep=sleeps)).complete(ask())
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert provider_double.hits("/v1/chat/completions") == 1
    assert sleeps == []


REASONING_REFUSAL = {
    "error": {
        "message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "says"),
    [
        (
            400,
            {"error": {"message": "too long", "code": "context_length_exceeded"}},
            {},
            "context_length",
            "check the connection's context window",
        ),
        (400, REASONING_REFUSAL, {}, "reasoning_missing", "turn thinking off"),
        (
            429,
            {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}},
            {},
            "quota",
            "top it up",
        ),
        (402, {"error": {"message": "Insufficient Balance"}}, {}, "quota", "top it up"),
        (
            400,
            {"error": {"message": "Model Not Exist", "type": "invalid_request_error"}},
            {},
            "model_unknown",
            "check the connection's model ID",
        ),
        (
            429,
            {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
            {"Retry-After": "41.5"},
            "rate_limit",
            "retry after 42 s",
        ),
    ],
)
def test_known_provider_errors_name_what_to_do(provider_double, status, body, headers, kind, says):
    body = dict(body)
    body["error"] = {**body["error"], "message": body["error"]["message"] + f" {KEY}"}
    for _ in range(3):
        provider_double.reply(status=status, json=body, headers=headers)
    with pytest.raises(ProviderError) as caught:
        gateway(
            provider_double,
            calls=CallOptions(sleep=Sleeps(), retry=RetryPolicy(max_retry_after=5.0)),
        ).complete(ask())
    assert caught.value.kind == kind
    assert says in caught.value.message
    assert KEY not in str(caught.value)
    assert body["error"]["message"] not in str(caught.value)


def test_errors_and_logs_never_carry_the_key_or_the_body(provider_double, caplog):
    caplog.set_level(logging.DEBUG)
    secret_body = f"PROVIDER-SECRET-AUDIT-LINE for key {KEY}"
    provider_double.reply(status=429, json={"error": {"message": secret_body}})
    provider_double.reply(
        status=401, json={"error": {"message": secret_body}}, headers={"X-Echo": KEY}
    )
    chat = gateway(provider_double)
    with pytest.raises(ProviderError) as caught:
        chat.complete(ask())
    assert caught.value.kind == "auth"
    texts = [str(caught.value), repr(caught.value), repr(chat)]
    texts += [record.getMessage() for record in caplog.records]
    assert any("retry" in text for text in texts)
    for text in texts:
        assert KEY not in text
        assert "PROVIDER-SECRET" not in text


def test_reply_parsing_tolerates_compatible_servers():
    reply = parse_chat_completion(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        "tool_calls": [
                            {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
                        ],
                    }
                }
            ]
        }
    )
    assert reply.message["content"] == "ab"
    # No id in the answer: none in what is stored either (responses stored before ids read the
    # same).
    assert reply.id is None and "id" not in reply.to_dict()
    [call] = reply.message["tool_calls"]
    assert call["function"]["arguments"] == '{"city": "Oslo"}'
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert reply.usage is None and reply.finish_reason is None


@pytest.mark.parametrize(
    ("document", "kind"),
    [
        ({"choices": []}, "protocol"),
        ({"choices": [{"message": "hi"}]}, "protocol"),
        ({"choices": [{"message": {"content": 5}}]}, "protocol"),
        (
            {"choices": [{"message": {"content": "x", "tool_calls": [{"function": {}}]}}]},
            "protocol",
        ),
        ({"error": {"message": "internal"}}, "upstream"),
        ([1, 2], "protocol"),
    ],
)
def test_malformed_replies_are_clean_errors(document, kind):
    with pytest.raises(ProviderError) as caught:
        parse_chat_completion(document)
    assert caught.value.kind == kind


def test_gateway_for_provider_picks_the_class():
    expected = {
        "openai": OpenAIChatGateway,
        "deepseek": DeepSeekChatGateway,
        "openai_compatible": OpenAICompatibleChatGateway,
    }
    for provider, cls in expected.items():
        chat = gateway_for_provider(
            provider,
            ModelEndpoint("https://example.com/v1", KEY, "m"),
            output=OutputLimits(1_000, 800),
        )
        assert type(chat) is cls and isinstance(chat, ModelGateway)
        assert chat.provider == provider and chat.model_id == "m"
        assert chat.max_output_tokens == 800
        assert chat.url == "https://example.com/v1/chat/completions"
        assert KEY not in repr(chat)
    with pytest.raises(ValueError):
        gateway_for_provider("anthropic", ModelEndpoint("https://example.com", KEY, "m"))


def test_gateway_for_local_is_the_engines_demo_gateway():
    from agentloom.engine import LocalDemoGateway

    chat = gateway_for_provider("local", ModelEndpoint("", None, "local-demo"))
    assert isinstance(chat, LocalDemoGateway)


def test_constructor_validates_limits():
    with pytest.raises(ValueError):
        OutputLimits(max_output_tokens=0)
    with pytest.raises(ValueError):
        OutputLimits(max_output_cap=-5)
    with pytest.raises(ValueError):
        OpenAIChatGateway(ModelEndpoint("https://api.openai.com/v1", KEY, ""))
    with pytest.raises(ProviderError):
        OpenAIChatGateway(ModelEndpoint("ftp://api.openai.com/v1", KEY, "gpt-4o"))
    assert KEY not in repr(ModelEndpoint("https://api.openai.com/v1", KEY, "gpt-4o"))


def test_a_read_timeout_is_not_retried(provider_double):
    provider_double.reply_chat(content="late")
    provider_double.reply(json={}, delay=3)
    sleeps = Sleeps()
    chat = gateway(provider_double, calls=CallOptions(sleep=sleeps, timeouts=Timeouts(read=0.2)))
    assert chat.complete(ask()).message["content"] == "late"
    with pytest.raises(ProviderError) as caught:
        chat.complete(ask())
    assert caught.value.kind == "timeout"
    assert provider_double.hits("/v1/chat/completions") == 2
    assert sleeps == []


def test_every_gateway_keeps_reasoning_content_and_deepseek_passes_it_back(provider_double):
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    reply = chat_completion(content=None, tool_calls=[call])
    reply["choices"][0]["message"]["reasoning_content"] = "The user wants Oslo's weather."
    provider_double.reply(json=reply)
    provider_double.reply(json=reply)
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    request = ModelRequest(purpose="action", messages=messages, tools=[WEATHER_TOOL])
    deepseek = gateway(provider_double, DeepSeekChatGateway).complete(request)
    assert deepseek.message["reasoning_content"] == "The user wants Oslo's weather."
    # Every reply's reasoning is kept (the journal holds it); OpenAI is never sent it back.
    openai = gateway(provider_double)
    kept = openai.complete(request).message
    assert kept["reasoning_content"] == "The user wants Oslo's weather."
    later = [*messages, kept, {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]
    sent = openai.payload(ModelRequest(purpose="action", messages=later, tools=[WEATHER_TOOL]))
    assert not any("reasoning_content" in m for m in sent["messages"])
    # Sent back, it is still a request OpenAI's contract accepts.
    follow_up = [
        *messages,
        deepseek.message,
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    ]
    gateway(provider_double, DeepSeekChatGateway).complete(
        ModelRequest(purpose="action", messages=follow_up, tools=[WEATHER_TOOL])
    )
    assert provider_double.chat_bodies()[-1]["messages"][1]["reasoning_content"]
    assert all(not r.violations for r in provider_double.requests)


def test_a_completion_keeps_its_id_and_reads_back_from_what_is_stored():
    from agentloom.engine import ModelResponse

    document = {
        "id": "chatcmpl-NONCE-ID",
        "model": "gpt-4o",
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    reply = parse_chat_completion(document)
    assert reply.id == "chatcmpl-NONCE-ID"
    assert ModelResponse.from_dict(reply.to_dict()) == reply
