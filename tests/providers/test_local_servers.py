"""Ollama and LM Studio windows and chat, against doubles on 127.0.0.1 speaking their shapes."""

from __future__ import annotations

import functools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentloom.engine import ModelRequest
from agentloom.providers import (
    CallOptions,
    ModelEndpoint,
    ProviderError,
    discover_models,
    gateway_for_provider,
    secure_client,
)
from agentloom.providers.local_servers import NOT_LOADED_WARNING, OLLAMA_DEFAULT_WARNING

OLLAMA_TAGS = {
    "models": [
        {
            "name": "llama3.2:latest",
            "model": "llama3.2:latest",
            "size": 2019393189,
            "digest": "a80c4f17acd5",
            "details": {"format": "gguf", "family": "llama", "families": ["llama"]},
        },
        {
            "name": "qwen3:8b",
            "model": "qwen3:8b",
            "details": {"format": "gguf", "family": "qwen3", "families": ["qwen3"]},
        },
        {
            "name": "nomic-embed-text:latest",
            "model": "nomic-embed-text:latest",
            "details": {"format": "gguf", "family": "nomic-bert", "families": ["nomic-bert"]},
        },
    ]
}
OLLAMA_PS = {
    "models": [
        {
            "name": "qwen3:8b",
            "model": "qwen3:8b",
            "size": 6591830464,
            "details": {"format": "gguf", "family": "qwen3"},
            "expires_at": "2026-11-30T16:47:07.93355-07:00",
            "size_vram": 5333539264,
            "context_length": 8192,
        }
    ]
}
LMSTUDIO_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "qwen2-vl-7b-instruct",
            "object": "model",
            "type": "vlm",
            "publisher": "mlx-community",
            "arch": "qwen2_vl",
            "compatibility_type": "mlx",
            "quantization": "4bit",
            "state": "not-loaded",
            "max_context_length": 32768,
        },
        {
            "id": "meta-llama-3.1-8b-instruct",
            "object": "model",
            "type": "llm",
            "publisher": "lmstudio-community",
            "arch": "llama",
            "compatibility_type": "gguf",
            "quantization": "Q4_K_M",
            "state": "loaded",
            "max_context_length": 131072,
            "loaded_context_length": 4096,
        },
        {
            "id": "text-embedding-nomic-embed-text-v1.5",
            "object": "model",
            "type": "embeddings",
            "state": "not-loaded",
            "max_context_length": 2048,
        },
    ],
}
OLLAMA_CHAT = {
    "model": "qwen3:8b",
    "created_at": "2026-11-30T12:00:00Z",
    "message": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "calculator", "arguments": {"expression": "1+1"}}}],
    },
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 42,
    "eval_count": 7,
}


