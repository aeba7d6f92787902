"""Run lifecycle: sessions, asking, resuming, cancelling, supplements, leases.

Every state change is one function with keyword-only arguments, run in a transaction; the
Celery task that executes a run is queued with `transaction.on_commit` so a worker never sees a
run that is not committed yet. The actions a user takes (`session_create`, `session_rename`,
`run_ask`, `run_resume`, `run_cancel`, `supplement_add`) are durable: each is one outermost
transaction, committed when it returns, and calling one inside another atomic block is an error,
never a silent savepoint. Each that touches a run locks the session's row before the run's (the
lock order of `services.journal`).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from agentloom.errors import Conflict, InvalidInput, NotFound
from agentloom.ratelimit import limit
from agentloom.spaces.selectors import require_member
from agentloom.validation import clean_text
from context_app.engine_adapter import (
    PINNED_MAX_CHARS,
    connection_now,
    input_check,
    pinned_room,
    redactor_for,
)
from context_app.models import AgentVersion
from sessions_app.models import Run, RunSupplement, Session
from sessions_app.selectors.journal import journaled_terminal
from sessions_app.services.journal import (
    ended_run_fields,
    lock_run,
    status_journal,
    supplements_journal,
)
from sessions_app.services.legacy import adopt_legacy_run, adopt_unjournaled_runs
from sessions_app.services.usage import spend_check

MAX_QUESTION_CHARS = 100_000
MAX_SUPPLEMENT_CHARS = 20_000
WORKER_LOST = "worker_lost"


def _enqueue(run: Run) -> None:
    from sessions_app.tasks import execute_run

    run_id, deployment = run.pk, settings.DEPLOYMENT_ID
    transaction.on_commit(lambda: execute_run.delay(run_id, deployment=deployment))


# --- sessions ------------------------------------------------------------------------------


@transaction.atomic(durable=True)
def session_create(*, user, agent_version: AgentVersion, title: str = "") -> Session:
    """Open a session of a published version; any member of its space may."""
    require_member(user, agent_version.agent.space_id)
    title = (title or "").strip()[:200]
    return Session.objects.create(
        space_id=agent_version.agent.space_id,
        agent_id=agent_version.agent_id,
        agent_version=agent_version,
        created_by=user,
        title=title,
    )


TITLE_CHARS = 80


def title_from_question(question: str) -> str:
    """Return a session title made of the question's first line, cut at a word near 80 chars."""
    line = next((part.strip() for part in question.splitlines() if part.strip()), "")
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[: TITLE_CHARS - 1]
    if " " in cut[TITLE_CHARS // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip() + "…"


def _title_if_untitled(session: Session, question: str, title: str) -> None:
    """Name an untitled session after its first question (as redacted).

    The title is encrypted, so it cannot be compared in SQL: `title` is the one the caller read
    with the session row's lock (`lock_live_session`), which it holds, so a rename that came
    first is kept.
    """
    if title:
        return
    session.title = title_from_question(question)
    Session.objects.filter(pk=session.pk).update(title=session.title)


@transaction.atomic(durable=True)
def session_rename(*, user, session: Session, title) -> Session:
    """Give the caller's own session a new title (blank: the default "Session N")."""
    title = clean_text(title, field="title", max_chars=200, required=False, single_line=True)
    title = title.strip()
    if session.created_by_id != user.pk:
        raise NotFound("Not found.")
    updated = Session.objects.filter(pk=session.pk, deleted_at__isnull=True).update(title=title)
    if not updated:
        raise NotFound("Not found.")
    session.title = title
    return session


@transaction.atomic(durable=True)
def session_pin(*, user, session: Session, text) -> Session:
    """Pin instructions to the caller's own session (blank: unpin); runs asked from now on
    carry them word for word. 400 naming `text` when they would leave less room for a question
    than the floor a version is published with."""
    text = clean_text(text, field="text", max_chars=PINNED_MAX_CHARS, required=False).strip()
    if session.created_by_id != user.pk:
        raise NotFound("Not found.")
    text = redactor_for(session.agent_version).text(text)
    room = pinned_room(session.agent_version, text)
    if text and not room.fits:
        raise InvalidInput(
            f"These instructions would leave room for a question of {room.room:,}, below the "
            f"floor of {room.to_dict()['floor']:,}; shorten them.",
            field="text",
        )
    lock_live_session(session.pk)
    Session.objects.filter(pk=session.pk).update(pinned=text)
    session.pinned = text
    return session


def lock_live_session(session_id: int, *fields: str) -> tuple:
    """Lock the session row for this transaction and return its `fields` as they are under the
    lock (one statement); NotFound once it has been deleted.

    Every write that starts or feeds a run calls this BEFORE it locks any run of the session
    (the journal writers' order: session, then run), so it cannot interleave with
    `session_delete`, which takes this lock, nor deadlock with a worker's save.
    """
    live = Session.objects.select_for_update().filter(pk=session_id, deleted_at__isnull=True)
    row = live.values_list("pk", *fields).first()
    if row is None:
        raise NotFound("Not found.")
    return row[1:]


# --- leases --------------------------------------------------------------------------------


def sweep_expired_leases(*, session: Session | None = None, now=None) -> list[int]:
    """End queued or running runs whose lease expired; return their ids.

    A run whose journal already holds its terminal status (a worker of an older release died
    between journaling it and ending the row) ends as the journal says; any other ends
    `failed` (worker_lost). A sweep never contradicts the journal.
    """
    now = now or timezone.now()
    # Unordered: ordered by number, SQLite would read every run of the session (see the index).
    stale = Run.objects.filter(status__in=Run.ACTIVE_STATUSES, lease_expires_at__lt=now).order_by()
    if session is not None:
        stale = stale.filter(session=session)
    swept = []
    for run_id, session_id in stale.values_list("pk", "session_id"):
        with transaction.atomic():
            run = lock_run(run_id, session_id=session_id)
            if run.status not in Run.ACTIVE_STATUSES or not run.lease_expires_at:
                continue
            if run.lease_expires_at >= now:
                continue
            _end_lost_run(run, now)
            swept.append(run.pk)
    return swept


def _end_lost_run(run: Run, now) -> None:
    """End a run whose lease expired: as its journal says, or else `failed` (worker_lost)."""
    terminal = journaled_terminal(run)
    lost = terminal is None
    if lost:
        terminal = {"status": Run.Status.FAILED, "error": WORKER_LOST}
    fields = ended_run_fields(terminal, (run.checkpoint or {}).get("state") or {})
    fields["finished_at"] = now
    for name, value in fields.items():
        setattr(run, name, value)
    run.save(update_fields=[*fields, "updated_at"])
    if lost:
        status_journal(run, status=Run.Status.FAILED, error=WORKER_LOST)


def _queue_deadline():
    # A queued run that no worker picks up in time is treated like a lost worker.
    return timezone.now() + timedelta(seconds=settings.RUN_QUEUE_SECONDS)


def queue_waiting(run: Run) -> list[str]:
    """Queue a run that waited on a person (approvals, a server's questions) to continue: set
    its fields, enqueue it on commit, and return the fields the caller saves."""
    run.status = Run.Status.QUEUED
    run.waiting_since = None
    run.lease_expires_at = _queue_deadline()
    _enqueue(run)
    return ["status", "waiting_since", "lease_expires_at"]


# --- asking, resuming, cancelling ------------------------------------------------------------


def _refuse_oversized(
    version, text: str, *, field: str, what: str, pinned: str = "", connection=False
) -> None:
    """Refuse an input too large for the run to ever compact below its target (before any write).
    `connection`: the version's connection row as the caller read it (else read here)."""
    check = input_check(version, text, pinned, connection=connection)
    if not check.fits:
        raise InvalidInput(
            f"This {what} is estimated at {check.described()} that this agent's context "
            "budget leaves for one message (its compaction target, less "
            "the system prompt, tool schemas and the plan). Shorten it, or split it."
            + check.fallback_note(),
            field=field,
        )


def run_ask(*, user, session: Session, question) -> Run:
    """Start a new run of `session` with `question`; 409 while another run is active.

    The question is checked before the transaction starts (measuring it takes a moment); the
    sweep, the adoption of older runs and the new run then commit together.
    """
    question = clean_text(question, field="question", max_chars=MAX_QUESTION_CHARS)
    if session.created_by_id != user.pk:
        raise NotFound("Not found.")
    limit("runs_per_session", session.pk, what="questions in this session")
    limit("runs_per_user", user.pk, what="questions")
    # Past a spend limit the question is refused; near one it is taken with a warning.
    warnings = spend_check(session=session)
    # Read once, as it is now, for the redaction and the door (its keys, its learned window).
    connection = connection_now(session.agent_version)
    question = redactor_for(session.agent_version, connection=connection).text(question)
    _refuse_oversized(
        session.agent_version,
        question,
        field="question",
        what="question",
        pinned=session.pinned,
        connection=connection,
    )
    with transaction.atomic(durable=True):
        run = _run_create(session, question)
    run.spend_warnings = warnings
    return run


def _run_create(session: Session, question: str) -> Run:
    sweep_expired_leases(session=session)
    # Runs recorded before the journal existed join it first, after what it already holds.
    adopt_unjournaled_runs(session=session)
    try:
        with transaction.atomic():
            # The instructions pinned now and the journal as it stands (no run is active) go
            # with the question, whatever changes while it waits in the queue.
            next_seq, pinned, title = lock_live_session(session.pk, "next_seq", "pinned", "title")
            if Run.objects.filter(session=session, status__in=Run.ACTIVE_STATUSES).exists():
                raise Conflict("A run of this session is still active; wait for it or cancel it.")
            if session.read_only:
                raise Conflict("This imported session is bound to no agent version: read only.")
            number = (session.runs.aggregate(top=Max("number"))["top"] or 0) + 1
            run = Run.objects.create(
                session=session,
                number=number,
                status=Run.Status.QUEUED,
                question=question,
                pinned=pinned,
                inherited_watermark=next_seq - 1,
                lease_expires_at=_queue_deadline(),
            )
            _title_if_untitled(session, question, title)
            _enqueue(run)
    except IntegrityError:
        # The one-active-run constraint (or the run-number one) lost a race: the database
        # is the final word, and the loser gets the same clean conflict.
        raise Conflict("A run of this session is still active; wait for it or cancel it.") from None
    return run


@transaction.atomic(durable=True)
def run_resume(*, user, run: Run) -> Run:
    """Queue a failed or cancelled run again, continuing its own checkpoint."""
    if run.session.created_by_id != user.pk:
        raise NotFound("Not found.")
    sweep_expired_leases(session=run.session)
    # Runs recorded before the journal existed join it first, in run order, exactly as for a
    # new question; a legacy run being resumed is adopted with the status of its failed
    # attempt, before the claim makes it active.
    adopt_unjournaled_runs(session=run.session)
    adopt_legacy_run(run)
    lock_live_session(run.session_id)
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.origin_number is not None:
        raise Conflict("This run was copied from another session: it is history, not resumed.")
    if run.status not in (Run.Status.FAILED, Run.Status.CANCELLED):
        raise Conflict(f"Only a failed or cancelled run can be resumed; this one is {run.status}.")
    if (
        Run.objects.filter(session_id=run.session_id, status__in=Run.ACTIVE_STATUSES)
        .exclude(pk=run.pk)
        .exists()
    ):
        raise Conflict("Another run of this session is active; resume when it has finished.")
    run.status = Run.Status.QUEUED
    run.attempt += 1
    run.error = ""
    run.cancel_requested = False
    run.supplements_closed = False
    # A resume answers an open tool group `unknown`: the calls of a wait no longer wait.
    run.pending_approvals, run.waiting_since = [], None
    run.pending_questions = []
    run.finished_at = None
    run.lease_owner = ""
    run.lease_expires_at = _queue_deadline()
    try:
        with transaction.atomic():
            run.save()
    except IntegrityError:
        raise Conflict("Another run of this session is active.") from None
    _enqueue(run)
    return run


@transaction.atomic(durable=True)
def run_cancel(*, user, run: Run) -> Run:
    """Cancel a queued run at once, or ask a running one to stop at its next safe point."""
    if run.session.created_by_id != user.pk:
        raise NotFound("Not found.")
    run = lock_run(run.pk, session_id=run.session_id)
    if run.status == Run.Status.QUEUED and run.pending_questions:
        # Queued by the answers to a tool server's questions: the same rule as decisions.
        raise Conflict(
            "The questions this run waited on were answered before this cancel: the answers "
            "won, and the run is queued to go on with them. Cancel it again once it has "
            "started; it then stops at its next safe point."
        )
    if run.status == Run.Status.QUEUED and run.pending_approvals:
        # Queued by the decisions on the calls it waited on, not yet taken by a worker: those
        # decisions came first and win, rather than being dropped by a cancel sent with them.
        raise Conflict(
            "The tool calls this run waited on were decided before this cancel: the decisions "
            "won, and the run is queued to go on with them. Cancel it again once it has "
            "started; it then stops at its next safe point."
        )
    # A run waiting for approval or answers holds no worker: like a queued one, it ends at once.
    if run.status in (Run.Status.QUEUED, *Run.WAITING_STATUSES):
        run.status = Run.Status.CANCELLED
        run.cancel_requested = True
        run.finished_at = timezone.now()
        run.lease_expires_at = None
        run.save()
        status_journal(run, status=Run.Status.CANCELLED, error="")
    elif run.status == Run.Status.RUNNING:
        run.cancel_requested = True
        run.save(update_fields=["cancel_requested", "updated_at"])
    else:
        raise Conflict(f"This run has already finished ({run.status}).")
    return run


@transaction.atomic(durable=True)
def supplement_add(*, user, run: Run, text) -> RunSupplement:
    """Queue a supplement; it enters the run's view at its next safe point (or on resume).

    Sent to a failed or cancelled run, it is journaled at once, after the run's status, so a
    later question sees it even if the run is never resumed.
    """
    text = clean_text(text, field="text", max_chars=MAX_SUPPLEMENT_CHARS)
    if run.session.created_by_id != user.pk:
        raise NotFound("Not found.")
    limit("supplements_per_session", run.session_id, what="supplements in this session")
    limit("supplements_per_user", user.pk, what="supplements")
    text = redactor_for(run.session.agent_version).text(text)
    _refuse_oversized(
        run.session.agent_version, text, field="text", what="supplement", pinned=run.pinned
    )
    lock_live_session(run.session_id)
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status == Run.Status.SUCCEEDED or (
        run.status == Run.Status.RUNNING and run.supplements_closed
    ):
        raise Conflict("This run has finished; ask a new question instead.")
    position = (run.supplements.aggregate(top=Max("position"))["top"] or 0) + 1
    supplement = RunSupplement.objects.create(run=run, position=position, text=text)
    # What tells the run's worker, at its next save, that its queue grew.
    Run.objects.filter(pk=run.pk).update(supplements_added=position)
    if run.status in Run.FINISHED_STATUSES:
        # The run has ended (failed or cancelled): journaled now, shown if it is resumed.
        supplements_journal(run_id=run.pk, session_id=run.session_id)
    return supplement


def supplements_take(*, run_id: int, exclude: set[int], final: bool) -> list[RunSupplement]:
    """Return queued supplements not yet handed out; on an empty final call, close the queue.

    Only the final call locks the run (and only the run: it writes nothing of the session's):
    closing the queue must not race `supplement_add`. At any other safe point a supplement
    committed a moment too late is simply taken at the next one.
    """

    def pending() -> list[RunSupplement]:
        return list(
            RunSupplement.objects.filter(run_id=run_id, consumed_at__isnull=True)
            .exclude(pk__in=exclude)
            .order_by("position")
        )

    if not final:
        return pending()
    with transaction.atomic():
        # Only the flag is read: the checkpoint stays on disk, undecrypted.
        run = Run.objects.select_for_update().only("pk", "supplements_closed").get(pk=run_id)
        waiting = pending()
        if not waiting:
            run.supplements_closed = True
            run.save(update_fields=["supplements_closed", "updated_at"])
        return waiting


def supplements_close(*, run_id: int, added: int) -> bool:
    """Close the run's supplement queue if no supplement came after the `added`-th; return
    whether it closed.

    One UPDATE, fenced by the count `supplement_add` sets under the run's lock: a supplement
    accepted before it leaves the queue open (the caller reads the queue instead), and one sent
    after it finds the queue closed and is refused.
    """
    closed = Run.objects.filter(pk=run_id, supplements_added=added).update(
        supplements_closed=True, updated_at=timezone.now()
    )
    return closed == 1


def run_claim(*, run_id: int, owner: str) -> bool:
    """Take the lease on a queued run; False when another worker has it or it is not queued."""
    now = timezone.now()
    claimed = Run.objects.filter(
        Q(pk=run_id, status=Run.Status.QUEUED, cancel_requested=False)
    ).update(
        status=Run.Status.RUNNING,
        lease_owner=owner,
        lease_expires_at=now + timedelta(seconds=settings.RUN_LEASE_SECONDS),
        started_at=now,
        updated_at=now,
    )
    return claimed == 1
