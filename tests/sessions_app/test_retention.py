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
from sessions_app.services.retention import retention_apply
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
