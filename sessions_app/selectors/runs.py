"""Reads of runs: a run its reader may see, its counters, its model calls, what it waits on.

A run is readable by whoever may read its session (`selectors.sessions`).
"""

from __future__ import annotations

from collections.abc import Iterable

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
