"""The model gateway interface and the offline demo gateway.

A gateway turns one `ModelRequest` (OpenAI chat-completions messages and tool schemas) into one
`ModelResponse` (an assistant message). Real providers live in `agentloom.providers`; they
implement this interface and are picked by the Django side.

`LocalDemoGateway` is the offline demo model of the `local` provider: deterministic, and it says
it is a demo. The scripted gateway of the tests and its reply builders live in
`agentloom.engine.testing`.
"""

from __future__ import annotations

import abc
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._errors import GatewayError
from agentloom.engine._gate import PayloadRules, reasoning_required
from agentloom.engine._protocol import HANDOFF_MARK, REASONING_KEY, message_text

__all__ = [
    "DEMO_LABEL",
    "PURPOSES",
    "CallStream",
    "GatewayError",
    "LocalDemoGateway",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
    "with_passed_back_reasoning",
    "without_reasoning",
]

PURPOSES = ("action", "compaction", "verification")


@dataclass(frozen=True)
class ModelRequest:
    """One chat-completions call: what the model is shown and what it may call."""

    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_output_tokens: int = 4096
    instance: str = "main"


@dataclass
class ModelResponse:
    """An assistant message (`role`, `content`, `tool_calls`) and what the provider said."""

    message: dict[str, Any]
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelResponse:
        return cls(
            message=data["message"],
            usage=data.get("usage"),
            finish_reason=data.get("finish_reason"),
            model=data.get("model"),
        )


class CallStream:
    """What a streaming gateway reports to while one call runs, and how it learns of a cancel.

    The gateway calls `delta(content, reasoning, tool_names)` with each piece as it arrives
    (text exactly as received: the engine redacts before anything leaves it), and `on_abort`
    with a function that stops the call at once. `cancel()` (from any thread) sets `cancelled`
    and calls that function; the gateway then raises, and the engine records the call as
    cancelled.
    """

    def __init__(self, on_delta=None):
        self.on_delta = on_delta
        self.cancelled = threading.Event()
        self._abort = None
        self._lock = threading.Lock()

    def delta(self, content: str, reasoning: str, tool_names: list[str]) -> None:
        if self.on_delta is not None and not self.cancelled.is_set():
            self.on_delta(content, reasoning, tool_names)

    def on_abort(self, abort) -> None:
        """Register what stops the call; called at once if the call is already cancelled."""
        with self._lock:
            self._abort = abort
            cancelled = self.cancelled.is_set()
        if cancelled:
            abort()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            abort = self._abort
        if abort is not None:
            abort()


class ModelGateway(abc.ABC):
    """Sends one request to a model and returns its reply, or raises `GatewayError`.

    `payload(request)` returns the exact body `complete` sends: the engine measures it for the
    hard budget check and the meter, and checks it against `payload_rules` (the integrity gate,
    `_gate`) before every call. A gateway whose body is not a chat-completions body names no
    rules (None) and is not checked.

    A gateway that `streams` takes `complete(request, stream=CallStream)` and reports what
    arrives to it; the reply it returns is still the whole answer.
    """

    provider: str = "unknown"
    model_id: str = "unknown"
    # The longest one `complete` may take, all attempts included (None: not known); the run's
    # lease is never renewed past it.
    deadline_seconds: float | None = None
    payload_rules: PayloadRules | None = PayloadRules()
    streams: bool = False

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """Return the body sent for `request`: OpenAI chat completions, no reasoning text."""
        body: dict[str, Any] = {"model": self.model_id, "messages": without_reasoning(request)}
        if request.tools:
            body["tools"] = list(request.tools)
        field = self.payload_rules.output_limit_field if self.payload_rules else "max_tokens"
        body[field] = request.max_output_tokens
        return body

    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the model's reply to `request`."""


