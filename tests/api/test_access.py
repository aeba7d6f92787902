"""Who may reach what: sessions belong to their creator; admin actions belong to space admins."""

from __future__ import annotations

import pytest

from agentloom.spaces.models import Membership
from sessions_app.models import Run, RunSupplement
from tests.api.factories import client_for, finish

pytestmark = pytest.mark.django_db

# (method, path, body, run status before the call, the creator's answer)
SESSION_ENDPOINTS = [
    ("get", "/api/v1/sessions/{session}/", None, "failed", 200),
    ("get", "/api/v1/sessions/{session}/runs", None, "failed", 200),
    ("post", "/api/v1/sessions/{session}/runs", {"question": "Next?"}, "failed", 202),
    ("get", "/api/v1/sessions/{session}/messages", None, "failed", 200),
    ("get", "/api/v1/sessions/{session}/views/", None, "failed", 200),
    ("get", "/api/v1/runs/{run}/", None, "failed", 200),
    ("post", "/api/v1/runs/{run}/supplements", {"text": "Also."}, "failed", 202),
    ("post", "/api/v1/runs/{run}/resume", None, "failed", 202),
    ("post", "/api/v1/runs/{run}/cancel", None, "queued", 202),
    ("get", "/api/v1/runs/{run}/context", None, "failed", 200),
    ("get", "/api/v1/runs/{run}/model-calls", None, "failed", 200),
]
CALLERS = ["creator", "same_space_member", "same_space_admin", "other_space_user", "anonymous"]


@pytest.fixture
def callers(alice, carol, erin, bob, other_space):
    return {
        "creator": client_for(alice),
        "same_space_member": client_for(carol),
        "same_space_admin": client_for(erin),
        "other_space_user": client_for(bob),
        "anonymous": client_for(None),
    }


def _call(client, method, template, body, run):
    url = template.format(session=run.session_id, run=run.pk)
    return getattr(client, method)(url, body or {}, format="json")


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("method", "template", "body", "status", "allowed"), SESSION_ENDPOINTS)
def test_sessions_and_runs_belong_to_their_creator(
    callers, run, caller, method, template, body, status, allowed
):
    if status != "queued":
        finish(run, status)
    before = (Run.objects.count(), RunSupplement.objects.count())
    response = _call(callers[caller], method, template, body, run)
    expected = {"creator": allowed, "anonymous": 401}.get(caller, 404)
    assert response.status_code == expected, response.content
    if caller != "creator":
        # Nothing happened and nothing was told: the same answer as for a missing object.
        assert (Run.objects.count(), RunSupplement.objects.count()) == before
        run.refresh_from_db()
        assert run.status == status
        if caller != "anonymous":
            assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize(("method", "template", "body", "status", "allowed"), SESSION_ENDPOINTS)
def test_a_creator_who_left_the_space_is_locked_out(
    run, alice, method, template, body, status, allowed
):
    if status != "queued":
        finish(run, status)
    Membership.objects.filter(user=alice, space=run.session.space).delete()
    assert _call(client_for(alice), method, template, body, run).status_code == 404


def test_sessions_are_not_listed_to_others(callers, run):
    for caller in ("same_space_member", "same_space_admin", "other_space_user"):
        assert callers[caller].get("/api/v1/sessions/").json()["count"] == 0
    assert callers["creator"].get("/api/v1/sessions/").json()["count"] == 1


# (method, path, body) of what only a space admin may do, with the answer for a member.
ADMIN_ACTIONS = [
    ("post", "/api/v1/agents/", {"space": "{space}", "name": "Theirs"}),
    ("patch", "/api/v1/agents/{agent}/", {"name": "Theirs"}),
    ("post", "/api/v1/agents/{agent}/publish", None),
    ("post", "/api/v1/spaces/{space}/members", {"username": "bob", "role": "member"}),
]


def _admin_call(client, method, template, body, agent):
    fill = {"space": agent.space_id, "agent": agent.pk}
    if body is not None:
        body = {k: fill[v[1:-1]] if v in ("{space}", "{agent}") else v for k, v in body.items()}
    return getattr(client, method)(template.format(**fill), body or {}, format="json")


@pytest.mark.parametrize(("method", "template", "body"), ADMIN_ACTIONS)
@pytest.mark.parametrize(
    ("caller", "expected"),
    [("same_space_member", 403), ("other_space_user", 404), ("anonymous", 401)],
)
def test_admin_actions_are_refused_to_others(
    callers, agent, caller, expected, method, template, body
):
    response = _admin_call(callers[caller], method, template, body, agent)
    assert response.status_code == expected


@pytest.mark.parametrize(("method", "template", "body"), ADMIN_ACTIONS)
def test_admin_actions_are_open_to_any_admin_of_the_space(erin, agent, bob, method, template, body):
    response = _admin_call(client_for(erin), method, template, body, agent)
    assert response.status_code in (200, 201)


@pytest.mark.parametrize(
    "template", ["/api/v1/agents/{agent}/", "/api/v1/agents/{agent}/versions/"]
)
@pytest.mark.parametrize(
    ("caller", "expected"),
    [
        ("creator", 200),
        ("same_space_member", 200),
        ("same_space_admin", 200),
        ("other_space_user", 404),
        ("anonymous", 401),
    ],
)
def test_agents_are_readable_by_every_member_of_their_space(
    callers, version, template, caller, expected
):
    response = callers[caller].get(template.format(agent=version.agent_id))
    assert response.status_code == expected
