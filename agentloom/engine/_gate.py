"""The integrity gate: the finished payload of every request is checked before it is sent.

What goes on the wire is decided per provider (`ModelGateway.payload`); the engine measures that
payload and checks it here, before every action, compaction and verification request. A broken
rule raises `PayloadRuleBroken` naming the rule, instead of paying for the provider's 400.
Each gateway names the rules of its API in `payload_rules`:

- `tool_call_order`: a message between a tool call and its results, a call left unanswered;
- `orphan_tool_message`: a tool message answering a call not made, or answered already;
- `duplicate_call_id`: two tool calls with one id (these three are `_protocol.order_problems`,
  the check the view and compaction use too);
- `reasoning`: under `never` (OpenAI, and compatible servers until they ask for it) any
  `reasoning_content`; under `tool_spans` (DeepSeek, and any server set to or learned in that
  rule), while thinking is on, an assistant message without it in a user-to-user span with tool
  calls ("The reasoning_content in the thinking mode must be passed back to the API");
- `run_note_placement` (views of rendering 2): a run note in the user's voice, a note that makes
  two assistant messages follow each other, an action request that ends with a note;
- `output_limit_field`: a missing or non-positive output limit, or one under another name.

DeepSeek's rule is the one its thinking-mode guide states (api-docs.deepseek.com/guides/
thinking_mode, "思考模式", read 2026-12-01): between two user messages in which the model called
tools, every assistant message's `reasoning_content` takes part in the context and must be
passed back in all later requests; between user messages without tool calls it is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentloom.engine._errors import PayloadRuleBroken
from agentloom.engine._protocol import (
    REASONING_KEY,
    RUN_NOTE_PREFIX,
    message_text,
    order_problems,
    tool_calls_of,
)

__all__ = [
    "OUTPUT_LIMIT_FIELDS",
    "REASONING_RULES",
    "PayloadRules",
    "check_payload",
    "payload_problems",
    "reasoning_required",
    "sent_request",
]

# The names chat-completions APIs give the output limit; a body carries exactly one of them.
OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
# Which assistant messages carry their reasoning in a body: none, or DeepSeek's tool spans.
REASONING_RULES = ("never", "tool_spans")


@dataclass(frozen=True)
class PayloadRules:
    """What one provider's API refuses in a chat-completions body (see the table above)."""

    output_limit_field: str = "max_tokens"
    # One of REASONING_RULES; the gateway's payload applies it and the gate checks it.
    reasoning: str = "never"

    def __post_init__(self) -> None:
        if self.reasoning not in REASONING_RULES:
            raise ValueError(f"reasoning must be one of {REASONING_RULES}")


def thinking_on(payload: dict[str, Any]) -> bool:
    """Return whether a body asks for thinking (DeepSeek's default when it says nothing)."""
    thinking = payload.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def reasoning_required(messages: list[dict[str, Any]]) -> list[int]:
    """Return the indexes of assistant messages that must carry reasoning (DeepSeek's rule).

    A span runs from one user message to the next (the last one to the end); when any assistant
    message in it calls tools, every assistant message in it must carry its reasoning.
    """
    required: list[int] = []
    span: list[int] = []
    called = False
    for index, message in enumerate([*messages, {"role": "user"}]):
        role = message.get("role")
        if role == "user":
            if called:
                required += span
            span, called = [], False
        elif role == "assistant":
            span.append(index)
            called = called or bool(tool_calls_of(message))
    return required


def _reasoning_problems(payload: dict[str, Any], rules: PayloadRules) -> list[tuple[str, str]]:
    messages = payload.get("messages") or []
    if rules.reasoning == "never":
        carrying = [i for i, m in enumerate(messages) if REASONING_KEY in m]
        if carrying:
            return [("reasoning", f"messages {carrying} carry {REASONING_KEY}")]
        return []
    if not thinking_on(payload):
        return []
    missing = [
        i
        for i in reasoning_required(messages)
        if not (isinstance(messages[i].get(REASONING_KEY), str) and messages[i][REASONING_KEY])
    ]
    if missing:
        return [("reasoning", f"assistant messages {missing} of a tool-call span lack it")]
    return []


_NOTES = "run_note_placement"


def _note_problems(messages: list[dict[str, Any]], purpose: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for index, message in enumerate(messages):
        note = message_text(message).startswith(RUN_NOTE_PREFIX)
        if note and message.get("role") == "user":
            problems.append((_NOTES, f"message {index} is a note in the user's voice"))
        if index and message.get("role") == messages[index - 1].get("role") == "assistant":
            earlier = message_text(messages[index - 1]).startswith(RUN_NOTE_PREFIX)
            if note or earlier:
                problems.append((_NOTES, f"a note makes messages {index - 1}, {index} assistant"))
    if purpose == "action" and messages and message_text(messages[-1]).startswith(RUN_NOTE_PREFIX):
        problems.append((_NOTES, "the action request ends with a run note"))
    return problems


def _limit_problems(payload: dict[str, Any], rules: PayloadRules) -> list[tuple[str, str]]:
    field = rules.output_limit_field
    limit = payload.get(field)
    problems = []
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        problems.append(("output_limit_field", f"{field} must be a positive integer"))
    others = [name for name in OUTPUT_LIMIT_FIELDS if name != field and name in payload]
    if others:
        problems.append(("output_limit_field", f"the limit goes in {field}, not {others}"))
    return problems


def payload_problems(
    payload: dict[str, Any], rules: PayloadRules, *, purpose: str, notes_placed: bool
) -> list[tuple[str, str]]:
    """Return every `(rule, detail)` the payload breaks (empty when it may be sent).

    `notes_placed` is True when the view was made under a rendering that places run notes
    (`Rendering.notes_wait`); older views are not held to that rule.
    """
    messages = list(payload.get("messages") or [])
    problems = [(problem.rule, problem.text) for problem in order_problems(messages)]
    problems += _reasoning_problems(payload, rules)
    if notes_placed:
        problems += _note_problems(messages, purpose)
    problems += _limit_problems(payload, rules)
    return problems


def check_payload(
    payload: dict[str, Any], rules: PayloadRules, *, purpose: str, notes_placed: bool
) -> None:
    """Raise `PayloadRuleBroken` for the first rule the payload breaks."""
    problems = payload_problems(payload, rules, purpose=purpose, notes_placed=notes_placed)
    if problems:
        raise PayloadRuleBroken(*problems[0])


def sent_request(payload: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return the messages and tool schemas a payload sends: what its size is measured on."""
    return list(payload.get("messages") or []), list(payload.get("tools") or [])
