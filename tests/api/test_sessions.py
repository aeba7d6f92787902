"""Sessions: opened on a published version, readable by their creator only."""

from __future__ import annotations

import pytest

from agentloom.spaces.models import Membership
from sessions_app.models import Session
from tests.api.factories import client_for, make_agent, open_session, publish

pytestmark = pytest.mark.django_db


def test_open_a_session_of_a_version(api, version, alice):
    response = api.post("/api/v1/sessions/", {"agent_version": version.pk, "title": "T"}, "json")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {
        "id",
        "space",
        "agent",
        "agent_version",
        "title",
        "pinned",
        "created_at",
        "cost",
    }
    assert (body["agent_version"], body["agent"], body["title"]) == (
        version.pk,
        version.agent_id,
        "T",
    )
    assert Session.objects.get(pk=body["id"]).created_by == alice


def test_open_a_session_of_an_agents_latest_version(api, agent, alice):
    publish(agent, alice)
    latest = publish(agent, alice)
    response = api.post("/api/v1/sessions/", {"agent": agent.pk}, "json")
    assert response.status_code == 201
    assert response.json()["agent_version"] == latest.pk


def test_an_agent_with_no_published_version_is_409(api, agent):
    response = api.post("/api/v1/sessions/", {"agent": agent.pk}, "json")
    assert response.status_code == 409
    assert "no published version" in response.json()["detail"]


def test_agent_and_version_together_must_agree(api, version, space, alice):
    other = make_agent(space, alice, name="other")
    ok = api.post(
        "/api/v1/sessions/", {"agent": version.agent_id, "agent_version": version.pk}, "json"
    )
    assert ok.status_code == 201
    response = api.post(
        "/api/v1/sessions/", {"agent": other.pk, "agent_version": version.pk}, "json"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["agent"]


def test_a_member_may_open_sessions(version, carol):
    response = client_for(carol).post("/api/v1/sessions/", {"agent_version": version.pk}, "json")
    assert response.status_code == 201


@pytest.mark.parametrize("field", ["agent", "agent_version"])
def test_outsiders_cannot_open_sessions(version, bob, field):
    target = version.agent_id if field == "agent" else version.pk
    response = client_for(bob).post("/api/v1/sessions/", {field: target}, "json")
    assert response.status_code == 404
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "agent_version"),
        ({"title": "only a title"}, "agent_version"),
        ({"agent_version": "1"}, "agent_version"),
        ({"agent_version": 0}, "agent_version"),
        ({"agent_version": None}, "agent_version"),
        ({"agent": True}, "agent"),
        ({"agent": 1.5}, "agent"),
        ({"agent": 2**63}, "agent"),
        ({"agent_version": 1, "title": 7}, "title"),
        ({"agent_version": 1, "title": "x" * 201}, "title"),
        ({"agent_version": 1, "created_by": 2}, "created_by"),
    ],
)
def test_open_refuses_bad_input(api, version, body, field):
    response = api.post("/api/v1/sessions/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_unknown_version_is_404(api, version):
    assert api.post("/api/v1/sessions/", {"agent_version": 999}, "json").status_code == 404


def test_sessions_are_listed_to_their_creator_only(api, version, alice, erin):
    mine = open_session(version, alice)
    open_session(version, erin)  # same agent, same space: still not shared
    page = api.get("/api/v1/sessions/").json()
    assert [s["id"] for s in page["results"]] == [mine.pk]
    assert api.get(f"/api/v1/sessions/{mine.pk}/").json()["id"] == mine.pk


def test_sessions_are_listed_newest_first(api, version, alice):
    first, second = open_session(version, alice), open_session(version, alice)
    page = api.get("/api/v1/sessions/").json()
    assert [s["id"] for s in page["results"]] == [second.pk, first.pk]


def test_a_creator_who_left_the_space_loses_their_sessions(version, carol):
    session = open_session(version, carol)
    Membership.objects.filter(user=carol).delete()
    client = client_for(carol)
    assert client.get("/api/v1/sessions/").json()["count"] == 0
    assert client.get(f"/api/v1/sessions/{session.pk}/").status_code == 404
