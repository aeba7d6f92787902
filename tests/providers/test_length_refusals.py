"""Every way a server says "too long" is `context_length`, with the window and size it names.

Each wording comes from the server's own source or documentation (read 2026-12-02) or was
measured here; the comment beside each case says which. The numbers are parsed; the evidence
kept with them is fixed text and those numbers, never the server's words.
"""

from __future__ import annotations

import pickle

import pytest

from agentloom.engine import CallStream, ModelRequest
from agentloom.providers import CallOptions, ModelEndpoint, ProviderError, RetryPolicy
from agentloom.providers.chat import OpenAICompatibleChatGateway

QUESTION = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])


def gateway(double, *, stream=False, attempts=3):
    calls = CallOptions(
        allow_private_hosts=True,
        sleep=lambda _: None,
        stream=stream,
        retry=RetryPolicy(max_attempts=attempts),
    )
    return OpenAICompatibleChatGateway(ModelEndpoint(double.base_url, "sk-x", "m"), calls=calls)


def error(message, **fields):
    return {"error": {"message": message, **fields}}


# (case id, HTTP status, body, window, requested)
WORDINGS = [
    # OpenAI's error-codes guide: code `context_length_exceeded` and this sentence.
    (
        "openai",
        400,
        error(
            "This model's maximum context length is 8192 tokens. However, you requested 9850 "
            "tokens (9000 in the messages, 850 in the completion). Please reduce the length of "
            "the messages or completion.",
            type="invalid_request_error",
            param="messages",
            code="context_length_exceeded",
        ),
        8192,
        9850,
    ),
    # llama-cpp-python 0.3.36 server, non-streamed overflow, as measured here.
    (
        "llama-cpp-python",
        400,
        error(
            "This model's maximum context length is 4096 tokens. However, you requested 5020 "
            "tokens (5010 in the messages, 10 in the completion). Please reduce the length of "
            "the messages or completion.",
            type="invalid_request_error",
            param="messages",
            code="context_length_exceeded",
        ),
        4096,
        5020,
    ),
    # llama-cpp-python's Llama ValueError as raised (llama_cpp/server/errors.py matches it).
    (
        "llama-cpp-python-raw",
        500,
        error(
            "Requested tokens (5010) exceed context window of 4096", type="internal_server_error"
        ),
        4096,
        5010,
    ),
    # vLLM vllm/entrypoints/openai/serving_engine.py (earlier versions).
    (
        "vllm-serving-engine",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        4096,
        5000,
    ),
    # vLLM vllm/renderers/params.py, the total with "at least".
    (
        "vllm-total",
        400,
        error(
            "This model's maximum context length is 8192 tokens. However, you requested 64 "
            "output tokens and your prompt contains at least 8129 input tokens, for a total of "
            "at least 8193 tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens.",
            type="BadRequestError",
            code=400,
        ),
        8192,
        8193,
    ),
    # vLLM vllm/renderers/params.py `_token_len_check`.
    (
        "vllm-passed",
        400,
        error(
            "You passed 10000 input tokens and requested 64 output tokens. However, the model's "
            "context length is only 8192 tokens, resulting in a maximum input length of 8128 "
            "tokens. Please reduce the length of the input prompt.",
            type="BadRequestError",
            code=400,
        ),
        8192,
        10064,
    ),
    # vLLM, output limit too large for the prompt (answers observed in 2025).
    (
        "vllm-max-tokens",
        400,
        error(
            "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum "
            "context length is 4096 tokens and your request has 2778 input tokens "
            "(8000 > 4096 - 2778). None",
            type="BadRequestError",
            code=400,
        ),
        4096,
        10778,
    ),
    # vLLM, input alone too long (answers observed in 2025).
    (
        "vllm-input",
        400,
        error(
            "This model's maximum context length is 1536 tokens. However, your request has "
            "4176 input tokens. Please reduce the length of the input messages.",
            type="BadRequestError",
            code=400,
        ),
        1536,
        4176,
    ),
    # vLLM vllm/renderers/params.py `TokenizeParams.__post_init__` (no size of the request).
    (
        "vllm-max-model-len",
        400,
        error(
            "max_completion_tokens=131072cannot be greater than max_model_len="
            "max_total_tokens=65536. Please request fewer output tokens.",
            type="BadRequestError",
            code=400,
        ),
        65536,
        None,
    ),
    # llama.cpp tools/server/server-context.cpp today: the words, and the n_ctx/n_prompt_tokens
    # fields of tools/server/server-task.cpp.
    (
        "llama.cpp",
        400,
        error(
            "request (4390 tokens) exceeds the available context size (4096 tokens), try "
            "increasing it",
            code=400,
            type="exceed_context_size_error",
            n_prompt_tokens=4390,
            n_ctx=4096,
        ),
        4096,
        4390,
    ),
    # llama.cpp as github.com/ggml-org/llama.cpp/pull/15780 (2025-09-03) shows it: a 500,
    # the numbers in fields only.
    (
        "llama.cpp-2025-09",
        500,
        error(
            "the request exceeds the available context size. try increasing the context size "
            "or enable context shift",
            code=500,
            type="exceed_context_size_error",
            n_prompt_tokens=1407,
            n_ctx=256,
        ),
        256,
        1407,
    ),
    # llama.cpp server-context.cpp, a model that cannot split its batch (numbers in words only).
    (
        "llama.cpp-no-split",
        400,
        error(
            "input (600 tokens) is larger than the max context size (512 tokens). skipping",
            code=400,
            type="exceed_context_size_error",
        ),
        512,
        600,
    ),
    # llama.cpp, the cache full in the middle of an answer (an answer quoted at
    # github.com/ggml-org/llama.cpp/issues/19774, 2026-02-21).
    (
        "llama.cpp-cache-full",
        500,
        error("Context size has been exceeded.", code=500, type="server_error"),
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("status", "body", "window", "requested"),
    [case[1:] for case in WORDINGS],
    ids=[case[0] for case in WORDINGS],
)
def test_each_wording_is_a_length_refusal_with_its_numbers(
    provider_double, status, body, window, requested
):
    provider_double.reply(status=status, json=body)
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION)
    refusal = caught.value
    assert (refusal.kind, refusal.window, refusal.requested) == (
        "context_length",
        window,
        requested,
    )
    assert refusal.retryable is False and refusal.status == status
    # Refused once, never retried: the same request would be refused again.
    assert provider_double.hits("/v1/chat/completions") == 1
    assert refusal.evidence == expected_evidence(window, requested)
    assert "try increasing" not in str(refusal) and "However" not in str(refusal)


