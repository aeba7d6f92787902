"""Reads of a run's questions from tool servers: those still unanswered, and the answers so far.

The rule (who answers, once each, and when a run goes on) is `services.questions`'.
"""

from __future__ import annotations

from typing import Any

from agentloom.engine import Answer
from sessions_app.models import Run


def unanswered(run: Run) -> list[dict[str, Any]]:
    """Return the questions `run` waits on (or a call of it asks) that have no answer yet."""
    if run.status not in (Run.Status.WAITING_INPUT, Run.Status.RUNNING):
        return []
    answered = run.question_answers or {}
    return [item for item in run.pending_questions or [] if item["key"] not in answered]


def answers_of(run: Run) -> dict[str, Answer]:
    """Return the engine's answers of `run`, by question key."""
    return {
        key: Answer(
            action=entry["action"], by=entry["by"], at=entry["at"], content=entry.get("content")
        )
        for key, entry in (run.question_answers or {}).items()
    }
