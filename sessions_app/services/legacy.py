"""Adopt runs from before the journal existed, so that the runs after them inherit them.

A legacy checkpoint is a format-1 frame without `context.records`. Its run adopts the surviving
suffix of its own messages (from its question on); older runs without any checkpoint adopt their
question, answer and status. What was dropped before the journal existed cannot be recovered, so
every adopted frame is marked `raw_complete: false`. Adoption is idempotent: it uses stable entry
keys and skips runs whose frame already has records. Each message keeps its kind: feedback and
run notes are adopted as feedback (`_kind_of`).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentloom.engine import (
    FEEDBACK_PREFIX,
    RUN_NOTE_PREFIX,
    USER_INPUT_KEY,
    legacy_key,
    message_text,
    status_key,
)
from context_app.engine_adapter import redactor_for
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage
from sessions_app.services.journal import append_records, lock_run

_KIND_BY_ROLE = {"user": "supplement", "assistant": "assistant", "tool": "tool_result"}


def _kind_of(message: dict[str, Any]) -> str:
    """Return the journal kind of a message after a legacy run's question.

    Feedback stays feedback: a user message that begins `[feedback] ` (the run notes of that
    time too), or a `[run note] ` on the assistant side, is the engine talking, never the user's
    supplement nor a model step. Adoptions made before this read as supplements; the
    projection of rendering 4 shows them as feedback (`is_adopted_feedback`).
    """
    text = message_text(message)
    if message.get("role") == "user" and text.startswith(FEEDBACK_PREFIX):
        return "feedback"
    if message.get("role") == "assistant" and text.startswith(RUN_NOTE_PREFIX):
        return "feedback"
    # Any other role (a system note) is the engine's too.
    return _KIND_BY_ROLE.get(message.get("role"), "feedback")


def is_legacy_checkpoint(checkpoint: Any) -> bool:
    """Return True for a format-1 frame without records (by-reference frames hold none)."""
    if not isinstance(checkpoint, dict) or checkpoint.get("format", 1) != 1:
        return False
    return not (checkpoint.get("context") or {}).get("records")


def _own_suffix(run: Run, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the messages from this run's question on (the rest was inherited history)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and message.get("content") == run.question:
            return messages[index:]
    return [{"role": "user", "content": run.question}]


def _legacy_records(run: Run) -> list[dict[str, Any]]:
    if isinstance(run.checkpoint, dict):
        suffix = _own_suffix(run, list(run.checkpoint.get("messages") or []))
    else:
        suffix = [{"role": "user", "content": run.question}]
        if run.answer:
            suffix.append({"role": "assistant", "content": run.answer})
    at = run.created_at.isoformat()
    records = []
    for index, message in enumerate(suffix):
        if index == 0:
            kind, key = "user_input", USER_INPUT_KEY
        else:
            kind, key = _kind_of(message), legacy_key(index)
        records.append(
            {"seq": index + 1, "kind": kind, "message": message, "entry_key": key, "at": at}
        )
    if run.status in Run.FINISHED_STATUSES:
        records.append(
            {
                "seq": len(records) + 1,
                "kind": "status",
                "message": {"status": run.status, "error": run.error or None},
                "entry_key": status_key(run.attempt),
                "at": (run.finished_at or run.updated_at).isoformat(),
            }
        )
    return records


def _needs_adoption(run: Run) -> bool:
    if run.checkpoint is None:
        # A run without a checkpoint is legacy only once finished (a queued one has not started).
        return (
            run.status in Run.FINISHED_STATUSES
            and not SessionMessage.objects.filter(run=run).exists()
        )
    return is_legacy_checkpoint(run.checkpoint)


@transaction.atomic
def adopt_legacy_run(run: Run) -> int:
    """Journal what survives of a legacy run; return how many records were added."""
    run = lock_run(run.pk, session_id=run.session_id)
    if not _needs_adoption(run):
        return 0
    # Legacy frames were written before every path redacted: redact what is adopted.
    redactor = redactor_for(run.session.agent_version)
    records = [
        {**record, "message": redactor.value(record["message"])} for record in _legacy_records(run)
    ]
    at = run.created_at or timezone.now()
    new = append_records(
        run_id=run.pk,
        session_id=run.session_id,
        records=(
            (MAIN_INSTANCE, r["kind"], r["entry_key"], r["message"], at, r["seq"]) for r in records
        ),
    )
    rewritten: dict[str, Any] = {"question": redactor.text(run.question)}
    if isinstance(run.checkpoint, dict):
        frame = redactor.value(dict(run.checkpoint))
        context = dict(frame.get("context") or {})
        context["records"] = records
        context["raw_complete"] = False
        frame["context"] = context
        rewritten["checkpoint"] = frame
    Run.objects.filter(pk=run.pk).update(**rewritten)
    return len(new)


def adopt_legacy_runs(*, session: Session | None = None) -> int:
    """Adopt every legacy run (of `session`, or of all sessions) in run order."""
    runs = Run.objects.exclude(status__in=Run.ACTIVE_STATUSES).order_by("session_id", "number")
    if session is not None:
        runs = runs.filter(session=session)
    return sum(adopt_legacy_run(run) for run in runs if _needs_adoption(run))


def adopt_unjournaled_runs(*, session: Session) -> int:
    """Adopt the session's finished runs that have nothing in the journal.

    Called before a new question takes its watermark, so that question inherits them. Found in
    one query on clear columns: no checkpoint is decrypted unless a run has no journal rows.
    The query reads every finished run of the session, so it runs once per session: after it
    the session is marked `runs_journaled` (every run that finishes from then on journals its
    status at least), and a session opened since is marked from the start.
    """
    if session.runs_journaled:
        # Never turned back: an instance read before the mark only looks once more.
        return 0
    unjournaled = (
        Run.objects.filter(session=session, status__in=Run.FINISHED_STATUSES)
        .exclude(Exists(SessionMessage.objects.filter(run=OuterRef("pk"))))
        .order_by()
    )
    # Put in run order here: ordered by the query, SQLite would walk the session's run rows by
    # number instead of the (status, session) index, reading every run's wide row.
    adopted = sum(adopt_legacy_run(run) for run in sorted(unjournaled, key=lambda run: run.number))
    Session.objects.filter(pk=session.pk).update(runs_journaled=True)
    session.runs_journaled = True
    return adopted
