"""Counting with the server's own tokenizer: each server's route and shape, at the origin only,
through the guarded client, within a time bound, and every failure a ProviderError."""

from __future__ import annotations

import time

import pytest

from agentloom.providers import (
    TOKENIZER_ROUTES,
    CallOptions,
    ModelEndpoint,
    ProviderError,
    ServerTokenizer,
    probe_tokenizer,
)
from agentloom.providers.server_tokens import COUNT_CACHE_ITEMS, MAX_COUNT_CHARS, _CountCache
from tests.support.provider_double import rendered, words

CALLS = CallOptions(allow_private_hosts=True)
TEXTS = ["one two three", "", "four five", "one two three"]


def endpoint(double, key="sk-tok"):
    # The base URL has the `/v1` a connection stores; the tokenizer lives at the root.
    return ModelEndpoint(double.base_url, key, "/models/smol.gguf")


@pytest.mark.parametrize(
    ("server", "route", "path"),
    [
        ("llama.cpp", "llama.cpp:/tokenize", "/tokenize"),
        ("vllm", "vllm:/tokenize", "/tokenize"),
        ("llama-cpp-python", "llama-cpp-python:/extras/tokenize/count", "/extras/tokenize/count"),
    ],
)
def test_each_server_counts_in_its_own_shape_at_the_origin(provider_double, server, route, path):
    provider_double.tokenizer = server
    counts = ServerTokenizer(endpoint(provider_double), route, calls=CALLS).count(TEXTS)
    assert counts == [words(text) for text in TEXTS] == [3, 0, 2, 3]
    sent = [request for request in provider_double.requests if request.path == path]
    # One request per distinct non-empty text, on one connection, with the connection's key.
    assert len(sent) == 2 == len(provider_double.requests)
    assert provider_double.connections == 1
    assert all(request.headers["authorization"] == "Bearer sk-tok" for request in sent)
    bodies = [request.json for request in sent]
    if server == "llama.cpp":
        assert bodies[0] == {"content": "one two three", "add_special": False}
    elif server == "vllm":
        assert bodies[0] == {
            "model": "/models/smol.gguf",
            "prompt": "one two three",
            "add_special_tokens": False,
        }
    else:
        assert bodies[0] == {"input": "one two three", "model": "/models/smol.gguf"}


@pytest.mark.parametrize("server", ["llama.cpp", "vllm", "llama-cpp-python"])
def test_the_probe_finds_the_route_the_server_answers(provider_double, server):
    provider_double.tokenizer = server
    route = probe_tokenizer(endpoint(provider_double), calls=CALLS)
    assert route is not None and route.startswith(server + ":")
    assert route in TOKENIZER_ROUTES
    assert all(not request.path.startswith("/v1") for request in provider_double.requests)


def test_a_server_without_a_tokenizer_has_none(provider_double):
    assert probe_tokenizer(endpoint(provider_double), calls=CALLS) is None
    assert {request.path for request in provider_double.requests} == {
        "/tokenize",
        "/extras/tokenize/count",
    }


def test_a_missing_route_is_a_provider_error(provider_double):
    with pytest.raises(ProviderError) as caught:
        ServerTokenizer(endpoint(provider_double), "llama.cpp:/tokenize", calls=CALLS).count(["a"])
    assert caught.value.kind == "not_found"


@pytest.mark.parametrize(
    "answer", [{"tokens": "many"}, {"count": -1}, ["1"], {"count": 3, "tokens": [1, 2, 3]}]
)
def test_an_unreadable_answer_is_a_protocol_error(provider_double, answer):
    provider_double.reply(path="/tokenize", json=answer)
    with pytest.raises(ProviderError) as caught:
        ServerTokenizer(endpoint(provider_double), "llama.cpp:/tokenize", calls=CALLS).count(["a"])
    assert caught.value.kind == "protocol"


def test_private_addresses_need_the_setting(provider_double):
    provider_double.tokenizer = "llama.cpp"
    tokenizer = ServerTokenizer(endpoint(provider_double), "llama.cpp:/tokenize")
    with pytest.raises(ProviderError) as caught:
        tokenizer.count(["a b"])
    assert caught.value.kind == "address_refused"
    assert provider_double.requests == []
    assert probe_tokenizer(endpoint(provider_double)) is None


def test_one_count_call_is_bounded_in_time(provider_double):
    # Each answer takes 0.7 s: the second request is given only the 0.3 s left, not its own 1 s.
    provider_double.tokenizer = "llama.cpp"
    for _ in range(3):
        provider_double.reply(path="/tokenize", json={"tokens": [1]}, delay=0.7)
    tokenizer = ServerTokenizer(
        endpoint(provider_double), "llama.cpp:/tokenize", calls=CALLS, time_limit=1.0
    )
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        tokenizer.count(["text one", "text two", "text three"])
    assert caught.value.kind == "timeout"
    assert time.monotonic() - started < 1.3
    assert provider_double.hits("/tokenize") == 2


