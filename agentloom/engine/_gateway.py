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
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._budget import LearnedLimit
from agentloom.engine._compaction import PLAN_HEADER, PREFIX_MARK, SOURCES_HEADER
from agentloom.engine._errors import GatewayError
from agentloom.engine._gate import PayloadRules, reasoning_required, thinking_on
from agentloom.engine._identifiers import KEPT_HEADER
from agentloom.engine._protocol import HANDOFF_MARK, REASONING_KEY, message_text, render_message

__all__ = [
    "DEMO_LABEL",
    "PURPOSES",
    "CallStream",
    "GatewayError",
    "LearnedLimit",
    "LocalDemoGateway",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
    "with_passed_back_reasoning",
    "without_reasoning",
]

PURPOSES = ("action", "compaction", "verification")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelRequest:
    """One chat-completions call: what the model is shown and what it may call.

    `cache_key` names the session the call belongs to, so that a provider that buckets its
    prompt cache by a key (OpenAI's `prompt_cache_key`) serves a session's calls from one cache;
    it is not part of what the model is shown.
    """

    purpose: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_output_tokens: int = 4096
    instance: str = "main"
    cache_key: str | None = None
    # Sent with the tools when set: `none` for a summary request that carries the conversation's
    # own tools (so that its prefix is the conversation's) but must not call them.
    tool_choice: str | None = None


