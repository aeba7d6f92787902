"""Approval of tool calls by a person: where a run waits, and what a decision records.

A tool may require approval (`Tool.needs_approval`). When the main instance's model calls one,
the run stops at the safe point after that response, before any call of it runs: the tool group
stays open in the checkpoint and the execution ends `waiting_approval`, listing each undecided
call (`RunOutcome.pending_approvals`). The application collects the decisions and continues the
run with `Engine.continue_run`, which is not a resume: the attempt, the model-call count of the
execution and the run's error stay as they were. The group then runs in order: each decision is
journaled as feedback (who, when, which call); an approved call runs; a denied one gets a
`denied` result (never presumed done) and its note as feedback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "WAITING_APPROVAL",
    "Decision",
    "decision_feedback",
    "denied_result",
    "pending_approvals",
]

WAITING_APPROVAL = "waiting_approval"


@dataclass(frozen=True)
class Decision:
    """A person's decision on one tool call: `by` (a name) and `at` (ISO 8601) for the record."""

    approved: bool
    by: str
    at: str
    note: str = ""


def pending_approvals(
    calls: Iterable[dict[str, Any]], needs_approval, decisions: Mapping[str, Decision]
) -> list[dict[str, Any]]:
    """Return `{call_id, tool, arguments}` of each call that needs a decision it has not got."""
    return [
        {
            "call_id": call["id"],
            "tool": call["function"]["name"],
            "arguments": call["function"].get("arguments") or "{}",
        }
        for call in calls
        if needs_approval(call["function"]["name"]) and call["id"] not in decisions
    ]


def decision_feedback(tool: str, call_id: str, decision: Decision) -> str:
    """Return the feedback that journals `decision`."""
    verb = "approved" if decision.approved else "denied"
    text = f"tool call {tool} ({call_id}) {verb} by {decision.by} at {decision.at}"
    return f"{text}: {decision.note}" if decision.note else text


def denied_result(note: str) -> str:
    """Return the result of a denied call: it never ran."""
    result = {"status": "denied", "note": "A person denied this tool call; it was not executed."}
    if note:
        result["reason"] = note
    return json.dumps(result, ensure_ascii=False)
