"""A real HTTP server on 127.0.0.1 that stands in for an OpenAI-style model provider.

It speaks `GET /v1/models` and `POST /v1/chat/completions`, records every request, and answers
400 to any chat request OpenAI would refuse (schema or tool-call ordering, checked with
`tests.support.openai_contract.violations`), so a test cannot pass with a request the real
provider would reject. Tests script it per path:

    double.models = [{"id": "gpt-4o", "object": "model"}]
    double.reply(status=429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
    double.reply_chat(content="hello")
    double.redirect("/v1/models", to="/v1/landing")
    assert double.hits("/v1/landing") == 0

A chat request with `"stream": true` gets its completion as server-sent events, the content,
reasoning and tool-call arguments cut into `chunk_chars` pieces sent `chunk_delay` seconds
apart (slowly when a test asks), and the usage chunk when `stream_options.include_usage` asks;
`reply_stream(events)` scripts the chunks themselves. `first_bytes` holds when each stream's
first byte went out (`time.time()`, comparable with a browser's `Date.now()`), and
`streams_cut` counts streams the client closed before their end.

Two routes of self-hosted servers, off by default (404 like any unknown path): `props` set to
a document answers `GET /props` as llama.cpp's server does, and `tokenizer` set to
`"llama.cpp"`, `"vllm"` or `"llama-cpp-python"` answers that server's tokenize route
(`/tokenize` or `/extras/tokenize/count`, and llama.cpp's `/apply-template`) in its shape,
counting `words(text)` tokens and rendering chats with `rendered(messages, tools)`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.openai_contract import violations

__all__ = [
    "ProviderDouble",
    "RecordedRequest",
    "ScriptedReply",
    "chat_completion",
    "stream_chunks",
]

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"


@dataclass
class ScriptedReply:
    """One answer the double gives to the next request on `path`."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    # False sends no Content-Length and ends the body by closing the connection.
    content_length: bool = True
    # The chunks of a streamed answer, sent as they are (None: cut from `json`).
    events: list[Any] | None = None

    def encoded(self) -> bytes:
        if self.body is not None:
            return self.body
        if self.json is None:
            return b""
        return json.dumps(self.json).encode()