@dataclass
class ModelResponse:
    """An assistant message (`role`, `content`, `tool_calls`) and what the provider said."""

    message: dict[str, Any]
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    model: str | None = None
    # The provider's id of the completion (`chatcmpl-…`), where it gives one.
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "message": self.message,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "model": self.model,
        }
        if self.id is not None:
            # Only when given: responses stored before ids were kept read the same.
            data["id"] = self.id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelResponse:
        return cls(
            message=data["message"],
            usage=data.get("usage"),
            finish_reason=data.get("finish_reason"),
            model=data.get("model"),
            id=data.get("id"),
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
        """Return the body sent for `request`: OpenAI chat completions, reasoning as its rule
        says (`with_reasoning`)."""
        body: dict[str, Any] = {"model": self.model_id, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
            if request.tool_choice:
                body["tool_choice"] = request.tool_choice
        field = self.payload_rules.output_limit_field if self.payload_rules else "max_tokens"
        body[field] = request.max_output_tokens
        return self.with_reasoning(request, body)

    def with_reasoning(self, request: ModelRequest, body: dict[str, Any]) -> dict[str, Any]:
        """Return a copy of `body` whose messages carry reasoning as `payload_rules` says.

        - `never` (and a gateway without rules): no message carries any;
        - `tool_spans`, while the body asks for thinking (`thinking` not disabled): every
          assistant message of a user-to-user span with tool calls carries its reasoning, and no
          other message does (`with_passed_back_reasoning`). A message with none to pass back
          (journaled before reasoning was kept, or a model that returned none) is not sent with
          an empty string, which DeepSeek's thinking-mode guide does not promise to accept: the
          body then goes without reasoning and with thinking disabled (`"thinking": {"type":
          "disabled"}`, no `reasoning_effort`), where nothing is required, and one warning says
          how many messages lacked it and where.
        """
        rules = self.payload_rules
        if rules is None or rules.reasoning == "never" or not thinking_on(body):
            return {**body, "messages": without_reasoning(request)}
        messages, complete = with_passed_back_reasoning(request)
        if complete:
            return {**body, "messages": messages}
        self._warn_missing_reasoning(request)
        body = {k: v for k, v in body.items() if k != "reasoning_effort"}
        return {**body, "messages": without_reasoning(request), "thinking": {"type": "disabled"}}

    def _warn_missing_reasoning(self, request: ModelRequest) -> None:
        """Log once per gateway and set of positions which messages had no reasoning to pass
        back (a body is built several times for one call: measured, checked, then sent)."""
        required = reasoning_required(request.messages)
        missing = tuple(i for i in required if not _has_reasoning(request.messages[i]))
        warned = self.__dict__.setdefault("_reasoning_warned", set())
        if missing in warned:
            return
        warned.add(missing)
        logger.warning(
            "Reasoning to pass back is missing on %d of %d assistant messages of tool-call spans "
            "(message positions %s); the request goes with thinking disabled",
            len(missing),
            len(required),
            ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else ""),
        )

    @abc.abstractmethod
    def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the model's reply to `request`."""

    def adapt(self, error: GatewayError) -> LearnedLimit | None:
        """Change this gateway's own payload rules in answer to a refusal; say what it learned.

        The engine asks once per call that failed with `error`; when a limit comes back it
        rebuilds the payload, checks it again (the gate and the hard check) and sends it once
        more. None (the default): nothing learned, the error stands.
        """
        return None


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


def _has_reasoning(message: dict[str, Any]) -> bool:
    reasoning = message.get(REASONING_KEY)
    return isinstance(reasoning, str) and bool(reasoning)


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
            complete = complete and _has_reasoning(message)
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
# The headers the compaction request puts before each item of its material.
_ITEM_HEADERS = ("--- next item ---", "--- continued ---")
_TOOL_CALL = re.compile(r"\[tool call ([^\]\s]+)\] ([A-Za-z0-9_-]+)\(")
_TOOL_RESULT = re.compile(r"\[tool result ([^\]\s]+)\]$")
_DEMO_LINE_CHARS = 300


def _has_fact(line: str) -> bool:
    """Say whether a line holds a number, a `NONCE-…` token or a capitalised name."""
    if any(ch.isdigit() for ch in line) or _NONCE.search(line):
        return True
    words = _WORD.findall(line)
    # The first word is capitalised in any sentence; a name is a capital later in the line,
    # or a word written all in capitals.
    return any(w[0].isupper() for w in words[1:]) or any(len(w) > 1 and w.isupper() for w in words)


def _pieces(line: str) -> Iterator[str]:
    """Yield a line in pieces of at most `_DEMO_LINE_CHARS`, cut between words where it can."""
    line = line.strip()
    while len(line) > _DEMO_LINE_CHARS:
        cut = line.rfind(" ", 0, _DEMO_LINE_CHARS + 1)
        cut = cut if cut > 0 else _DEMO_LINE_CHARS
        yield line[:cut].rstrip()
        line = line[cut:].lstrip()
    if line:
        yield line


def _records(text: str) -> list[list[str]]:
    """Return the lines of each record of a summary request: an item of the material, or a
    paragraph (a summary written by `_summary` puts a blank line between its records)."""
    records: list[list[str]] = [[]]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line in _ITEM_HEADERS:
            if records[-1]:
                records.append([])
        elif not line.startswith(_SUMMARY_SCAFFOLD):
            records[-1].append(line)
    return [record for record in records if record]


def _kept(record: list[str], seen: set[str]) -> list[str]:
    """Return the pieces of a record a summary keeps: those with a fact, and the first piece of
    each tool result (what the tool returned is the fact), each once in the summary."""
    kept: list[str] = []
    result_follows = False
    for line in record:
        if line.startswith(DEMO_LABEL):
            continue
        for piece in _pieces(line):
            if (result_follows or _has_fact(piece)) and piece not in seen:
                kept.append(piece)
                seen.add(piece)
            result_follows = False
        result_follows = _TOOL_RESULT.match(line) is not None
    return kept


def _within(blocks: list[list[str]], room: int) -> str:
    """Join the most recent blocks that fit `room` characters, whole; of a block that does not
    fit alone, its most recent whole lines."""
    chosen: list[str] = []
    used = 0
    for block in reversed(blocks):
        text = "\n".join(block)
        if used + len(text) + 2 > room:
            if not chosen:
                lines = [line for line in block if len(line) < room]
                while lines and len("\n".join(lines)) > room:
                    lines.pop(0)
                chosen.append("\n".join(lines))
            break
        chosen.append(text)
        used += len(text) + 2
    return "\n\n".join(reversed([text for text in chosen if text]))


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


def _directives(question: str) -> list[tuple[str, str]]:
    """Return the `(name, arguments text)` of each `/tool NAME {json}` line of a question."""
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
    return calls


def _prose(text: str) -> str:
    """Return a summary's own text without what the compactor appends to it (the identifiers it
    kept verbatim and its citation line): the demo model reads and writes only its own lines."""
    kept = re.compile(
        rf"\n\n(?:{re.escape(KEPT_HEADER)}|{re.escape(SOURCES_HEADER)}).*?(?=\n\n|\Z)", re.S
    )
    return kept.sub("", text)


def _summary_material(messages: list[dict[str, Any]]) -> str:
    """Return what a summary request gives to summarise, as the demo model reads it.

    A segmented request's user text; a request on the conversation's prefix, every message above
    its instruction but the system head and the last ones it says are kept, one record each.
    """
    last = message_text(messages[-1]) if messages else ""
    if not last.startswith(PREFIX_MARK):
        return "\n".join(_prose(message_text(m)) for m in messages if m.get("role") == "user")
    kept = re.search(r"except its last (\d+) messages", last)
    above = messages[:-1]
    above = above[: len(above) - int(kept.group(1))] if kept else above
    records = [render_message(m) for m in above if m.get("role") != "system"]
    return "\n\n".join(_prose(record) for record in records)


def _from_progress(summary: str, asked: list[str]) -> ModelResponse:
    """Answer from a handoff summary: the latest results of the tools the question asked for,
    as an answer from tool results reads; else the summary's most recent facts. The plan a
    summary carries after its body is the plan, not progress."""
    body = _prose(summary.split(f"\n\n{PLAN_HEADER}\n", 1)[0])
    lines = [line.strip() for line in body.splitlines()[1:] if line.strip()]
    names: dict[str, str] = {}
    results: dict[str, str] = {}
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if call := _TOOL_CALL.match(line):
            names[call.group(1)] = call.group(2)
        elif (result := _TOOL_RESULT.match(line)) and not _TOOL_CALL.match(following):
            results[result.group(1)] = "" if _TOOL_RESULT.match(following) else following
    latest = {names[ref]: text for ref, text in results.items() if names.get(ref) in asked}
    if latest:
        head = "Based on the tool results (from the compacted progress on this question):"
        cited = [f"- {name}: {text}" for name, text in latest.items()]
        return _text("\n".join([f"{DEMO_LABEL} {head}", *cited]))
    facts = [line for line in lines if not line.startswith(DEMO_LABEL)][-8:]
    return _text("\n".join([f"{DEMO_LABEL} From the compacted progress on this question:", *facts]))


class LocalDemoGateway(ModelGateway):
    """A deterministic, offline stand-in for a model, labelled as a demo in every reply.

    - `/tool NAME {json}` in the latest user message: call that tool with those arguments;
    - after tool results: answer citing them; after a handoff summary of the question's work,
      answer citing the summarised results of the tools it asked for;
    - purpose `compaction`: an extractive handoff summary keeping every line with a fact marker
      (a digit, a capitalised name or a `NONCE-…` token) and what each tool returned, long lines
      taken in pieces between words; over its output limit it keeps the most recent records
      whole, never cutting inside a line;
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
        text = _summary_material(request.messages)
        seen: set[str] = set()
        # Each fact once, in the most recent record that holds it: the older records are the
        # first to go when room runs out, and must not take a repeated result with them.
        blocks = [kept for record in reversed(_records(text)) if (kept := _kept(record, seen))]
        blocks.reverse()
        # Within the output limit, counted as characters (never fewer than tokens): the most
        # recent records are kept, each whole, so nothing is cut inside a line.
        room = max(request.max_output_tokens - len(DEMO_LABEL) - 32, 0)
        body = _within(blocks, room) or "(no facts found in this part)"
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
        question = message_text(messages[asked]) if asked >= 0 else ""
        calls = _directives(question)
        if progress:
            # The work on this question was compacted: report from the summary instead of
            # starting the task over.
            return _from_progress(progress[-1], [name for name, _ in calls])
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
