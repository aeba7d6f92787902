"""A tool server's questions to the person: the session's creator answers, then the run goes on.

Two ways a server asks (the engine's rule, `agentloom/engine/_asking.py`):

- Under MCP 2026-07-28 a call answers `input_required`: the run stops at a safe point
  `waiting_input`, holding no worker, no lease and no database connection (like
  `waiting_approval`; it counts as active for the one-active-run rule). Its questions and the
  server's request state are in its checkpoint (encrypted); the questions are listed on the run.
  When every question has an answer the run is queued again and continues by its own transition
  (`Engine.continue_run`): the same call is sent with the answers — one logical call, not a
  retry.
- Under the 2025 revisions the server asks while the call is open (`elicitation/create`): the
  worker lists the question on the running run with the call's deadline (`ask_during_call`) and
  reads the run's answers every `ASK_POLL_SECONDS`, each read in one of the process's database
  slots, holding none while it waits. No answer by the deadline declines the question.

Only the session's creator answers: accept (with the form's content, checked against its
fields, or a URL confirmed), decline or cancel; each question once (a second answer is a 409).
A cancelled run takes no answer. A wait no one answers ends `cancelled` after
`RUN_APPROVAL_SECONDS`, like an approval (`services.approvals.sweep_expired_approvals`).

Each round of questions, once answered (or, during a call, declined for want of an answer), is
kept on the run in order (`question_rounds`), so a replay answers as the run did.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentloom.engine import ANSWER_ACTIONS, Answer
from agentloom.errors import Conflict, InvalidInput, NotFound
from agentloom.toolservers import AnswerError, checked_content
from context_app.engine_adapter import redactor_for
from sessions_app.models import Run
from sessions_app.selectors.questions import answers_of
from sessions_app.services.journal import lock_run
from sessions_app.services.runs import lock_live_session, queue_waiting
from sessions_app.services.slots import database_slots

__all__ = ["ASK_POLL_SECONDS", "ask_during_call", "run_answer"]

_LISTED = ("call_id", "tool", "server", "deadline")

ASK_POLL_SECONDS = 0.5


def _checked_answer(question: dict[str, Any], action: Any, content: Any, url_confirmed: Any):
    """Return the content an answer sends (None unless an accepted form), or raise."""
    if action not in ANSWER_ACTIONS:
        raise InvalidInput("Must be accept, decline or cancel.", field="action")
    if action != "accept":
        return None
    if question.get("unsupported"):
        raise InvalidInput(
            "This question cannot be answered here: decline or cancel it.", field="action"
        )
    if question["mode"] == "url":
        if url_confirmed is not True:
            raise InvalidInput(
                "Confirm the URL (shown whole) before accepting it.", field="url_confirmed"
            )
        return None
    try:
        return checked_content(question, content)
    except AnswerError as error:
        raise InvalidInput(error.message, field=error.field) from None


def _round(
    questions: list[dict[str, Any]], answers: dict[str, Any] | None, *, open_call: bool
) -> dict[str, Any]:
    """Return the record of one round of questions and their answers, for replay."""
    first = questions[0]
    return {
        "call_id": first["call_id"],
        "tool": first["tool"],
        "server": first["server"],
        "questions": [{k: v for k, v in q.items() if k not in _LISTED} for q in questions],
        "answers": answers,
        "open_call": open_call,
    }


def _answerable(run: Run, question: dict[str, Any]) -> None:
    """Raise unless `run` takes an answer to `question` now."""
    if run.status == Run.Status.CANCELLED:
        reason = f" ({run.error})" if run.error else ""
        raise Conflict(f"This run was cancelled before this answer{reason}: nothing was sent.")
    if run.status == Run.Status.WAITING_INPUT:
        return
    deadline = question.get("deadline")
    if run.status == Run.Status.RUNNING and deadline:
        if datetime.fromisoformat(deadline) <= timezone.now():
            raise Conflict("The call that asked this has passed its deadline: it was declined.")
        return
    raise Conflict(f"This run is not waiting for answers (it is {run.status}).")


@transaction.atomic(durable=True)
def run_answer(
    *, user, run: Run, key: Any, action: Any, content: Any = None, url_confirmed: Any = False
) -> Run:
    """Answer one question of a tool server that `run` waits on (or a call of it asks); queue a
    waiting run once every question of its wait has an answer."""
    if run.session.created_by_id != user.pk:
        raise NotFound("Not found.")
    # The session first, then the run: the journal writers' lock order.
    lock_live_session(run.session_id)
    run = lock_run(run.pk, session_id=run.session_id)
    questions = {item["key"]: item for item in run.pending_questions or []}
    question = questions.get(key) if isinstance(key, str) else None
    if question is None:
        raise InvalidInput("This run waits on no such question.", field="key")
    content = _checked_answer(question, action, content, url_confirmed)
    if key in (run.question_answers or {}):
        raise Conflict("This question has already been answered.")
    _answerable(run, question)
    answers = dict(run.question_answers or {})
    answers[key] = {
        "action": action,
        "content": redactor_for(run.session.agent_version).value(content),
        "by": user.get_username(),
        "at": timezone.now().isoformat(),
    }
    run.question_answers = answers
    fields = ["question_answers", "updated_at"]
    if run.status == Run.Status.WAITING_INPUT and all(k in answers for k in questions):
        asked = _round(list(questions.values()), answers, open_call=False)
        run.question_rounds = [*(run.question_rounds or []), asked]
        fields += ["question_rounds", *queue_waiting(run)]
    run.save(update_fields=fields)
    return run


def ask_during_call(
    run_id: int,
    owner: str,
    questions: list[dict[str, Any]],
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Answer] | None:
    """List `questions` on the running run until its person answers them all, within `seconds`;
    return the answers, or None (declined) when the time ran out, the run was asked to cancel or
    this worker lost it. Each read holds a database slot; the wait between holds none."""
    deadline = timezone.now() + timedelta(seconds=seconds)
    listed = [{**question, "deadline": deadline.isoformat()} for question in questions]
    keys = {question["key"] for question in questions}
    ours = Run.objects.filter(pk=run_id, lease_owner=owner, status=Run.Status.RUNNING)
    with database_slots.held():
        # Answers of earlier questions were journaled; keys may come again.
        if not ours.update(
            pending_questions=listed, question_answers={}, updated_at=timezone.now()
        ):
            return None
    ends = clock() + seconds
    answered: dict[str, Any] | None = None
    try:
        while clock() < ends:
            time.sleep(min(ASK_POLL_SECONDS, max(0.0, ends - clock())))
            with database_slots.held():
                run = ours.only("pk", "question_answers", "cancel_requested").first()
            if run is None or run.cancel_requested:
                return None
            stored = {k: v for k, v in (run.question_answers or {}).items() if k in keys}
            if len(stored) == len(keys):
                answered = stored
                return {key: answer for key, answer in answers_of(run).items() if key in keys}
        return None
    finally:
        _close_open_call(run_id, listed, answered)


def _close_open_call(
    run_id: int, questions: list[dict[str, Any]], answers: dict[str, Any] | None
) -> None:
    """Take an open call's questions off the run and keep the round, in one slot."""
    with database_slots.held(), transaction.atomic():
        run = Run.objects.select_for_update().only("pk", "question_rounds").get(pk=run_id)
        rounds = [*(run.question_rounds or []), _round(questions, answers, open_call=True)]
        Run.objects.filter(pk=run_id).update(
            pending_questions=[], question_rounds=rounds, updated_at=timezone.now()
        )
