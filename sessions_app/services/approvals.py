"""Approval of tool calls: a person decides each call a run waits on, then the run goes on.

A run stops `waiting_approval` when its model calls a tool that needs approval (the engine's
rule, `agentloom/engine/_approval.py`): it holds no worker and no lease, and counts as active
for the one-active-run rule. Only the session's creator decides (session content is theirs);
each call is decided once (a second decision is a 409, whichever request came second). When
every pending call is decided the run is queued again and continues by its own transition
(`Engine.continue_run`): no new attempt, no reset of the call budget, no cleared error. The
engine journals each decision as feedback (who, when, which call) when the run continues; until
then the decisions are kept on the run, so they survive restarts.

Supplements sent while a run waits are queued and delivered after its tool group closes. Cancel
ends a waiting run at once, and a decision after it is a 409 that says the cancel came first;
once the last decision has queued the run, a cancel is the 409, saying the decisions came first
(sent together, one wins and the other says so). A wait no one decides ends `cancelled` after
`RUN_APPROVAL_SECONDS` (`sweep_expired_approvals`, run by the beat with the lease sweep), with
the reason; so does a wait for answers to a tool server's questions (`services.questions`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentloom.errors import Conflict, InvalidInput, NotFound
from agentloom.validation import clean_text
from context_app.engine_adapter import redactor_for
from sessions_app.models import Run
from sessions_app.selectors.approvals import undecided
from sessions_app.services.journal import ended_run_fields, lock_run, status_journal
from sessions_app.services.runs import lock_live_session, queue_waiting

__all__ = [
    "APPROVAL_EXPIRED",
    "run_decide",
    "sweep_expired_approvals",
]

MAX_NOTE_CHARS = 2_000
APPROVAL_EXPIRED = "approval_expired"
INPUT_EXPIRED = "input_expired"
DECISIONS = ("approve", "deny")


@transaction.atomic(durable=True)
def run_decide(*, user, run: Run, call_id: Any, decision: Any, note: Any = "") -> Run:
    """Approve or deny one call `run` waits on; queue the run once every call is decided."""
    if run.session.created_by_id != user.pk:
        raise NotFound("Not found.")
    if decision not in DECISIONS:
        raise InvalidInput("Must be approve or deny.", field="decision")
    note = clean_text(note, field="note", max_chars=MAX_NOTE_CHARS, required=False).strip()
    note = redactor_for(run.session.agent_version).text(note)
    # The session first, then the run: the journal writers' lock order.
    lock_live_session(run.session_id)
    run = lock_run(run.pk, session_id=run.session_id)
    pending = {item["call_id"] for item in run.pending_approvals or []}
    if call_id not in pending:
        raise InvalidInput("This run waits on no such tool call.", field="call_id")
    if call_id in (run.approval_decisions or {}):
        raise Conflict("This tool call has already been decided.")
    if run.status == Run.Status.CANCELLED:
        # A cancel that came first wins; the decision must not look accepted.
        reason = f" ({run.error})" if run.error else ""
        raise Conflict(f"This run was cancelled before this decision{reason}: nothing was decided.")
    if run.status != Run.Status.WAITING_APPROVAL:
        raise Conflict(f"This run is not waiting for approval (it is {run.status}).")
    decisions = dict(run.approval_decisions or {})
    decisions[call_id] = {
        "approved": decision == "approve",
        "note": note,
        "by": user.get_username(),
        "at": timezone.now().isoformat(),
    }
    run.approval_decisions = decisions
    fields = ["approval_decisions", "updated_at"]
    if not undecided(run):
        fields += queue_waiting(run)
    run.save(update_fields=fields)
    return run


def sweep_expired_approvals(*, now=None) -> list[int]:
    """End every wait (for approval or for answers) older than `RUN_APPROVAL_SECONDS` as
    `cancelled`; return the run ids."""
    now = now or timezone.now()
    seconds = settings.RUN_APPROVAL_SECONDS
    cutoff = now - timedelta(seconds=seconds)
    stale = Run.objects.filter(status__in=Run.WAITING_STATUSES, waiting_since__lt=cutoff)
    ended = []
    reasons = {
        Run.Status.WAITING_APPROVAL: f"{APPROVAL_EXPIRED}: no decision within {seconds} seconds",
        Run.Status.WAITING_INPUT: f"{INPUT_EXPIRED}: no answer within {seconds} seconds",
    }
    for run_id, session_id in stale.values_list("pk", "session_id"):
        with transaction.atomic():
            run = lock_run(run_id, session_id=session_id)
            if run.status not in Run.WAITING_STATUSES or run.waiting_since >= cutoff:
                continue
            reason = reasons[run.status]
            fields = ended_run_fields({"status": Run.Status.CANCELLED, "error": reason}, {})
            fields["finished_at"] = now
            for name, value in fields.items():
                setattr(run, name, value)
            run.save(update_fields=[*fields, "updated_at"])
            status_journal(run, status=Run.Status.CANCELLED, error=reason)
            ended.append(run.pk)
    return ended
