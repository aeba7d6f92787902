"""Deleting sessions: a soft delete anyone in charge of the session may do, and the purge.

`session_delete` hides a session: every selector stops returning it (lists, pages and the API
answer 404), and the run services refuse to start, resume or feed a run of it. Nothing under it
is removed but its runs' live deltas (on their way to the journal, never kept), so the journal
stays append-only; who hid it and when is kept in a
`SessionDeletion` row that outlives the session. `session_purge` is the one path that removes a
session's rows (runs, journal, views, supplements, model calls) — a superuser's, through
`manage.py purge_deleted_sessions --by`, never from a web request; a session the space's retention
rule hid is purged by the beat `RETENTION_PURGE_DAYS` later (`session_purge_retained`), unless a
legal hold was placed on it meanwhile. Both are durable actions: one
outermost transaction, never nested in another atomic block. `session_delete_nested` is the same
write as part of the caller's transaction (a savepoint there), for the admin's delete page, which
Django runs in one transaction.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentloom.errors import Conflict, NotFound, PermissionDenied
from sessions_app.models import Run, Session, SessionDeletion
from sessions_app.selectors.sessions import may_delete
from sessions_app.services.live import forget_session
from sessions_app.services.runs import sweep_expired_leases


@transaction.atomic(durable=True)
def session_delete(*, user, session: Session, by_retention: bool = False) -> SessionDeletion:
    """Hide `session` and record who did it; 409 while one of its runs is active.

    404 when the session is already hidden or outside the caller's spaces, 403 for a member who
    neither created it nor administers its space. `by_retention`: hidden by the space's
    retention rule in the name of the admin who set it (the beat purges it later).
    """
    return session_delete_nested(user=user, session=session, by_retention=by_retention)


@transaction.atomic
def session_delete_nested(*, user, session: Session, by_retention: bool = False) -> SessionDeletion:
    """`session_delete` as part of the caller's transaction."""
    if not may_delete(user, session):
        raise PermissionDenied("Only the session's creator or a space admin may delete it.")
    # A run whose worker died must not block the deletion forever.
    sweep_expired_leases(session=session)
    # The lock orders this against run_ask, run_resume and supplement_add, which lock the
    # session row too and check it is still live.
    locked = (
        Session.objects.select_for_update().filter(pk=session.pk, deleted_at__isnull=True).first()
    )
    if locked is None:
        raise NotFound("Not found.")
    if Run.objects.filter(session=locked, status__in=Run.ACTIVE_STATUSES).exists():
        raise Conflict("A run of this session is still active; cancel it or wait for it.")
    now = timezone.now()
    locked.deleted_at = now
    locked.save(update_fields=["deleted_at"])
    forget_session(locked.pk)
    return SessionDeletion.objects.create(
        session_number=locked.pk,
        session_title=locked.title,
        space_id=locked.space_id,
        deleted_by=user,
        deleted_by_username=user.get_username(),
        deleted_at=now,
        by_retention=by_retention,
    )


@transaction.atomic(durable=True)
def session_purge(*, user, session_id: int) -> dict[str, int]:
    """Remove a hidden session with its runs, journal, views, supplements and model calls.

    Only an active superuser may (PermissionDenied), and only a session hidden by
    `session_delete` (Conflict otherwise). The audit row stays and records when and by whom.
    Returns the number of rows removed per model.
    """
    if not (user.is_active and user.is_superuser):
        raise PermissionDenied("Only a superuser may purge deleted sessions.")
    session = Session.objects.select_for_update().filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    if session.deleted_at is None:
        raise Conflict("Only a deleted session can be purged.")
    return _purge(session, purged_by=user.get_username())


def _purge(session: Session, *, purged_by: str) -> dict[str, int]:
    """Remove the locked, hidden `session`; mark its audit row purged by `purged_by`."""
    # Journal references go with their run (rows written before references were written once,
    # with their view) in the same deletion, so the RESTRICT on the first and last record of
    # each range they hold lets the records go too.
    session_id = session.pk
    _, removed = session.delete()
    SessionDeletion.objects.filter(session_number=session_id).update(
        purged_at=timezone.now(), purged_by_username=purged_by
    )
    return {label.split(".", 1)[1]: count for label, count in removed.items()}


# What a purge by the retention rule records as its author.
RETENTION_PURGER = "retention rule"


@transaction.atomic(durable=True)
def session_purge_retained(*, session_id: int, before) -> bool:
    """Purge a session its space's retention rule hid before `before`; return whether it went.

    The beat's path (never a web request): only a session whose audit row says the rule hid it,
    still hidden, not purged yet and not put on legal hold since. The audit row records
    `RETENTION_PURGER` as the purger.
    """
    deletion = SessionDeletion.objects.filter(
        session_number=session_id, by_retention=True, purged_at__isnull=True, deleted_at__lt=before
    ).first()
    if deletion is None:
        return False
    session = (
        Session.objects.select_for_update()
        .filter(pk=session_id, deleted_at__isnull=False, legal_hold=False)
        .first()
    )
    if session is None:
        return False
    _purge(session, purged_by=RETENTION_PURGER)
    return True
