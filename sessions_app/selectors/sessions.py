"""Reads of sessions: who may read, manage or delete one, and the instances it holds.

A session and everything under it is readable only by its creator, and only while they are a
member of the session's space; to anyone else it does not exist (NotFound). A deleted session
(`deleted_at` set) does not exist for anyone.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from agentloom.errors import NotFound
from agentloom.spaces.models import Membership
from agentloom.spaces.selectors import require_member
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage


def live_sessions() -> QuerySet[Session]:
    """Return the sessions nobody has deleted (an import still being written is not one yet)."""
    return Session.objects.filter(deleted_at__isnull=True, staged=False)


def sessions_for_user(user) -> QuerySet[Session]:
    """Return the sessions `user` created in spaces they are still a member of, newest first."""
    return live_sessions().filter(created_by=user, space__memberships__user=user).order_by("-id")


def session_list(user) -> QuerySet[Session]:
    """Return `sessions_for_user` with agents, run counts and the latest run's number and status."""
    latest_run = Run.objects.filter(session=OuterRef("pk")).order_by("-number")
    return (
        sessions_for_user(user)
        .select_related("agent", "agent_version")
        .annotate(
            latest_status=Subquery(latest_run.values("status")[:1]),
            latest_number=Subquery(latest_run.values("number")[:1]),
            run_count=Count("runs", distinct=True),
        )
    )


def sessions_in_reach(user) -> QuerySet[Session]:
    """Return the live sessions `user` may manage: their own and those of spaces they admin."""
    if not user.is_authenticated:
        return Session.objects.none()
    return (
        live_sessions()
        .filter(
            Q(created_by=user, space__memberships__user=user)
            | Q(space__memberships__user=user, space__memberships__role="admin")
        )
        .distinct()
    )


def session_get(*, user, session_id: int) -> Session:
    """Return the session if `user` may read it, else raise NotFound."""
    session = sessions_for_user(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def session_for_revocation(*, user, session_id: int) -> Session:
    """Return a session whose views `user` may revoke: their own, or one in a space they admin."""
    session = sessions_in_reach(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def session_in_reach(*, user, session_id: int) -> Session:
    """Return a live session `user` may manage (their own, or one in a space they admin), else
    raise NotFound; what they may do with it is each service's to say."""
    session = sessions_in_reach(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def session_for_deletion(*, user, session_id: int) -> Session:
    """Return a live session in one of `user`'s spaces; the deletion service checks the role."""
    session = live_sessions().filter(pk=session_id, space__memberships__user=user).first()
    if session is None:
        raise NotFound("Not found.")
    return session


def instances_of(session: Session) -> list[str]:
    """Return the instances that have records in the session: main, then children in order.

    One query that skips through the (session, instance, seq) index from each instance to the
    next, so its cost follows the instances, not the records (a DISTINCT reads every record's
    entry: thousands for each journal page).
    """
    table = SessionMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH RECURSIVE found(instance) AS (
                    SELECT MIN(instance) FROM {table} WHERE session_id = %s
                    UNION ALL
                    SELECT (SELECT MIN(instance) FROM {table}
                            WHERE session_id = %s AND instance > found.instance)
                    FROM found WHERE found.instance IS NOT NULL
                )
                SELECT instance FROM found WHERE instance IS NOT NULL""",  # noqa: S608 - our table
            [session.pk, session.pk],
        )
        found = {instance for (instance,) in cursor.fetchall()}
    children = sorted(
        (name for name in found if name != MAIN_INSTANCE),
        key=lambda name: tuple(int(part) for part in name.split(".") if part.isdigit()),
    )
    return [MAIN_INSTANCE, *children] if MAIN_INSTANCE in found else children


def may_delete(user, session: Session) -> bool:
    """True when `user` created the session or administers its space (and is still a member)."""
    role = require_member(user, session.space_id)
    return session.created_by_id == user.pk or role == Membership.Role.ADMIN


def deleted_sessions(*, before: datetime | None = None):
    """Return the hidden sessions (deleted before `before`, when given), oldest deletion first."""
    sessions = Session.objects.filter(deleted_at__isnull=False)
    if before is not None:
        sessions = sessions.filter(deleted_at__lt=before)
    return sessions.order_by("deleted_at", "pk")
