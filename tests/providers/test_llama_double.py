"""The self-hosted server double keeps the facts measured on, or read from, the real servers.

Each test states one fact of llama-cpp-python's server (0.3.36, measured on this project's
machine 2026-12-02), llama.cpp's server (its `tools/server` README and source, read
2026-12-02), vLLM's `/tokenize` or Ollama's truncation, and checks the double against it.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.llama_double import (
    MODEL_PATH,
    LlamaServerDouble,
    count_tokens,
    prompt_tokens,
    render_prompt,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def server():
    with LlamaServerDouble() as double:
        yield double


@pytest.fixture
def llamacpp():
    with LlamaServerDouble("llama.cpp") as double:
        yield double


def chat(double, messages, **fields):
    body = {"model": double.model_path, "messages": messages, **fields}
    return httpx.post(f"{double.base_url}/chat/completions", json=body, timeout=10)


def long_messages(words: int):
    return [{"role": "user", "content": "word " * words}]


def events(response) -> list[str]:
    return [line for line in response.text.split("\n") if line]


# --- the tokenizer and the template --------------------------------------------------------------


def test_the_tokenizer_counts_ten_letters_three_digits_or_four_signs_a_token():
    assert count_tokens("") == 0
    assert count_tokens("the cat") == 2
    assert count_tokens("consectetur") == 2  # "consectetu" + "r"
    assert count_tokens("12345") == 2  # "123" + "45"
    assert count_tokens('{"a": 1}') == 5  # '{"', 'a', '":', '1', '}'
    assert count_tokens("<|im_start|>user\nhi<|im_end|>") == 4
    # Never more tokens than bytes: the byte estimator stays an upper bound.
    text = "x!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ é 中"
    assert count_tokens(text) <= len(text.encode())


def test_the_template_counts_each_message_the_tools_and_the_reply_priming():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = render_prompt(messages, None)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt_tokens(messages, None) == count_tokens(text) == 15
    assert prompt_tokens(messages, TOOLS) > prompt_tokens(messages, None) + 20
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        ],
    }
    assert "<tool_call>" in render_prompt([call], None)


# --- llama-cpp-python -----------------------------------------------------------------------------


def test_llama_cpp_python_lists_the_model_path_and_no_window_and_has_no_props(server):
    listed = httpx.get(f"{server.base_url}/models").json()
    [model] = listed["data"]
    assert model["id"] == MODEL_PATH
    assert not {"context_length", "max_model_len", "context_window", "meta"} & set(model)
    assert httpx.get(f"{server.origin}/props").status_code == 404


def test_llama_cpp_python_tokenizes_raw_text_without_the_template(server):
    text = "Hello there, how are you?"
    tokens = httpx.post(f"{server.origin}/extras/tokenize", json={"input": text}).json()
    count = httpx.post(f"{server.origin}/extras/tokenize/count", json={"input": text}).json()
    assert len(tokens["tokens"]) == count["count"] == count_tokens(text) == 7
    # Only llama.cpp's route shape is refused here: this server has no `/tokenize`.
    assert httpx.post(f"{server.origin}/tokenize", json={"content": text}).status_code == 404


def test_a_non_streamed_reply_has_usage_with_the_templated_prompt_count(server):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    answer = chat(server, messages, max_tokens=64).json()
    assert answer["usage"]["prompt_tokens"] == prompt_tokens(messages, None)
    assert answer["choices"][0]["message"]["content"].startswith("You asked: What")
    assert server.counted[-1].prompt_tokens == prompt_tokens(messages, None)


def test_a_streamed_reply_carries_no_usage_even_when_asked(server):
    messages = [{"role": "user", "content": "hi"}]
    response = chat(
        server, messages, max_tokens=64, stream=True, stream_options={"include_usage": True}
    )
    assert response.status_code == 200
    lines = events(response)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks and not any("usage" in chunk and chunk["usage"] for chunk in chunks)
    assert all(chunk["choices"] for chunk in chunks)
    # The switch gives it back, for the servers that do send it.
    server.stream_usage = True
    response = chat(
        server, messages, max_tokens=64, stream=True, stream_options={"include_usage": True}
    )
    assert json.loads(events(response)[-2][6:])["usage"]["prompt_tokens"] > 0


def test_a_prompt_of_the_window_or_more_is_refused_with_llama_cpp_pythons_words(server):
    server.n_ctx = 100
    fits = long_messages(80)
    assert prompt_tokens(fits, None) < 100
    # A prompt below the window is answered, its output limit cut to what is left.
    answer = chat(server, fits, max_tokens=500).json()
    assert answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"] <= 100
    over = long_messages(120)
    count = prompt_tokens(over, None)
    response = chat(server, over, max_tokens=10)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": f"This model's maximum context length is 100 tokens. However, you requested "
        f"{count + 10} tokens ({count} in the messages, 10 in the completion). Please reduce the "
        "length of the messages or completion.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    assert [c.outcome for c in server.counted] == ["ok", "refused"]
    assert server.refusals()[0].prompt_tokens == count


def test_a_streamed_overflow_is_a_200_event_stream_with_an_empty_body(server):
    server.n_ctx = 50
    response = chat(server, long_messages(60), max_tokens=10, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b""


def test_tools_are_rendered_only_with_tool_choice_and_auto_streamed_ends_empty(server):
    server.tool_choice_required = True
    messages = [{"role": "user", "content": '/tool echo {"text": "hi"}'}]
    plain = chat(server, messages, tools=TOOLS, max_tokens=64).json()
    assert plain["usage"]["prompt_tokens"] == prompt_tokens(messages, None)
    assert "tool_calls" not in plain["choices"][0]["message"]
    chosen = chat(server, messages, tools=TOOLS, tool_choice="auto", max_tokens=64).json()
    assert chosen["usage"]["prompt_tokens"] == prompt_tokens(messages, TOOLS)
    assert chosen["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "echo"
    streamed = chat(server, messages, tools=TOOLS, tool_choice="auto", max_tokens=64, stream=True)
    assert streamed.status_code == 200 and streamed.content == b""


def test_the_model_calls_a_tool_then_cites_its_result(server):
    messages = [{"role": "user", "content": '/tool echo {"text": "NONCE-7"}'}]
    reply = chat(server, messages, tools=TOOLS, tool_choice="auto", max_tokens=64)
    reply = reply.json()["choices"][0]
    assert reply["finish_reason"] == "tool_calls"
    [call] = reply["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"text": "NONCE-7"}
    result = {"role": "tool", "tool_call_id": call["id"], "content": "echo: NONCE-7"}
    # The reply's content is null, which the server refuses when it is sent back.
    assert reply["message"]["content"] is None
    refused = chat(server, [*messages, reply["message"], result], tools=TOOLS, max_tokens=64)
    assert refused.status_code == 500
    assert "Input should be a valid string" in refused.json()["error"]["message"]
    messages += [{**reply["message"], "content": ""}, result]
    answer = chat(server, messages, tools=TOOLS, max_tokens=64).json()["choices"][0]
    assert answer["message"]["content"] == "Tool results: echo: NONCE-7"


def test_a_reply_stops_at_its_output_limit(server):
    reply = chat(server, long_messages(50), max_tokens=3).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 3


def test_a_request_the_openai_contract_refuses_is_refused(server):
    response = chat(server, [{"role": "tool", "content": "x", "tool_call_id": "nope"}])
    assert response.status_code == 400
    assert server.requests[-1].violations


# --- llama.cpp ------------------------------------------------------------------------------------


def test_llama_cpp_props_report_the_window_it_was_started_with(llamacpp):
    llamacpp.n_ctx = 4096
    props = httpx.get(f"{llamacpp.origin}/props").json()
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert props["model_path"] == MODEL_PATH
    [model] = httpx.get(f"{llamacpp.base_url}/models").json()["data"]
    # The training maximum is not the window: 8,192 against the 4,096 it runs with.
    assert model["id"] == MODEL_PATH and model["meta"]["n_ctx_train"] == 8192


def test_llama_cpp_tokenizes_content_into_tokens(llamacpp):
    text = "<|im_start|>user\nhello world<|im_end|>"
    answer = httpx.post(f"{llamacpp.origin}/tokenize", json={"content": text}).json()
    assert len(answer["tokens"]) == count_tokens(text) == 5
    assert httpx.post(f"{llamacpp.origin}/extras/tokenize", json={"input": text}).status_code == 404


def test_llama_cpp_applies_its_template_and_tokenizing_that_gives_the_prompt_count(llamacpp):
    messages = [{"role": "user", "content": '/tool echo {"text": "x"}'}]
    body = {"messages": messages, "tools": TOOLS}
    prompt = httpx.post(f"{llamacpp.origin}/apply-template", json=body).json()["prompt"]
    tokens = httpx.post(f"{llamacpp.origin}/tokenize", json={"content": prompt}).json()["tokens"]
    answer = chat(llamacpp, messages, tools=TOOLS, max_tokens=64).json()
    assert len(tokens) == answer["usage"]["prompt_tokens"] == prompt_tokens(messages, TOOLS)


@pytest.mark.parametrize("stream", [False, True])
def test_llama_cpp_refuses_an_overflow_with_400_and_both_counts(llamacpp, stream):
    llamacpp.n_ctx = 50
    messages = long_messages(60)
    count = prompt_tokens(messages, None)
    response = chat(llamacpp, messages, max_tokens=10, stream=stream)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": 400,
            "message": f"request ({count} tokens) exceeds the available context size (50 "
            "tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": count,
            "n_ctx": 50,
        }
    }


def test_older_llama_cpp_sends_the_overflow_as_an_error_event_inside_a_200_stream(llamacpp):
    llamacpp.n_ctx = 50
    llamacpp.overflow = "llama.cpp-error-event"
    response = chat(llamacpp, long_messages(60), max_tokens=10, stream=True)
    assert response.status_code == 200
    first, last = events(response)
    assert first.startswith("error: ") and last == "data: [DONE]"
    assert json.loads(first[7:])["type"] == "exceed_context_size_error"
    llamacpp.overflow = "llama.cpp-data-error"
    response = chat(llamacpp, long_messages(60), max_tokens=10, stream=True)
    [only] = events(response)
    assert json.loads(only[6:])["error"]["n_ctx"] == 50


# --- vLLM and Ollama ------------------------------------------------------------------------------


def test_vllm_tokenizes_a_prompt_or_templated_messages_with_its_max_model_len():
    with LlamaServerDouble("vllm", n_ctx=2048) as double:
        prompt = httpx.post(
            f"{double.origin}/tokenize", json={"model": "m", "prompt": "hello world"}
        ).json()
        assert prompt["count"] == 2 and prompt["max_model_len"] == 2048
        messages = [{"role": "user", "content": "hello"}]
        templated = httpx.post(
            f"{double.origin}/tokenize", json={"model": "m", "messages": messages}
        ).json()
        assert templated["count"] == prompt_tokens(messages, None)
        [model] = httpx.get(f"{double.base_url}/models").json()["data"]
        assert model["max_model_len"] == 2048


def test_ollama_cuts_a_long_prompt_silently_and_reports_what_it_evaluated():
    with LlamaServerDouble("ollama", n_ctx=2048) as double:
        messages = long_messages(300)
        count = prompt_tokens(messages, None)
        body = {
            "model": double.model_path,
            "messages": messages,
            "stream": False,
            "options": {"num_ctx": 200, "num_predict": 20},
        }
        answer = httpx.post(f"{double.origin}/api/chat", json=body).json()
        assert count > 200 and answer["prompt_eval_count"] == 200
        assert answer["done"] and answer["message"]["content"]
        assert double.counted[-1].outcome == "truncated"
        # Its OpenAI-compatible route runs with the server's own window, cut the same way.
        reply = chat(double, long_messages(3000), max_tokens=20).json()
        assert reply["usage"]["prompt_tokens"] == 2048
        assert not double.refusals()


# --- a DeepSeek-style model behind a generic endpoint --------------------------------------------


def test_a_deepseek_model_returns_reasoning_and_refuses_a_tool_span_without_it(server):
    server.deepseek_reasoning = True
    messages = [{"role": "user", "content": '/tool echo {"text": "x"}'}]
    reply = chat(server, messages, tools=TOOLS, tool_choice="auto", max_tokens=64)
    reply = {**reply.json()["choices"][0]["message"], "content": ""}
    assert reply["reasoning_content"].startswith("thinking NONCE-R")
    call = reply["tool_calls"][0]
    result = {"role": "tool", "tool_call_id": call["id"], "content": "echo: x"}
    stripped = {k: v for k, v in reply.items() if k != "reasoning_content"}
    refused = chat(server, [*messages, stripped, result], tools=TOOLS, max_tokens=64)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "The `reasoning_content` in the thinking mode must be passed back to the API."
    )
    passed_back = chat(server, [*messages, reply, result], tools=TOOLS, max_tokens=64)
    assert passed_back.status_code == 200


# --- a tokenizer that stops answering -------------------------------------------------------------


def test_the_tokenizer_can_fail_or_hang_while_chat_still_answers(server):
    server.tokenizer_failure = "error"
    failed = httpx.post(f"{server.origin}/extras/tokenize/count", json={"input": "hi"})
    assert failed.status_code == 500
    server.tokenizer_failure = "slow"
    server.tokenizer_delay = 5.0
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.origin}/extras/tokenize/count", json={"input": "hi"}, timeout=0.2)
    assert chat(server, [{"role": "user", "content": "hi"}], max_tokens=8).status_code == 200
    assert server.tokenize_calls == 2
