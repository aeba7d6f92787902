"""Streamed chat completions: server-sent events read into one chat-completion document.

Every OpenAI-style gateway streams through here. `StreamAssembly` takes the JSON of each
`data:` event (content, `reasoning_content` and tool-call argument deltas, the finish reason,
the usage chunk `stream_options.include_usage` asks for) and returns the same document a
non-streamed answer would have been, so one parser reads both. What arrives is reported to
`on_delta(content, reasoning, tool_call_names)` as it arrives.

A stream that does not end as the API says (`[DONE]` or a finish reason) is classified:

- an error object in it is mapped by what it says (too long, rate limit, server error), and
  may be retried only while nothing of the answer was shown;
- one that ends before its first content (no text, reasoning or tool call) is retried like a
  connection that never opened (`EMPTY_END`); after a second such end the gateway asks once
  without streaming, since some servers answer a request over their window with an empty
  stream and the same request unstreamed with a refusal that names the window;
- one that breaks off after content was shown is a run error that is not retried.

A stream without a usage chunk assembles to a document whose usage is None, never zeros.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from agentloom.providers._errors import ProviderError

__all__ = ["EMPTY_END", "DeltaCallback", "StreamAssembly", "is_empty_end", "sse_data"]

DeltaCallback = Callable[[str, str, list[str]], None]
_DONE = b"[DONE]"

EMPTY_END = "The provider's stream ended before its first content."
_CUT_SHORT = (
    "The provider's stream broke off after part of the answer had arrived: the answer is "
    "incomplete and was not kept."
)


def is_empty_end(error: ProviderError) -> bool:
    """Return whether `error` is a stream that ended before its first content."""
    return error.kind == "upstream" and error.message == EMPTY_END


def sse_data(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Yield the data of each server-sent event of a byte stream (`[DONE]` included).

    Comment lines (keep-alives) and event names are skipped; a multi-line event's data lines
    are joined with newlines, as the SSE format says. An `error:` line, which llama.cpp's server
    sent for an error inside a stream before it framed errors as data (tools/server/server.cpp
    `server_sent_event(sink, "error", ...)`, read 2026-12-02), is yielded as the data
    `{"error": ...}` so that it is read as the error it is.
    """
    pending = b""
    data: list[bytes] = []
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
            elif line.startswith(b"error:"):
                yield b'{"error": ' + line[6:].strip() + b"}"
    if data:
        yield b"\n".join(data)


class StreamAssembly:
    """Assemble chat-completion chunks into one `chat.completion` document."""

    def __init__(self, on_delta: DeltaCallback | None = None):
        self.on_delta = on_delta
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.id: str | None = None
        self.chunks = 0
        self.done = False
        # Whether any content, reasoning or tool call arrived (what a page could have shown).
        self.shown = False

    def add_data(self, data: bytes) -> None:
        """Take the data of one event: a JSON chunk, or `[DONE]`."""
        if data.strip() == _DONE:
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise ProviderError("protocol", "The provider's stream is not valid JSON.") from None
        self.add(chunk)

    def add(self, chunk: Any) -> None:
        """Take one chunk (the decoded JSON of one event)."""
        if not isinstance(chunk, dict):
            raise ProviderError("protocol", "The provider's stream could not be understood.")
        if "error" in chunk or chunk.get("object") == "error":
            # vLLM's error objects stand alone with `"object": "error"`; others nest them.
            raise stream_error(chunk.get("error", chunk))
        self.chunks += 1
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("id"), str):
            self.id = chunk["id"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ProviderError("protocol", "The provider's stream could not be understood.")
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        content = content if isinstance(content, str) else ""
        reasoning = delta.get("reasoning_content")
        reasoning = reasoning if isinstance(reasoning, str) else ""
        named = [self._call(part) for part in delta.get("tool_calls") or []]
        names = [name for name in named if name]
        if content or reasoning or named:
            self.shown = True
        if content:
            self.content.append(content)
        if reasoning:
            self.reasoning.append(reasoning)
        if self.on_delta is not None and (content or reasoning or names):
            self.on_delta(content, reasoning, names)

    def _call(self, part: Any) -> str | None:
        """Merge one tool-call delta; return the call's name when this delta decided it."""
        if not isinstance(part, dict) or not isinstance(part.get("function", {}), dict):
            raise ProviderError("protocol", "The provider's tool calls are malformed.")
        index = part.get("index", len(self.calls))
        if isinstance(index, bool) or not isinstance(index, int):
            raise ProviderError("protocol", "The provider's tool calls are malformed.")
        call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if isinstance(part.get("id"), str) and part["id"]:
            call["id"] = part["id"]
        function = part.get("function") or {}
        decided = None
        name = function.get("name")
        if isinstance(name, str) and name and not call["name"]:
            call["name"] = decided = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["arguments"].append(arguments)
        return decided

    def document(self) -> dict[str, Any]:
        """Return the assembled answer as a non-streamed chat completion would have been."""
        if not self.chunks or not (self.done or self.finish_reason):
            # Cut short: a connection closed mid-answer reads as a normal end of the body.
            if not self.shown:
                raise ProviderError("upstream", EMPTY_END, retryable=True)
            raise ProviderError("protocol", _CUT_SHORT, retryable=False)
        content = "".join(self.content) if self.content else None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }


def stream_error(error: Any) -> ProviderError:
    """Return the error for an `error` event in a stream, chosen from what it says, not its text.

    Too long is `context_length` with the numbers it names; a rate limit (code or type, or the
    status-like numeric `code` 429 that llama.cpp puts there) is `rate_limit`; anything else is
    the provider failing to answer. The last two may be retried, but only while nothing of the
    answer was shown: the client reading the stream decides that (`ProviderClient.post_stream`).
    """
    from agentloom.providers._http import classify_error, error_code

    fields = error if isinstance(error, dict) else {}
    message = fields.get("message") if fields else error
    found = classify_error(
        None,
        error_code(fields) if fields else None,
        message if isinstance(message, str) else None,
        error=fields or None,
    )
    number = fields.get("code")
    if found.kind == "upstream" and number == 429 and not isinstance(number, bool):
        found = ProviderError("rate_limit")
    found.retryable = found.kind in ("rate_limit", "upstream")
    return found