# What each wording says the request's input alone held (its output limit left out).
INPUT_TOKENS = {
    "openai": 9000,
    "llama-cpp-python": 5010,
    "llama-cpp-python-raw": 5010,
    "vllm-serving-engine": 4000,
    "vllm-total": 8129,
    "vllm-passed": 10000,
    "vllm-max-tokens": 2778,
    "vllm-input": 4176,
    "llama.cpp": 4390,
    "llama.cpp-2025-09": 1407,
    "llama.cpp-no-split": 600,
}


@pytest.mark.parametrize("case", WORDINGS, ids=[case[0] for case in WORDINGS])
def test_each_wording_says_what_the_input_alone_held_where_it_says_it_apart(provider_double, case):
    name, status, body = case[:3]
    provider_double.reply(status=status, json=body)
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION)
    assert caught.value.input_tokens == INPUT_TOKENS.get(name)
    # Carried across a worker's pickling as the other numbers are.
    assert pickle.loads(pickle.dumps(caught.value)).input_tokens == INPUT_TOKENS.get(name)


def expected_evidence(window, requested):
    if window and requested:
        return f"maximum context length is {window} tokens; the request needed {requested} tokens"
    if window:
        return f"maximum context length is {window} tokens"
    return "the server refused the request as too long"


@pytest.mark.parametrize(
    ("status", "body", "window", "requested"),
    [case[1:] for case in WORDINGS],
    ids=[case[0] for case in WORDINGS],
)
def test_each_wording_as_an_error_event_in_a_200_stream(
    provider_double, status, body, window, requested
):
    provider_double.reply_stream([body])
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double, stream=True).complete(QUESTION, stream=CallStream(print))
    assert (caught.value.kind, caught.value.window, caught.value.requested) == (
        "context_length",
        window,
        requested,
    )
    assert provider_double.hits("/v1/chat/completions") == 1


def test_a_413_is_a_length_refusal_without_numbers(provider_double):
    provider_double.reply(status=413, body=b"Request Entity Too Large")
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION)
    assert caught.value.kind == "context_length" and caught.value.window is None


def test_a_rate_limit_that_names_tokens_is_still_a_rate_limit(provider_double):
    # OpenAI's tokens-per-minute limit names sizes too; its 429 is a rate limit, not a window.
    provider_double.reply(
        status=429,
        json=error(
            "Request too large for gpt-4o: Limit 30000, Requested 31000 tokens; maximum context "
            "length is 128000 tokens",
            code="rate_limit_exceeded",
        ),
        headers={"Retry-After": "0"},
    )
    provider_double.reply_chat(content="fine")
    reply = gateway(provider_double).complete(QUESTION)
    assert reply.message["content"] == "fine"


def test_junk_numbers_are_not_windows(provider_double):
    provider_double.reply(
        status=400,
        json=error(
            "This model's maximum context length is 999999999999 tokens. However, you requested "
            "0 tokens",
            code="context_length_exceeded",
        ),
    )
    with pytest.raises(ProviderError) as caught:
        gateway(provider_double).complete(QUESTION)
    assert (caught.value.kind, caught.value.window, caught.value.requested) == (
        "context_length",
        None,
        None,
    )


def test_the_numbers_survive_pickling():
    error = ProviderError(
        "context_length",
        status=400,
        window=4096,
        requested=5020,
        evidence="maximum context length is 4096 tokens; the request needed 5020 tokens",
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.status, copy.window, copy.requested, copy.evidence) == (
        "context_length",
        400,
        4096,
        5020,
        error.evidence,
    )
    assert str(copy) == str(error)
