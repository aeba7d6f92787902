"""Reads of a run's approvals: the calls it still waits on, and the decisions taken so far.

The rule (who decides, once each) is `services.approvals`'.
"""

from __future__ import annotations

from typing import Any

from agentloom.engine import Decision
from sessions_app.models import Run


def undecided(run: Run) -> list[dict[str, Any]]:
    """Return the calls `run` waits on that have no decision yet."""
    decided = run.approval_decisions or {}
    return [item for item in run.pending_approvals or [] if item["call_id"] not in decided]


def decisions_of(run: Run) -> dict[str, Decision]:
    """Return the engine's decisions of `run`, by call id."""
    return {
        call_id: Decision(
            approved=entry["approved"], by=entry["by"], at=entry["at"], note=entry["note"]
        )
        for call_id, entry in (run.approval_decisions or {}).items()
    }
