"""Chat-message helpers shared by the view, compaction, projection and the demo model.

The ordering rules are the ones OpenAI enforces on a chat-completions request: an assistant
message's tool calls are answered by one tool message each, right after it and before any other
message; a tool message answers a call that was made and not yet answered; call ids are unique.
`order_problems` is the one check of them: the view, compaction, an inherited history and the
integrity gate (`_gate`, which reports each under its rule's name) all ask it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CANCELLED_RESULT",
    "FEEDBACK_PREFIX",
    "HANDOFF_MARK",
    "INTERRUPTED_RESULT",
    "REASONING_KEY",
    "RUN_NOTE_PREFIX",
    "TOOL_RESULT_VIEW_CHARS",
    "UNKNOWN_RESULT",
    "OrderProblem",
    "cap_tool_result",
    "clean_assistant_message",
    "message_text",
    "order_problems",
    "place_run_note",
    "protocol_problems",
    "render_message",
    "run_note",
    "run_states_text",
    "tool_calls_of",
]

# The view shows at most this many characters of one tool result; the record keeps all of it.
TOOL_RESULT_VIEW_CHARS = 24_000

FEEDBACK_PREFIX = "[feedback] "
# How every handoff summary in a view begins, so readers (and the demo model) can tell it apart.
HANDOFF_MARK = "[handoff summary]"

# What a call without a recorded result is answered with: never re-executed, never assumed done.
UNKNOWN_RESULT = json.dumps(
    {
        "status": "unknown",
        "note": (
            "No result was recorded for this tool call. Do not assume it succeeded; "
            "it was not re-executed."
        ),
    }
)


# What a call returned after a cancel request is answered with: it never ran.
CANCELLED_RESULT = json.dumps(
    {
        "status": "cancelled",
        "note": "The run was cancelled before this tool call ran; it was not executed.",
    }
)
# What a tool stopped by a cancellation while it ran is answered with: never presumed done.
INTERRUPTED_RESULT = json.dumps(
    {
        "status": "cancelled",
        "note": (
            "The run was cancelled while this tool ran and the tool was stopped. Do not assume "
            "it completed."
        ),
    }
)

# Where a provider's reasoning text (its chain of thought) sits in an assistant message.
REASONING_KEY = "reasoning_content"

# How a run-status note begins (a run stopped, failed or was cancelled). A note is never in the
# user's voice, so a resumed run does not read its own stop reason as the latest request.
RUN_NOTE_PREFIX = "[run note] "


def run_note(text: str, *, role: str = "assistant") -> dict[str, Any]:
    """Return the view message of a run-status note, clearly marked.

    Rendering 1 shows notes on the assistant side; rendering 2 as system messages (see
    `place_run_note`), so a note never makes two assistant messages follow each other.
    """
    return {"role": role, "content": RUN_NOTE_PREFIX + text}


def run_states_text(states: list[tuple[Any, str, str, str | None]]) -> str:
    """Return one short note for consecutive run states: (run, status, reason, reference).

    Runs in a row that ended the same way are named as a range, each state with the kind of its
    error only (`context_budget_exceeded`, `upstream`, …); the whole stop note stays in the
    journal, named by its reference, so the note stays short however often runs fail.
    """
    parts: list[str] = []
    index = 0
    while index < len(states):
        run, status, reason, _ = states[index]
        end = index
        while end + 1 < len(states) and states[end + 1][1:3] == (status, reason):
            end += 1
        last = states[end][0]
        refs = [ref for *_, ref in states[index : end + 1] if ref]
        who = f"run {run}" if end == index else f"runs {run}–{last}"
        text = f"{who} {status}" + (f": {reason}" if reason else "")
        if refs:
            text += f" ({refs[0]})" if len(refs) == 1 else f" ({refs[0]} … {refs[-1]})"
        parts.append(text)
        index = end + 1
    return "; ".join(parts)


def place_run_note(
    waiting: list[Any], next_message: dict[str, Any], *, group_open: bool
) -> list[Any]:
    """Return the notes of `waiting` to show now, right before `next_message`.

    Where a run note goes (rendering 2): it waits until another message follows it, then goes
    right before that message, once no tool group is open (never between a call and its
    results). So a note never ends a request, never stands between two tool messages, and every
    earlier request stays a byte-identical prefix of the later ones. Empty while it must wait.
    """
    if group_open or next_message.get("role") == "tool":
        return []
    return list(waiting)


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the tool calls of an assistant message (empty for any other message)."""
    if message.get("role") != "assistant":
        return []
    return list(message.get("tool_calls") or [])


