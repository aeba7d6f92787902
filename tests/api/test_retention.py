"""A space's retention rule and a session's legal hold over the API."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.utils import timezone

from agentloom.spaces import admin as spaces_admin
from agentloom.spaces.services import retention as rule_service
from sessions_app import api_retention
from sessions_app.console import spaces as console_spaces
from sessions_app.management.commands import apply_retention
from sessions_app.models import Session
from sessions_app.services.retention import retention_apply
from tests.api.factories import client_for, open_session

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(days=40)


def _rule_url(space) -> str:
    return f"/api/v1/spaces/{space.pk}/retention"


def _hold_url(session) -> str:
    return f"/api/v1/sessions/{session.pk}/hold"


def _aged(session) -> Session:
    Session.objects.filter(pk=session.pk).update(created_at=timezone.now() - LONG_AGO)
    return session


@pytest.fixture
def carols(version, carol):
    """A session of carol's (a plain member), untouched for 40 days."""
    return _aged(open_session(version, carol))


def test_a_space_admin_sets_the_rule_and_who_and_when_are_recorded(api, space, carol):
    before = timezone.now()
    response = api.post(_rule_url(space), {"retention_days": 30}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["retention_days"] == 30 and body["set_by"] == "alice"
    assert body["dry_run"] is False and body["would_remove"] == 0
    space.refresh_from_db()
    assert (space.retention_days, space.retention_set_by.username) == (30, "alice")
    assert space.retention_set_at >= before
    # A member reads the rule in force, not what it would remove.
    read = client_for(carol).get(_rule_url(space)).json()
    assert (read["retention_days"], read["set_by"], read["would_remove"]) == (30, "alice", None)
    assert read["set_at"] == body["set_at"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retention_days": -1}, "retention_days"),
        ({"retention_days": 1.5}, "retention_days"),
        ({"retention_days": "30"}, "retention_days"),
        ({"retention_days": True}, "retention_days"),
        ({"retention_days": None}, "retention_days"),
        ({"retention_days": 36_501}, "retention_days"),
        ({}, "retention_days"),
        ({"retention_days": 30, "dry_run": "yes"}, "dry_run"),
        ({"retention_days": 30, "set_by": 1}, "set_by"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_changes_nothing(api, space, body, field):
    response = api.post(_rule_url(space), body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    space.refresh_from_db()
    assert (space.retention_days, space.retention_set_by) == (0, None)


def test_a_member_is_refused_and_an_outsider_finds_nothing(space, carol, bob, anon):
    member, outsider = client_for(carol), client_for(bob)
    assert member.post(_rule_url(space), {"retention_days": 1}, format="json").status_code == 403
    assert outsider.post(_rule_url(space), {"retention_days": 1}, format="json").status_code == 404
    assert outsider.get(_rule_url(space)).status_code == 404
    assert anon.get(_rule_url(space)).status_code == 401
    space.refresh_from_db()
    assert space.retention_days == 0


def test_a_dry_run_counts_what_the_rule_would_remove_and_saves_nothing(api, space, carols):
    response = api.post(_rule_url(space), {"retention_days": 30, "dry_run": True}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["retention_days"], body["would_remove"], body["dry_run"]) == (30, 1, True)
    assert body["set_by"] is None
    space.refresh_from_db()
    assert space.retention_days == 0
    assert (
        api.post(_rule_url(space), {"retention_days": 60, "dry_run": True}, format="json").json()[
            "would_remove"
        ]
        == 0
    )


def test_the_command_and_the_api_preview_with_one_service_and_set_with_another(
    api, space, carols, version, alice
):
    # One home per rule: what a rule removes, and setting it, are each one function.
    assert apply_retention.retention_due is api_retention.retention_due
    assert console_spaces.retention_due is api_retention.retention_due
    assert api_retention.retention_set is rule_service.retention_set
    assert console_spaces.retention_set is rule_service.retention_set
    assert spaces_admin.retention_set_nested is rule_service.retention_set_nested
    _aged(open_session(version, alice))
    out = io.StringIO()
    call_command("apply_retention", space=space.pk, days=30, stdout=out)
    preview = api.post(_rule_url(space), {"retention_days": 30, "dry_run": True}, format="json")
    assert f"would delete {preview.json()['would_remove']} session(s)" in out.getvalue()
    assert preview.json()["would_remove"] == 2


def test_a_space_admin_holds_a_session_retention_spares_it_and_each_change_is_audited(
    api, space, carols, carol, alice
):
    response = api.post(_hold_url(carols), {"hold": True}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["session"], body["legal_hold"], body["set_by"]) == (carols.pk, True, "alice")
    held = Session.objects.get(pk=carols.pk)
    assert held.legal_hold and held.legal_hold_set_by == alice and held.legal_hold_set_at
    # The rule spares it: in the preview and in the real pass.
    api.post(_rule_url(space), {"retention_days": 30}, format="json")
    assert api.get(_rule_url(space)).json()["would_remove"] == 0
    assert retention_apply() == {space.pk: []}
    assert Session.objects.get(pk=carols.pk).deleted_at is None
    # Its creator sees the hold but cannot release it.
    mine = client_for(carol)
    assert mine.get(_hold_url(carols)).json()["legal_hold"] is True
    assert mine.post(_hold_url(carols), {"hold": False}, format="json").status_code == 403
    released = api.post(_hold_url(carols), {"hold": False}, format="json").json()
    assert released["legal_hold"] is False
    history = LogEntry.objects.filter(object_id=str(carols.pk), object_repr=f"Session {carols.pk}")
    assert [entry.change_message for entry in history.order_by("pk")] == [
        "Placed on legal hold.",
        "Legal hold released.",
    ]
    assert {entry.user for entry in history} == {alice}
    assert retention_apply() == {space.pk: [carols.pk]}


def test_a_hold_outside_the_callers_reach_is_404_and_bad_input_400(api, space, session, carol, bob):
    # alice's own session, seen by a member who did not create it and by an outsider.
    for client in (client_for(carol), client_for(bob)):
        assert client.get(_hold_url(session)).status_code == 404
        assert client.post(_hold_url(session), {"hold": True}, format="json").status_code == 404
    for body, field in (({"hold": "yes"}, "hold"), ({}, "hold"), ({"hold": 1}, "hold")):
        response = api.post(_hold_url(session), body, format="json")
        assert (response.status_code, list(response.json())) == (400, [field])
    assert (
        api.post("/api/v1/sessions/99999999/hold", {"hold": True}, format="json").status_code == 404
    )
    assert not Session.objects.get(pk=session.pk).legal_hold
