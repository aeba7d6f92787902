"""A space's retention rule applied: sessions are deleted N days after their last run (0: kept).

A space admin sets the rule (`agentloom.spaces.services.retention.retention_set`), recorded with
who set it and when. The beat applies every rule (`retention_apply`) through the existing soft
delete (`session_delete`, with its `SessionDeletion` audit row, in the name of the admin who set
the rule, marked `by_retention`), and purges what it hid `RETENTION_PURGE_DAYS` before
(`retention_purge`, 30 by default: the grace in which an admin may still put a session on legal
hold, which the purge then skips); the operator's `purge_deleted_sessions` removes any deleted
session sooner. What a rule removes now, applied or only previewed (`apply_retention --dry-run`, the
API's and the console's previews), is `retention_due`. A session with an active or waiting run is
skipped, as is one under a legal hold (`session_legal_hold`, placed and released by a space
admin, who and when kept on the session and each change in its history); a session's last run
is its newest run's end (its creation when it never ran).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Max, Q
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from agentloom.errors import ApplicationError, NotFound, PermissionDenied
from agentloom.spaces.models import Membership, Space
from agentloom.spaces.selectors import require_member
from sessions_app.models import Run, Session, SessionDeletion
from sessions_app.selectors.sessions import live_sessions
from sessions_app.services.deletion import session_delete, session_purge_retained


@transaction.atomic(durable=True)
def session_legal_hold(*, user, session: Session, hold: bool) -> Session:
    """Put `session` on legal hold (retention skips it) or release it: a space admin only.

    Who placed or released it and when are kept on the session, and each change is written
    into its history (the admin's history page of the session shows it).
    """
    if require_member(user, session.space_id) != Membership.Role.ADMIN:
        raise PermissionDenied("Only a space admin puts a session on legal hold or releases it.")
    locked = Session.objects.select_for_update().filter(pk=session.pk).first()
    if locked is None:
        raise NotFound("Not found.")
    if locked.legal_hold != hold:
        now = timezone.now()
        Session.objects.filter(pk=session.pk).update(
            legal_hold=hold, legal_hold_set_by=user, legal_hold_set_at=now
        )
        # Named by number: the title is content, and the history is stored in clear.
        LogEntry.objects.create(
            user_id=user.pk,
            content_type=ContentType.objects.get_for_model(Session),
            object_id=str(session.pk),
            object_repr=f"Session {session.pk}",
            action_flag=CHANGE,
            change_message="Placed on legal hold." if hold else "Legal hold released.",
        )
        locked.legal_hold, locked.legal_hold_set_by, locked.legal_hold_set_at = hold, user, now
    session.legal_hold = locked.legal_hold
    session.legal_hold_set_by_id = locked.legal_hold_set_by_id
    session.legal_hold_set_at = locked.legal_hold_set_at
    return session


def retention_due(space: Space, *, days: int | None = None, now=None):
    """Return the space's sessions the rule (or `days`) removes now, oldest first."""
    days = space.retention_days if days is None else days
    if not days:
        return Session.objects.none()
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return (
        live_sessions()
        .filter(space=space, legal_hold=False)
        .exclude(runs__status__in=Run.ACTIVE_STATUSES)
        .annotate(
            last=Greatest(
                Coalesce(Max("runs__finished_at"), "created_at"),
                Coalesce(Max("runs__created_at"), "created_at"),
            )
        )
        .filter(Q(last__lt=cutoff))
        .order_by("last", "pk")
    )


def retention_apply(*, dry_run: bool = False, now=None) -> dict[int, list[int]]:
    """Delete what every space's rule removes; return `{space: [session, …]}` (none written
    with `dry_run`)."""
    done: dict[int, list[int]] = {}
    for space in Space.objects.filter(retention_days__gt=0).select_related("retention_set_by"):
        ids = list(retention_due(space, now=now).values_list("pk", flat=True))
        if dry_run or not ids or space.retention_set_by is None:
            done[space.pk] = ids if dry_run else []
            continue
        done[space.pk] = []
        for session in Session.objects.filter(pk__in=ids):
            try:
                session_delete(user=space.retention_set_by, session=session, by_retention=True)
            except ApplicationError:
                continue  # a run started meanwhile, or the admin left the space
            done[space.pk].append(session.pk)
    return done


def retention_purge(*, now=None) -> list[int]:
    """Purge the sessions retention rules hid `RETENTION_PURGE_DAYS` ago or more; return them.

    Each in its own transaction; a session put on legal hold since it was hidden stays.
    """
    before = (now or timezone.now()) - timedelta(days=settings.RETENTION_PURGE_DAYS)
    due = SessionDeletion.objects.filter(
        by_retention=True, purged_at__isnull=True, deleted_at__lt=before
    ).values_list("session_number", flat=True)
    return [
        number for number in list(due) if session_purge_retained(session_id=number, before=before)
    ]
