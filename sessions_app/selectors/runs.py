"""Reads of runs: a run its reader may see, its counters, its model calls, what it waits on.

A run is readable by whoever may read its session (`selectors.sessions`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from django.db.models import Min, QuerySet

from agentloom.errors import NotFound
from sessions_app.models import MAIN_INSTANCE, ModelCall, Run, Session, SessionMessage

COUNTER_NAMES = ("user_turns", "model_steps", "baseline_user_turns", "baseline_model_steps")


def runs_of(session: Session) -> QuerySet[Run]:
    """Return the session's runs, newest first (checkpoints are not loaded or decrypted)."""
    return Run.objects.filter(session=session).defer("checkpoint").order_by("-number")


def active_run(session: Session) -> Run | None:
    """Return the session's queued or running run, if any (at most one exists)."""
    return runs_of(session).filter(status__in=Run.ACTIVE_STATUSES).first()


def first_seq_of(runs: Iterable[Run]) -> int | None:
    """Return the lowest journal seq recorded by any of `runs` (None: they have no records)."""
    return SessionMessage.objects.filter(run__in=list(runs)).aggregate(first=Min("seq"))["first"]


def run_get(*, user, run_id: int) -> Run:
    """Return the run if `user` may read its session, else raise NotFound."""
    run = (
        Run.objects.filter(
            pk=run_id,
            session__created_by=user,
            session__space__memberships__user=user,
            session__deleted_at__isnull=True,
        )
        .select_related("session__agent_version")
        .first()
    )
    if run is None:
        raise NotFound("Not found.")
    return run


def run_counters(run: Run) -> dict[str, int]:
    """Return the run's turn and step counters as of its last save (zeros before the first)."""
    counters = run.counters or {}
    return {name: int(counters.get(name) or 0) for name in COUNTER_NAMES}


def model_calls_of(run: Run) -> QuerySet[ModelCall]:
    """Return the run's model calls in order, without their (encrypted) responses."""
    return ModelCall.objects.filter(run=run).defer("response").order_by("id")


ALTERED_ANSWER = "(the journal record this call's answer refers to was altered)"


def _digest(message: Any) -> str:
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def answer_reference(response: dict[str, Any], journaled: Any) -> dict[str, Any] | None:
    """Return what a call's row keeps of `response` when its message is the `journaled` record,
    or None when the record is another message (the row keeps the whole response then).

    The journal holds the answer as the run used it: its tool calls renamed with the run's own
    ids. The row keeps everything but the message, and the provider's ids (`tool_call_ids`), so
    `answer_of` rebuilds the response exactly.
    """
    message = response.get("message")
    if not isinstance(message, dict) or not isinstance(journaled, dict):
        return None
    rest = {name: value for name, value in response.items() if name != "message"}
    # The journaled message's digest: a record altered since no longer passes for the answer.
    rest["message_sha256"] = _digest(journaled)
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            return None
        rest["tool_call_ids"] = [call.get("id") for call in calls]
    if answer_of(rest, journaled) != response:
        return None
    return rest


def answer_of(rest: dict[str, Any], journaled: Any) -> dict[str, Any]:
    """Return the response a call's row refers to: `rest` with the `journaled` message, its tool
    calls given back the provider's ids (see `answer_reference`)."""
    rest = dict(rest)
    ids = rest.pop("tool_call_ids", None)
    digest = rest.pop("message_sha256", None)
    if digest is not None and digest != _digest(journaled):
        # Not the record the call answered with: replay reports the difference.
        return {**rest, "message": {"role": "assistant", "content": ALTERED_ANSWER}}
    message = journaled
    if ids is not None and isinstance(journaled, dict):
        calls = journaled.get("tool_calls") or []
        if len(calls) != len(ids):
            return {**rest, "message": None}
        message = {
            **journaled,
            "tool_calls": [{**call, "id": id_} for call, id_ in zip(calls, ids, strict=True)],
        }
    return {**rest, "message": message}


def call_responses(calls: list[ModelCall]) -> list[dict[str, Any] | None]:
    """Return each call's response as the gateway gave it (`{message, usage, ...}`).

    A call whose message the journal holds names its record (`response_seq`): the message is
    read from there, one query for all of them. Rows recorded before that kept a copy.
    """
    wanted = {(call.run_id, call.response_seq) for call in calls if call.response_seq is not None}
    messages: dict[tuple[int, int], Any] = {}
    if wanted:
        rows = SessionMessage.objects.filter(
            run_id__in={run_id for run_id, _ in wanted},
            seq__in={seq for _, seq in wanted},
        ).values_list("run_id", "seq", "message")
        messages = {(run_id, seq): message for run_id, seq, message in rows}
    responses: list[dict[str, Any] | None] = []
    for call in calls:
        if call.response_seq is None:
            responses.append(call.response)
            continue
        message = messages.get((call.run_id, call.response_seq))
        responses.append(answer_of(call.response or {}, message))
    return responses


def model_call_in_flight(run: Run) -> bool:
    """True while the run is running and waits on a model: its latest main-instance record is
    not an answer of the model (a question, tool result, supplement, feedback or a resumed run's
    status), so the model is being asked for the next one. After an answer with tool calls the
    run is running tools, not waiting on the model.
    """
    if run.status != Run.Status.RUNNING:
        return False
    last = (
        SessionMessage.objects.filter(run=run, instance=MAIN_INSTANCE)
        .order_by("-seq")
        .values_list("kind", flat=True)
        .first()
    )
    return last != SessionMessage.Kind.ASSISTANT