class LocalServerDouble:
    """A server on 127.0.0.1 answering GETs and POSTs from a path -> JSON table."""

    def __init__(self, answers):
        self.answers = answers
        self.requests: list[tuple[str, str, object]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                double.requests.append((method, self.path, body))
                payload = double.answers.get(self.path)
                data = json.dumps(payload).encode()
                self.send_response(200 if payload is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self):
        return [(method, path) for method, path, _ in self.requests]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    doubles = []

    def start(answers):
        double = LocalServerDouble(answers)
        doubles.append(double)
        return double

    yield start
    for double in doubles:
        double.close()


def _discover(provider, double):
    models = discover_models(provider, double.url, None, allow_private_hosts=True)
    return {model.id: model for model in models}


def test_ollama_uses_the_loaded_length_and_never_the_maximum(server):
    double = server({"/api/tags": OLLAMA_TAGS, "/api/ps": OLLAMA_PS})
    models = _discover("ollama", double)
    loaded = models["qwen3:8b"]
    assert (loaded.context_window, loaded.window_source, loaded.warning) == (
        8192,
        "provider_loaded",
        None,
    )
    assert loaded.source_url == f"{double.url}/api/ps"
    assert double.paths() == [("GET", "/api/tags"), ("GET", "/api/ps")]
    assert models["nomic-embed-text:latest"].chat is False


def test_an_ollama_model_with_no_num_ctx_and_nothing_loaded_gets_the_default_and_a_warning(
    server,
):
    double = server({"/api/tags": OLLAMA_TAGS, "/api/ps": {"models": []}})
    model = _discover("ollama", double)["llama3.2:latest"]
    assert (model.context_window, model.window_source) == (32_768, "platform_default")
    assert model.warning == OLLAMA_DEFAULT_WARNING
    assert model.source_url is None


def test_lmstudio_prefers_the_loaded_length_and_marks_the_maximum(server):
    double = server({"/api/v0/models": LMSTUDIO_MODELS})
    models = _discover("lmstudio", double)
    loaded = models["meta-llama-3.1-8b-instruct"]
    assert (loaded.context_window, loaded.window_source, loaded.warning) == (
        4096,
        "provider_loaded",
        None,
    )
    idle = models["qwen2-vl-7b-instruct"]
    assert (idle.context_window, idle.window_source, idle.warning) == (
        32768,
        "provider_maximum",
        NOT_LOADED_WARNING,
    )
    assert models["text-embedding-nomic-embed-text-v1.5"].chat is False
    assert [model.id for model in models.values()][-1] == "text-embedding-nomic-embed-text-v1.5"


@pytest.mark.parametrize("provider", ["ollama", "lmstudio"])
def test_local_servers_go_through_the_address_guard(server, provider):
    double = server({"/api/tags": OLLAMA_TAGS, "/api/ps": OLLAMA_PS, "/api/v0/models": {}})
    with pytest.raises(ProviderError) as caught:
        discover_models(provider, double.url, None, allow_private_hosts=False)
    assert caught.value.kind == "address_refused"
    assert double.requests == []


@pytest.mark.parametrize("provider", ["ollama", "lmstudio"])
def test_a_malformed_list_is_a_protocol_error(server, provider):
    double = server({"/api/tags": {"models": "x"}, "/api/v0/models": ["x"]})
    with pytest.raises(ProviderError) as caught:
        discover_models(provider, double.url, None, allow_private_hosts=True)
    assert caught.value.kind == "protocol"


def _gateway(provider, double, **options):
    factory = functools.partial(secure_client, allow_private_hosts=True)
    return gateway_for_provider(
        provider,
        ModelEndpoint(double.url, None, "qwen3:8b"),
        calls=CallOptions(client_factory=factory),
        **options,
    )


REQUEST = ModelRequest(
    purpose="action",
    messages=[
        {"role": "user", "content": "add"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    ],
    max_output_tokens=256,
)


def test_ollama_sends_num_ctx_through_its_native_api(server):
    double = server({"/api/chat": OLLAMA_CHAT})
    response = _gateway("ollama", double, num_ctx=16_384).complete(REQUEST)
    ((method, path, body),) = double.requests
    assert (method, path) == ("POST", "/api/chat")
    assert body["options"] == {"num_ctx": 16_384, "num_predict": 256}
    assert body["stream"] is False
    assert body["messages"][1]["tool_calls"] == [
        {"function": {"name": "calculator", "arguments": {"expression": "2+2"}}}
    ]
    assert body["messages"][2] == {"role": "tool", "content": "4", "tool_name": "calculator"}
    assert response.usage == {"prompt_tokens": 42, "completion_tokens": 7}
    (call,) = response.message["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "1+1"}'}
    assert call["id"].startswith("call_")


@pytest.mark.parametrize("provider", ["ollama", "lmstudio"])
def test_without_num_ctx_the_openai_compatible_endpoint_is_used(server, provider):
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    double = server({"/v1/chat/completions": answer})
    response = _gateway(provider, double).complete(REQUEST)
    ((_, path, body),) = double.requests
    assert path == "/v1/chat/completions"
    assert "options" not in body and body["max_tokens"] == 256
    assert response.message["content"] == "hi"
