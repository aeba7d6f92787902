"""A space's retention rule: dry run, real run, skips and legal holds (both databases)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from agentloom.errors import PermissionDenied
from agentloom.spaces.services.retention import retention_set
from sessions_app.models import Run, Session, SessionDeletion
from sessions_app.services.deletion import RETENTION_PURGER, session_purge_retained
from sessions_app.services.retention import retention_apply, retention_purge
from sessions_app.tasks import apply_retention
from tests.factories import make_agent, make_connection, make_run, make_session, make_version

pytestmark = pytest.mark.django_db


def test_retention_dry_run_then_real_run(alice, carol, space):
    agent = make_agent(space, alice, connection=make_connection(space))
    version = make_version(agent)
    old, held, busy, fresh = (make_session(version, alice) for _ in range(4))
    long_ago = timezone.now() - timedelta(days=40)
    Session.objects.filter(pk__in=[old.pk, held.pk, busy.pk]).update(created_at=long_ago)
    Run.objects.filter(pk=make_run(old, status="succeeded").pk).update(
        created_at=long_ago, finished_at=long_ago
    )
    make_run(busy, status="waiting_approval")
    Run.objects.filter(session=busy).update(created_at=long_ago)
    Session.objects.filter(pk=held.pk).update(legal_hold=True)
    with pytest.raises(PermissionDenied):
        retention_set(user=carol, space=space, days=30)
    retention_set(user=alice, space=space, days=30)
    space.refresh_from_db()
    assert space.retention_set_by == alice and space.retention_set_at
    out = io.StringIO()
    call_command("apply_retention", dry_run=True, stdout=out)
    assert f"would delete 1 session(s): [{old.pk}]" in out.getvalue()
    assert not SessionDeletion.objects.exists()
    assert retention_apply() == {space.pk: [old.pk]}
    assert Session.objects.get(pk=old.pk).deleted_at is not None
    assert SessionDeletion.objects.get().deleted_by == alice
    assert all(Session.objects.get(pk=s.pk).deleted_at is None for s in (held, busy, fresh))


def test_the_beat_purges_what_the_rule_hid_after_the_grace_and_nothing_else(alice, space, settings):
    settings.RETENTION_PURGE_DAYS = 30
    agent = make_agent(space, alice, connection=make_connection(space))
    version = make_version(agent)
    ruled, later_held, by_hand = (make_session(version, alice) for _ in range(3))
    long_ago = timezone.now() - timedelta(days=40)
    Session.objects.filter(pk__in=[ruled.pk, later_held.pk, by_hand.pk]).update(created_at=long_ago)
    run = make_run(ruled, status="succeeded")
    Run.objects.filter(pk=run.pk).update(created_at=long_ago, finished_at=long_ago)
    retention_set(user=alice, space=space, days=30)
    assert sorted(retention_apply()[space.pk]) == sorted([ruled.pk, later_held.pk, by_hand.pk])
    # One of them a person had hidden by hand before (not the rule's to purge).
    SessionDeletion.objects.filter(session_number=by_hand.pk).update(by_retention=False)
    # Within the grace nothing goes.
    assert retention_purge() == []
    # An admin puts one on legal hold during the grace: the purge skips it.
    Session.objects.filter(pk=later_held.pk).update(legal_hold=True)
    after_grace = timezone.now() + timedelta(days=31)
    assert retention_purge(now=after_grace) == [ruled.pk]
    assert not Session.objects.filter(pk=ruled.pk).exists()
    assert not Run.objects.filter(pk=run.pk).exists()
    audit = SessionDeletion.objects.get(session_number=ruled.pk)
    assert audit.purged_at and audit.purged_by_username == RETENTION_PURGER
    assert Session.objects.filter(pk__in=[later_held.pk, by_hand.pk]).count() == 2
    # Asked by number, the purge still refuses a session a person hid.
    assert not session_purge_retained(session_id=by_hand.pk, before=after_grace)
    assert Session.objects.filter(pk=by_hand.pk).exists()
    # The hourly task does both: nothing left to delete, nothing more to purge.
    assert apply_retention() == {"deleted": {space.pk: []}, "purged": []}
