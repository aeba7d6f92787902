"""Purging deleted sessions: the one path that removes journal records, and only of hidden ones."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agentloom.errors import Conflict, PermissionDenied
from sessions_app.models import (
    JournalReference,
    JournalTerms,
    ModelCall,
    Run,
    RunSupplement,
    Session,
    SessionDeletion,
    SessionMessage,
    SessionView,
)
from sessions_app.services.deletion import session_delete, session_purge
from tests.factories import ask, make_user
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(db):
    return make_user("root", superuser=True)


def _rows(session) -> dict[str, int]:
    return {
        "runs": Run.objects.filter(session=session).count(),
        "messages": SessionMessage.objects.filter(session=session).count(),
        "views": SessionView.objects.filter(session=session).count(),
        "references": JournalReference.objects.filter(message__session=session).count(),
        "calls": ModelCall.objects.filter(run__session=session).count(),
        "supplements": RunSupplement.objects.filter(run__session=session).count(),
        "search index": JournalTerms.objects.filter(session=session).count(),
    }


def _compacted(alice, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(4):
        ask(session, alice, long_question(n))
    RunSupplement.objects.create(run=session.runs.first(), position=1, text="late")
    rows = _rows(session)
    assert all(rows.values()), rows
    return session


def test_purge_removes_a_deleted_session_with_everything_under_it(
    alice, root, gateway, make_demo_session
):
    doomed = _compacted(alice, make_demo_session)
    kept = make_demo_session()
    ask(kept, alice, "NONCE-kept")
    kept_rows = _rows(kept)
    session_delete(user=alice, session=doomed)

    call_command("purge_deleted_sessions", "--by", "root")

    assert not Session.objects.filter(pk=doomed.pk).exists()
    assert not any(_rows(doomed).values())
    assert _rows(kept) == kept_rows
    audit = SessionDeletion.objects.get(session_number=doomed.pk)
    assert audit.purged_at is not None and audit.deleted_by == alice
    assert audit.purged_by_username == "root"


def test_purge_leaves_live_sessions_and_respects_the_age_limit(
    alice, root, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, "NONCE-1")
    with pytest.raises(Conflict):
        session_purge(user=root, session_id=session.pk)
    session_delete(user=alice, session=session)
    call_command("purge_deleted_sessions", "--by", "root", "--older-than-days", "1")
    call_command("purge_deleted_sessions", "--by", "root", "--dry-run")
    assert Session.objects.filter(pk=session.pk).exists()
    call_command("purge_deleted_sessions", "--by", "root", "--session", str(session.pk))
    assert not Session.objects.filter(pk=session.pk).exists()


def test_a_referenced_journal_record_still_refuses_a_lone_delete(alice, gateway, make_demo_session):
    from django.db.models import RestrictedError

    session = _compacted(alice, make_demo_session)
    reference = JournalReference.objects.filter(message__session=session).first()
    with pytest.raises(RestrictedError):
        reference.message.delete()


def test_only_a_superuser_purges(alice, gateway, make_demo_session):
    from django.core.management import CommandError

    session = make_demo_session()
    session_delete(user=alice, session=session)
    # Alice administers the space, but purging is for the platform's operators.
    with pytest.raises(PermissionDenied):
        session_purge(user=alice, session_id=session.pk)
    for name in ("alice", "nobody"):
        with pytest.raises(CommandError, match="superuser"):
            call_command("purge_deleted_sessions", "--by", name)
    assert Session.objects.filter(pk=session.pk).exists()