# Each message's copy without reasoning, by the identity of the message (which it holds, so the
# identity stays its own): a view is sent again at every step, and measuring a copy made anew
# each time would miss the estimators' size caches.
_STRIPPED: OrderedDict[int, tuple[dict[str, Any], dict[str, Any]]] = OrderedDict()
_STRIPPED_ITEMS = 20_000


def _stripped(message: dict[str, Any]) -> dict[str, Any]:
    held = _STRIPPED.get(id(message))
    if held is not None and held[0] is message:
        return held[1]
    copy = {k: v for k, v in message.items() if k != REASONING_KEY}
    _STRIPPED[id(message)] = (message, copy)
    while len(_STRIPPED) > _STRIPPED_ITEMS:
        _STRIPPED.popitem(last=False)
    return copy


def without_reasoning(request: ModelRequest) -> list[dict[str, Any]]:
    """Return the request's messages without reasoning text (what most APIs are sent)."""
    return [
        _stripped(message) if REASONING_KEY in message else message for message in request.messages
    ]


def with_passed_back_reasoning(request: ModelRequest) -> tuple[list[dict[str, Any]], bool]:
    """Return the messages as DeepSeek's thinking mode takes them, and whether they are complete.

    Reasoning stays on every assistant message of a user-to-user span with tool calls and is
    dropped elsewhere (DeepSeek ignores it there). `complete` is False when such a message has
    none (a record made before reasoning was kept, or a model that returned none).
    """
    required = set(reasoning_required(request.messages))
    messages, complete = [], True
    for index, message in enumerate(request.messages):
        if index in required:
            complete = complete and bool(message.get(REASONING_KEY))
            messages.append(message)
        elif REASONING_KEY in message:
            messages.append(_stripped(message))
        else:
            messages.append(message)
    return messages, complete


DEMO_LABEL = "[local demo model]"
_TOOL_DIRECTIVE = re.compile(r"/tool\s+([A-Za-z0-9_-]+)\s*")
_NONCE = re.compile(r"NONCE-[\w-]+")
_WORD = re.compile(r"[A-Za-z][\w'-]*")
# Scaffolding lines of the compaction request that carry no facts of their own.
_SUMMARY_SCAFFOLD = ("Summary so far:", "Next material", "Return the updated summary")
_DEMO_LINE_CHARS = 300


def _has_fact(line: str) -> bool:
    """Say whether a line holds a number, a `NONCE-…` token or a capitalised name."""
    if any(ch.isdigit() for ch in line) or _NONCE.search(line):
        return True
    words = _WORD.findall(line)
    # The first word is capitalised in any sentence; a name is a capital later in the line,
    # or a word written all in capitals.
    return any(w[0].isupper() for w in words[1:]) or any(len(w) > 1 and w.isupper() for w in words)


def _pieces(text: str) -> Iterator[str]:
    for line in text.splitlines():
        line = line.strip()
        while len(line) > _DEMO_LINE_CHARS:
            yield line[:_DEMO_LINE_CHARS]
            line = line[_DEMO_LINE_CHARS:]
        if line:
            yield line


def _text(content: str) -> ModelResponse:
    return ModelResponse(message={"role": "assistant", "content": content}, finish_reason="stop")


