"""An OpenAI-compatible model on 127.0.0.1 that answers every request after a fixed delay.

Each run it serves makes one tool call and then answers: to a conversation whose last message
is the user's it answers with an `echo` call of that message's text; to one that ends with the
tool's result it answers `done: <result>`. A run's answer therefore names its own question, and
a request that mixed two runs' messages would show in it. It holds hundreds of requests at
once (one thread each, a deep listen backlog) and counts the largest number in flight.

    model = DelayedModel(3.0)
    make_connection(space, provider="openai_compatible", base_url=model.base_url, ...)
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DelayedModel"]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def answer_to(messages: list[dict[str, Any]], request_number: int) -> dict[str, Any]:
    """Return the assistant message the double answers `messages` with."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": f"done: {_text(last.get('content'))}"}
    question = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{request_number}",
                "type": "function",
                "function": {"name": "echo", "arguments": json.dumps({"text": question[:200]})},
            }
        ],
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 2048


class DelayedModel:
    """Serve chat completions after `delay` seconds each (see the module docstring)."""

    def __init__(self, delay: float, *, host: str = "127.0.0.1", port: int = 0):
        self.delay = delay
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self.server = _Server((host, port), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _enter(self) -> int:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return self.requests

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                number = model._enter()
                try:
                    messages = json.loads(body or b"{}").get("messages") or []
                    time.sleep(model.delay)
                    message = answer_to(messages, number)
                    self._send(
                        {
                            "id": f"delayed-{number}",
                            "object": "chat.completion",
                            "model": "delayed-model",
                            "choices": [
                                {
                                    "index": 0,
                                    "message": message,
                                    "finish_reason": (
                                        "tool_calls" if message.get("tool_calls") else "stop"
                                    ),
                                }
                            ],
                            "usage": {
                                "prompt_tokens": max(1, len(body) // 4),
                                "completion_tokens": 8,
                                "total_tokens": max(1, len(body) // 4) + 8,
                            },
                        }
                    )
                finally:
                    model._leave()

            def _send(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