def test_too_much_text_is_refused_before_any_request(provider_double):
    provider_double.tokenizer = "llama.cpp"
    tokenizer = ServerTokenizer(endpoint(provider_double), "llama.cpp:/tokenize", calls=CALLS)
    with pytest.raises(ProviderError) as caught:
        tokenizer.count(["x" * (MAX_COUNT_CHARS + 1)])
    assert caught.value.kind == "bad_request"
    assert provider_double.requests == []


def test_an_unknown_route_is_a_programming_error(provider_double):
    with pytest.raises(ValueError, match="unknown tokenizer route"):
        ServerTokenizer(endpoint(provider_double), "ollama:/api/tokenize", calls=CALLS)


def test_the_key_never_shows_in_the_repr(provider_double):
    tokenizer = ServerTokenizer(endpoint(provider_double, key="sk-secret-1"), "vllm:/tokenize")
    assert "sk-secret-1" not in repr(tokenizer)
    assert tokenizer.url == provider_double.origin + "/tokenize"


CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is two plus two?"},
]
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]


@pytest.mark.parametrize("server", ["llama.cpp", "vllm"])
def test_a_whole_request_is_counted_as_the_server_renders_it(provider_double, server):
    provider_double.tokenizer = server
    route = "llama.cpp:/tokenize" if server == "llama.cpp" else "vllm:/tokenize"
    tokenizer = ServerTokenizer(endpoint(provider_double), route, calls=CALLS)
    # The template and the tool schemas are in the count, not only the message texts.
    assert tokenizer.count_request(CHAT, TOOLS) == words(rendered(CHAT, TOOLS))
    assert tokenizer.count_request(CHAT) == words(rendered(CHAT))
    assert words(rendered(CHAT, TOOLS)) > sum(tokenizer.count([m["content"] for m in CHAT]))
    if server == "llama.cpp":
        template = [r.json for r in provider_double.requests if r.path == "/apply-template"]
        assert template[0] == {"messages": CHAT, "tools": TOOLS}
        counted = next(r.json for r in provider_double.requests if r.path == "/tokenize")
        # Special tokens counted as the chat route tokenizes its prompt.
        assert counted["add_special"] is True and counted["parse_special"] is True
    else:
        asked = next(r.json for r in provider_double.requests if r.path == "/tokenize")
        assert asked["messages"] == CHAT and asked["tools"] == TOOLS
        assert asked["model"] == "/models/smol.gguf"


def test_llama_cpp_python_cannot_count_a_whole_request(provider_double):
    provider_double.tokenizer = "llama-cpp-python"
    tokenizer = ServerTokenizer(
        endpoint(provider_double), "llama-cpp-python:/extras/tokenize/count", calls=CALLS
    )
    assert tokenizer.count_request(CHAT, TOOLS) is None
    assert provider_double.requests == []


def test_counts_are_kept_for_the_process_per_origin_route_and_model(provider_double):
    provider_double.tokenizer = "llama-cpp-python"
    route = "llama-cpp-python:/extras/tokenize/count"
    path = "/extras/tokenize/count"
    first = ServerTokenizer(endpoint(provider_double), route, calls=CALLS)
    assert first.count(["one two three", "four five"]) == [3, 2]
    assert provider_double.hits(path) == 2
    # Another tokenizer of the same server model (a new run, the door) asks only the new text.
    again = ServerTokenizer(endpoint(provider_double), route, calls=CALLS)
    assert again.count(["four five", "six", "one two three"]) == [2, 1, 3]
    assert provider_double.hits(path) == 3
    # Another model on the same server is counted anew, and so is a tokenizer not sharing.
    other = ModelEndpoint(provider_double.base_url, "sk-tok", "/models/other.gguf")
    assert ServerTokenizer(other, route, calls=CALLS).count(["six"]) == [1]
    assert provider_double.hits(path) == 4
    alone = ServerTokenizer(endpoint(provider_double), route, calls=CALLS, shared=False)
    assert alone.count(["six"]) == [1]
    assert provider_double.hits(path) == 5
    # The probe always asks the server.
    assert probe_tokenizer(endpoint(provider_double), calls=CALLS) == route
    assert probe_tokenizer(endpoint(provider_double), calls=CALLS) == route
    assert provider_double.hits(path) == 7


def test_a_failed_count_keeps_nothing(provider_double):
    provider_double.tokenizer = "llama.cpp"
    provider_double.reply(path="/tokenize", status=500, json={"error": {"message": "down"}})
    tokenizer = ServerTokenizer(endpoint(provider_double), "llama.cpp:/tokenize", calls=CALLS)
    with pytest.raises(ProviderError):
        tokenizer.count(["one two"])
    assert tokenizer.count(["one two"]) == [2]
    assert provider_double.hits("/tokenize") == 2


def test_the_process_cache_is_bounded_least_recently_used_first():
    assert COUNT_CACHE_ITEMS == 100_000
    cache = _CountCache(2)
    cache.put(("o", "r", "m", b"a"), 1)
    cache.put(("o", "r", "m", b"b"), 2)
    assert cache.get(("o", "r", "m", b"a")) == 1
    cache.put(("o", "r", "m", b"c"), 3)
    assert len(cache) == 2
    assert cache.get(("o", "r", "m", b"b")) is None
    assert cache.get(("o", "r", "m", b"a")) == 1
