"""A tool server's questions to the person: where a run waits, and what the journal keeps.

Under the 2026-07-28 MCP revision a server that needs the person's answer ends the call with
`input_required`: its questions and an opaque request state. The tool raises `InputRequired`; on
the main instance the run stops at the safe point after it: the call and the calls after it stay
open in the tool group, the questions and the request state are kept in the checkpoint
(`state.asking`), and the execution ends `waiting_input` listing them
(`RunOutcome.pending_questions`). The application collects the person's answers (accept with
content, decline, cancel) and continues the run with `Engine.continue_run`: the same call is sent
again with the answers and the request state — one logical call, never a retry of a call whose
outcome is unknown. A server may ask again: another wait.

Under the 2025 revisions the server asks while the call is open (`elicitation/create`): the tool
asks through `ToolContext.ask` with the time the call has left, and gets the answers, or None
when no one answered in time (the tool then declines).

Either way, each question and each answer is journaled as feedback after the tool group closes
(`state.asked` holds them until then), never between a call and its result. Only the main
instance asks a person; a sub-agent's tool is told none can answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentloom.engine._errors import EngineError

__all__ = [
    "ANSWER_ACTIONS",
    "WAITING_INPUT",
    "Answer",
    "InputReply",
    "InputRequired",
    "answer_feedback",
    "pending_questions",
    "question_feedback",
    "reply_of",
]

WAITING_INPUT = "waiting_input"
ANSWER_ACTIONS = ("accept", "decline", "cancel")


class InputRequired(EngineError):
    """Raised by a tool whose server needs the person's answers before the call can finish.

    `questions` are plain dicts, each with a `key` (the server's); `request_state` is the
    server's opaque state, sent back as it came.
    """

    def __init__(self, *, server: str, questions: list[dict[str, Any]], request_state: str | None):
        super().__init__(f"the tool server {server} asked {len(questions)} question(s)")
        self.server = server
        self.questions = questions
        self.request_state = request_state


@dataclass(frozen=True)
class Answer:
    """A person's answer to one question: `accept` (with `content`), `decline` or `cancel`."""

    action: str
    by: str
    at: str
    content: dict[str, Any] | None = None

    def response(self) -> dict[str, Any]:
        """Return the answer as the server reads it (`action`, and `content` when accepted)."""
        if self.action == "accept" and self.content is not None:
            return {"action": "accept", "content": dict(self.content)}
        return {"action": self.action}


@dataclass(frozen=True)
class InputReply:
    """What a tool sends its server again: the answers by question key and the request state."""

    responses: dict[str, dict[str, Any]]
    request_state: str | None


def pending_questions(asking: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the questions of a wait, each naming its call, tool and server."""
    return [
        {
            **question,
            "call_id": asking["call_id"],
            "tool": asking["tool"],
            "server": asking["server"],
        }
        for question in asking["questions"]
    ]


def reply_of(asking: Mapping[str, Any], answers: Mapping[str, Answer]) -> InputReply | None:
    """Return the reply to a wait once every question has an answer (else None)."""
    keys = [question["key"] for question in asking["questions"]]
    if any(key not in answers for key in keys):
        return None
    return InputReply({key: answers[key].response() for key in keys}, asking.get("request_state"))


def question_feedback(server: str, tool: str, call_id: str, question: Mapping[str, Any]) -> str:
    """Return the feedback that journals one question of a server."""
    text = f"tool server {server} asked during {tool} ({call_id}): {question.get('message', '')}"
    if question.get("mode") == "url":
        text += f" [URL: {question.get('url', '')}]"
    return text


def answer_feedback(tool: str, call_id: str, key: str, answer: Answer | None) -> str:
    """Return the feedback that journals the answer to question `key` (None: no one answered)."""
    if answer is None:
        return f"no one answered question {key} of {tool} ({call_id}) in time: declined"
    text = f"question {key} of {tool} ({call_id}): {answer.action} by {answer.by} at {answer.at}"
    if answer.action == "accept" and answer.content:
        text += ": " + json.dumps(answer.content, ensure_ascii=False, sort_keys=True)
    return text
