"""A space's page states its retention rule and lets its admins preview and set it; a session's
chat page shows its legal hold and lets a space admin place or release it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agentloom.spaces.models import Membership, Space
from sessions_app.models import Session
from sessions_app.services.runs import session_create

pytestmark = pytest.mark.django_db


def _page(space) -> str:
    return reverse("console-space", args=[space.pk])


def _aged_session(version, user) -> Session:
    session = session_create(user=user, agent_version=version)
    Session.objects.filter(pk=session.pk).update(created_at=timezone.now() - timedelta(days=40))
    return session


def test_the_space_page_states_the_rule_in_force_to_every_member(
    client_for, space, alice, carol, bob
):
    member = client_for(carol)
    page = member.get(_page(space)).content.decode()
    assert "sessions are <strong>kept</strong>" in page and "Never set." in page
    # Only an admin is offered the form, and the home page links the space's page.
    assert "retention-preview-form" not in page
    assert _page(space) in member.get("/").content.decode()
    Space.objects.filter(pk=space.pk).update(
        retention_days=30, retention_set_by=alice, retention_set_at=timezone.now()
    )
    page = member.get(_page(space)).content.decode()
    assert "deleted <strong>30 days after their last run</strong>" in page
    assert "Set by <strong>alice</strong>" in page
    assert client_for(bob).get(_page(space)).status_code == 404


def test_an_admin_previews_a_rule_then_saves_it(client_for, space, version, alice, carol):
    _aged_session(version, carol)
    session_create(user=alice, agent_version=version)
    admin = client_for(alice)
    page = admin.get(_page(space), {"days": "30"}).content.decode()
    assert "A rule of 30 days would delete <strong>1</strong> session now." in page
    assert 'name="days" value="30"' in page
    space.refresh_from_db()
    assert space.retention_days == 0
    response = admin.post(reverse("console-space-retention", args=[space.pk]), {"days": "30"})
    assert response.status_code == 302
    space.refresh_from_db()
    assert (space.retention_days, space.retention_set_by) == (30, alice)
    assert space.retention_set_at is not None
    page = admin.get(response.url).content.decode()
    assert "Rule saved: sessions are deleted 30 days after their last run." in page
    assert "The rule in force removes <strong>1</strong> session now" in page


@pytest.mark.parametrize("days", ["-1", "1.5", "abc", "36501"])
def test_a_rule_that_is_not_one_is_refused_with_a_message(client_for, space, alice, days):
    admin = client_for(alice)
    page = admin.get(_page(space), {"days": days}).content.decode()
    assert 'id="retention-invalid"' in page and "retention-form" not in page
    response = admin.post(
        reverse("console-space-retention", args=[space.pk]), {"days": days}, follow=True
    )
    assert "Rule not saved:" in response.content.decode()
    space.refresh_from_db()
    assert (space.retention_days, space.retention_set_by) == (0, None)


def test_a_member_cannot_set_the_rule_nor_preview_it(client_for, space, version, carol, bob):
    _aged_session(version, carol)
    member = client_for(carol)
    page = member.get(_page(space), {"days": "30"}).content.decode()
    assert "would delete" not in page
    url = reverse("console-space-retention", args=[space.pk])
    assert member.post(url, {"days": "30"}).status_code == 403
    assert client_for(bob).post(url, {"days": "30"}).status_code == 404
    space.refresh_from_db()
    assert space.retention_days == 0


def test_the_chat_page_shows_a_hold_and_a_space_admin_places_and_releases_it(
    client_for, space, version, session, alice, carol
):
    admin = client_for(alice)
    chat = reverse("console-chat", args=[session.pk])
    hold = reverse("console-session-hold", args=[session.pk])
    assert "Place on legal hold" in admin.get(chat).content.decode()
    page = admin.post(hold, {"hold": "1"}, follow=True).content.decode()
    assert 'id="legal-hold-note"' in page and "Placed by alice" in page
    assert "Release the legal hold" in page
    assert Session.objects.get(pk=session.pk).legal_hold
    admin.post(hold, {"hold": "0"})
    assert not Session.objects.get(pk=session.pk).legal_hold
    # A plain member's own session: the hold is shown, never offered, and a post is refused.
    mine = session_create(user=carol, agent_version=version)
    Session.objects.filter(pk=mine.pk).update(legal_hold=True)
    member = client_for(carol)
    page = member.get(reverse("console-chat", args=[mine.pk])).content.decode()
    assert 'id="legal-hold-note"' in page and "hold-form" not in page
    response = member.post(reverse("console-session-hold", args=[mine.pk]), {"hold": "0"})
    assert response.status_code == 403
    assert Session.objects.get(pk=mine.pk).legal_hold
    # Someone else's session does not exist for her.
    assert member.post(hold, {"hold": "1"}).status_code == 404
    Membership.objects.filter(space=space, user=alice).update(role="member")
    assert admin.post(hold, {"hold": "1"}).status_code == 403