def message_text(message: dict[str, Any]) -> str:
    """Return the text of a message's content, joining text parts."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def clean_assistant_message(
    message: dict[str, Any], *, keep_reasoning: bool = False
) -> dict[str, Any]:
    """Return the protocol fields of an assistant message, with string arguments.

    Provider extras (audio ids, refusals) are dropped. With `keep_reasoning` the provider's
    reasoning text (`reasoning_content`) is kept: it is part of the record, and each gateway's
    payload decides whether it is sent back (see `ModelGateway.payload`).
    """
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {
                "id": str(call.get("id") or ""),
                "type": "function",
                "function": {"name": str(function.get("name") or ""), "arguments": arguments},
            }
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = message_text(message)
    cleaned: dict[str, Any] = {"role": "assistant", "content": content}
    reasoning = message.get(REASONING_KEY)
    if keep_reasoning and isinstance(reasoning, str) and reasoning:
        cleaned[REASONING_KEY] = reasoning
    if calls:
        cleaned["tool_calls"] = calls
    elif content is None:
        cleaned["content"] = ""
    return cleaned


def cap_tool_result(content: str, limit: int = TOOL_RESULT_VIEW_CHARS) -> str:
    """Return the first `limit` characters of a tool result and a marker saying what was cut."""
    if len(content) <= limit:
        return content
    cut = len(content) - limit
    return (
        content[:limit] + f"\n[truncated: {cut} characters cut from this tool result; "
        "the full result is kept in the session record]"
    )


def render_message(message: dict[str, Any]) -> str:
    """Return a message as plain text, for summaries and verification evidence."""
    role = message.get("role", "unknown")
    if role == "tool":
        return f"[tool result {message.get('tool_call_id')}]\n{message_text(message)}"
    lines = [f"[{role}]"]
    text = message_text(message)
    if text:
        lines.append(text)
    for call in tool_calls_of(message):
        function = call.get("function") or {}
        lines.append(
            f"[tool call {call.get('id')}] {function.get('name')}({function.get('arguments')})"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class OrderProblem:
    """One tool-call ordering rule a list of messages breaks, and where.

    `rule` names it as the integrity gate does: `orphan_tool_message` (a tool message answering a
    call not made, or answered already), `tool_call_order` (a message between a call and its
    results, or calls left unanswered at the end: `index` None) or `duplicate_call_id`.
    """

    rule: str
    index: int | None
    text: str


def order_problems(messages: list[dict[str, Any]]) -> list[OrderProblem]:
    """Return every tool-call ordering rule that `messages` breaks, in message order."""
    problems: list[OrderProblem] = []
    issued: set[Any] = set()
    waiting: list[Any] = []
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id in waiting:
                waiting.remove(call_id)
            else:
                text = f"message {index}: tool result for {call_id!r} out of its group"
                problems.append(OrderProblem("orphan_tool_message", index, text))
            continue
        if waiting:
            text = f"message {index}: {message.get('role')} before results {waiting}"
            problems.append(OrderProblem("tool_call_order", index, text))
            waiting = []
        for call in tool_calls_of(message):
            call_id = call.get("id")
            if call_id in issued:
                text = f"message {index}: duplicate tool call id {call_id!r}"
                problems.append(OrderProblem("duplicate_call_id", index, text))
            issued.add(call_id)
            waiting.append(call_id)
    if waiting:
        text = f"end: tool calls without results {waiting}"
        problems.append(OrderProblem("tool_call_order", None, text))
    return problems


def protocol_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Return the text of every tool-call ordering rule `messages` breaks (empty when valid)."""
    return [problem.text for problem in order_problems(messages)]