def _tool_calls(calls: list[tuple[str, str]], *, content: str, prefix: int) -> ModelResponse:
    """Return a reply calling each `(name, arguments text)`, ids `local-<prefix>-<n>`."""
    tool_calls = [
        {
            "id": f"local-{prefix}-{number}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for number, (name, arguments) in enumerate(calls, start=1)
    ]
    return ModelResponse(
        message={"role": "assistant", "content": content, "tool_calls": tool_calls},
        finish_reason="tool_calls",
    )


class LocalDemoGateway(ModelGateway):
    """A deterministic, offline stand-in for a model, labelled as a demo in every reply.

    - `/tool NAME {json}` in the latest user message: call that tool with those arguments;
    - after tool results: answer citing them;
    - purpose `compaction`: an extractive handoff summary keeping every line with a fact marker
      (a digit, a capitalised name or a `NONCE-…` token), long lines taken in pieces;
    - purpose `verification`: `PASS`;
    - otherwise: answer from the question.
    """

    provider = "local"
    model_id = "local-demo"

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "compaction":
            reply = self._summary(request)
        elif request.purpose == "verification":
            reply = _text(f"PASS {DEMO_LABEL} verification is a stand-in check.")
        else:
            reply = self._action(request)
        prompt = len(json.dumps(request.messages)) // 4
        completion = len(json.dumps(reply.message)) // 4
        reply.usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        reply.model = self.model_id
        return reply

    def _summary(self, request: ModelRequest) -> ModelResponse:
        text = "\n".join(message_text(m) for m in request.messages if m.get("role") == "user")
        kept: list[str] = []
        for piece in _pieces(text):
            if piece.startswith(_SUMMARY_SCAFFOLD) or piece.startswith(DEMO_LABEL):
                continue
            if _has_fact(piece) and piece not in kept:
                kept.append(piece)
        body = "\n".join(kept) if kept else "(no facts found in this part)"
        # Within the output limit, counted as characters (never fewer than tokens): the most
        # recent facts are kept.
        room = max(request.max_output_tokens - len(DEMO_LABEL) - 32, 0)
        body = body[-room:] if len(body) > room else body
        return _text(f"{DEMO_LABEL} handoff summary (extractive)\n{body}")

    def _action(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        # Feedback notes and handoff summaries are the engine talking, not the user: answer the
        # user's latest message.
        asked = max(
            (
                index
                for index, m in enumerate(messages)
                if m.get("role") == "user"
                and not message_text(m).startswith(("[feedback]", HANDOFF_MARK))
            ),
            default=-1,
        )
        results = [i for i in range(asked + 1, len(messages)) if messages[i].get("role") == "tool"]
        if results:
            return self._cite_results(messages, results[-1] + 1)
        progress = [
            message_text(m)
            for m in messages[asked + 1 :]
            if m.get("role") == "user" and message_text(m).startswith(HANDOFF_MARK)
        ]
        if progress:
            # The work on this question was compacted: report from the summary instead of
            # starting the task over.
            facts = [line for line in progress[-1].splitlines()[1:] if line.strip()][-8:]
            return _text(
                "\n".join([f"{DEMO_LABEL} From the compacted progress on this question:", *facts])
            )
        question = message_text(messages[asked]) if asked >= 0 else ""
        calls = []
        position = 0
        while match := _TOOL_DIRECTIVE.search(question, position):
            try:
                parsed, position = json.JSONDecoder().raw_decode(question, match.end())
                arguments = json.dumps(parsed)
            except json.JSONDecodeError:
                # Sent as written, so the engine's handling of bad arguments can be seen.
                arguments = question[match.end() :].split("\n", 1)[0]
                position = match.end() + len(arguments)
            # Searching on after the arguments: a `/tool` inside them (a task handed to a
            # sub-agent) belongs to that task, not to this message.
            calls.append((match.group(1), arguments))
        if calls:
            return _tool_calls(calls, content=f"{DEMO_LABEL} Calling tools.", prefix=len(messages))
        return _text(f"{DEMO_LABEL} You asked: {question[:500]}")

    def _cite_results(self, messages: list[dict[str, Any]], end: int) -> ModelResponse:
        """Answer from the tool group that ends at `end`."""
        start = end
        while start > 0 and messages[start - 1].get("role") == "tool":
            start -= 1
        names = {}
        if start > 0:
            for call in messages[start - 1].get("tool_calls") or []:
                names[call.get("id")] = (call.get("function") or {}).get("name")
        lines = [f"{DEMO_LABEL} Based on the tool results:"]
        for message in messages[start:end]:
            name = names.get(message.get("tool_call_id"), "tool")
            lines.append(f"- {name}: {message_text(message)[:200]}")
        return _text("\n".join(lines))