@dataclass(frozen=True)
class RecordedRequest:
    """A request the double received; `headers` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    violations: tuple[str, ...] = ()


def chat_completion(
    *,
    content: str | None = "ok",
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "double-model",
) -> dict[str, Any]:
    """Return an OpenAI chat-completion body with one assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def words(text: str) -> int:
    """The double's tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def rendered(messages: list[Any], tools: list[Any] | None = None) -> str:
    """The double's chat template: markers around each message, the tool schemas, a prompt."""
    parts = []
    for message in messages:
        parts += ["<start>", str(message.get("role")), str(message.get("content") or ""), "<end>"]
    if tools:
        parts += ["<tools>", json.dumps(tools)]
    return " ".join([*parts, "<start>", "assistant"])


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def stream_chunks(completion: dict[str, Any], *, chunk_chars: int = 8) -> list[dict[str, Any]]:
    """Return the `chat.completion.chunk` events OpenAI would stream for `completion`."""
    choice = completion["choices"][0]
    message = choice["message"]
    model = completion.get("model", "double-model")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": completion.get("id", "chatcmpl-double"),
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(message.get("reasoning_content") or "", chunk_chars):
        events.append(chunk({"reasoning_content": piece}))
    for piece in _pieces(message.get("content") or "", chunk_chars):
        events.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        events.append(chunk({"tool_calls": [{**head, "function": {"name": function["name"]}}]}))
        for piece in _pieces(function.get("arguments") or "", chunk_chars):
            part = {"index": index, "function": {"arguments": piece}}
            events.append(chunk({"tool_calls": [part]}))
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    events.append({**chunk({}), "choices": [], "usage": completion.get("usage")})
    return events


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    double: ProviderDouble

    def verify_request(self, request, client_address) -> bool:
        self.double._count_connection()
        return True

    def handle_error(self, request, client_address) -> None:
        # A client that stops reading (the size cap, a timeout) breaks the pipe; that is expected.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self.server.double._handle(self)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ProviderDouble:
    """A scriptable OpenAI-style provider listening on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        self.models: list[Any] = [
            {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"}
        ]
        # When set, sent as the whole `GET /v1/models` body instead of `{"object": "list", ...}`.
        self.models_body: Any = None
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self.chunk_chars = 8
        self.chunk_delay = 0.0
        self.first_bytes: list[float] = []
        self.streams_cut = 0
        # A self-hosted server's own routes (see the module docstring); None: 404.
        self.props: Any = None
        self.tokenizer: str | None = None
        self._scripts: dict[str, deque[ScriptedReply]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.double = self
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL a connection would store: `http://127.0.0.1:PORT/v1`."""
        return f"{self.origin}/v1"

    def reply(
        self,
        *,
        path: str = CHAT_PATH,
        status: int = 200,
        json: Any = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        content_length: bool = True,
    ) -> None:
        """Queue one answer for the next request on `path` (after the chat contract check)."""
        scripted = ScriptedReply(status, json, body, dict(headers or {}), delay, content_length)
        with self._lock:
            self._scripts.setdefault(path, deque()).append(scripted)

    def reply_stream(self, events: list[Any], *, delay: float = 0.0) -> None:
        """Queue one streamed answer made of these chunks (dicts, or raw `data:` strings)."""
        scripted = ScriptedReply(200, None, None, {}, delay, False, events=list(events))
        with self._lock:
            self._scripts.setdefault(CHAT_PATH, deque()).append(scripted)

    def reply_chat(self, **completion: Any) -> None:
        """Queue one successful chat completion; arguments as for `chat_completion`."""
        self.reply(json=chat_completion(**completion))

    def redirect(self, path: str = MODELS_PATH, *, to: str, status: int = 302) -> None:
        """Queue a redirect from `path` to another path of this double."""
        self.reply(path=path, status=status, headers={"Location": self.origin + to})

    def hits(self, path: str) -> int:
        """Return how many requests arrived on `path`."""
        with self._lock:
            return sum(1 for request in self.requests if request.path == path)

    def chat_bodies(self) -> list[Any]:
        """Return the JSON bodies of every chat request received, in order."""
        with self._lock:
            return [r.json for r in self.requests if r.path == CHAT_PATH]

    def close(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ProviderDouble:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def violations(self, document: dict[str, Any]) -> list[str]:
        """Return why this provider would refuse a chat body (OpenAI's rules here)."""
        return violations(document)

    def _count_connection(self) -> None:
        with self._lock:
            self.connections += 1

    def _handle(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            document = json.loads(raw) if raw else None
        except ValueError:
            document = None
        problems: tuple[str, ...] = ()
        if handler.command == "POST" and path == CHAT_PATH:
            if isinstance(document, dict):
                problems = tuple(self.violations(document))
            else:
                problems = ("body is not a JSON object",)
        record = RecordedRequest(
            method=handler.command,
            path=path,
            headers={key.lower(): value for key, value in handler.headers.items()},
            body=raw,
            json=document,
            violations=problems,
        )
        with self._lock:
            self.requests.append(record)
            queue = self._scripts.get(path)
            scripted = queue.popleft() if queue and not problems else None
        if problems:
            scripted = ScriptedReply(
                400,
                {
                    "error": {
                        "message": "; ".join(problems),
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if scripted is None:
            scripted = self._default(handler.command, path, document)
        if self._streamed(document, scripted):
            self._send_stream(handler, scripted, document)
        else:
            self._send(handler, scripted)

    def _default(self, method: str, path: str, document: Any) -> ScriptedReply:
        if method == "GET" and path == MODELS_PATH:
            body = self.models_body
            if body is None:
                body = {"object": "list", "data": list(self.models)}
            return ScriptedReply(200, body)
        if method == "POST" and path == CHAT_PATH:
            return ScriptedReply(200, chat_completion(model=document.get("model", "double")))
        if method == "GET" and path == "/props" and self.props is not None:
            return ScriptedReply(200, self.props)
        counted = self._tokenize(method, path, document)
        if counted is not None:
            return counted
        return ScriptedReply(
            404, {"error": {"message": "no such path", "type": "invalid_request_error"}}
        )

    def _tokenize(self, method: str, path: str, document: Any) -> ScriptedReply | None:
        """Answer a tokenize request in the shape of the server `tokenizer` names."""
        body = document if isinstance(document, dict) else {}
        if method != "POST" or self.tokenizer is None:
            return None
        if self.tokenizer == "llama.cpp" and path == "/tokenize":
            # llama.cpp answers a body without `content` with an empty list.
            text = body.get("content")
            return ScriptedReply(200, {"tokens": list(range(words(text or "")))})
        if self.tokenizer == "llama.cpp" and path == "/apply-template":
            prompt = rendered(body.get("messages") or [], body.get("tools"))
            return ScriptedReply(200, {"prompt": prompt})
        if self.tokenizer == "vllm" and path == "/tokenize" and "messages" in body:
            count = words(rendered(body["messages"], body.get("tools")))
            return ScriptedReply(200, {"count": count, "max_model_len": 4096, "tokens": []})
        if self.tokenizer == "vllm" and path == "/tokenize":
            if not isinstance(body.get("prompt"), str):
                return ScriptedReply(400, {"error": {"message": "prompt required", "code": 400}})
            count = words(body["prompt"])
            return ScriptedReply(
                200, {"count": count, "max_model_len": 4096, "tokens": list(range(count))}
            )
        if self.tokenizer == "llama-cpp-python" and path == "/extras/tokenize/count":
            return ScriptedReply(200, {"count": words(body.get("input") or "")})
        return None

    def _send(self, handler: _Handler, scripted: ScriptedReply) -> None:
        if scripted.delay:
            self._stopping.wait(scripted.delay)
        payload = scripted.encoded()
        with contextlib.suppress(OSError):
            handler.send_response(scripted.status)
            headers = {"Content-Type": "application/json", **scripted.headers}
            for name, value in headers.items():
                handler.send_header(name, value)
            if scripted.content_length:
                handler.send_header("Content-Length", str(len(payload)))
            else:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            for start in range(0, len(payload), 64 * 1024):
                handler.wfile.write(payload[start : start + 64 * 1024])
            handler.wfile.flush()

    @staticmethod
    def _streamed(document: Any, scripted: ScriptedReply) -> bool:
        if not isinstance(document, dict) or document.get("stream") is not True:
            return False
        if scripted.events is not None:
            return True
        answer = scripted.json
        return (
            scripted.status == 200
            and scripted.body is None
            and isinstance(answer, dict)
            and isinstance(answer.get("choices"), list)
            and bool(answer["choices"])
            and "message" in answer["choices"][0]
        )

    def _send_stream(self, handler: _Handler, scripted: ScriptedReply, document: Any) -> None:
        events = scripted.events
        if events is None:
            events = stream_chunks(scripted.json, chunk_chars=self.chunk_chars)
            if not (document.get("stream_options") or {}).get("include_usage"):
                events = [event for event in events if event.get("choices")]
        if scripted.delay:
            self._stopping.wait(scripted.delay)
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Connection", "close")
            handler.close_connection = True
            handler.end_headers()
            for number, event in enumerate([*events, "[DONE]"]):
                if number and self.chunk_delay and self._stopping.wait(self.chunk_delay):
                    return
                data = event if isinstance(event, str) else json.dumps(event)
                handler.wfile.write(f"data: {data}\n\n".encode())
                handler.wfile.flush()
                if number == 0:
                    with self._lock:
                        self.first_bytes.append(time.time())
        except OSError:
            with self._lock:
                self.streams_cut += 1
