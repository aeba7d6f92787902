"""Spaces and memberships."""

from __future__ import annotations

import pytest

from agentloom.spaces.models import Membership
from tests.api.factories import client_for

pytestmark = pytest.mark.django_db


def test_list_shows_only_the_callers_spaces_with_their_role(space, other_space, carol):
    page = client_for(carol).get("/api/v1/spaces/").json()
    assert page["count"] == 1
    (item,) = page["results"]
    assert item["id"] == space.pk
    assert item["name"] == "Research"
    assert item["role"] == "member"
    assert set(item) == {"id", "name", "role", "created_at"}


def test_create_makes_the_caller_admin(api, alice):
    response = api.post("/api/v1/spaces/", {"name": "  Lab  "}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "Lab"
    assert body["role"] == "admin"
    membership = Membership.objects.get(space_id=body["id"])
    assert (membership.user, membership.role) == (alice, "admin")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": None}, "name"),
        ({"name": 12}, "name"),
        ({"name": ["a"]}, "name"),
        ({"name": "x" * 121}, "name"),
        ({"name": "ok", "owner": 1}, "owner"),
    ],
)
def test_create_refuses_bad_input(api, body, field, alice):
    response = api.post("/api/v1/spaces/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_anonymous_cannot_create(anon):
    assert anon.post("/api/v1/spaces/", {"name": "x"}, format="json").status_code == 401


def test_admin_adds_a_member(api, space, bob):
    response = api.post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "bob", "role": "member"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert body == {
        "id": body["id"],
        "space": space.pk,
        "user": bob.pk,
        "username": "bob",
        "role": "member",
        "created_at": body["created_at"],
    }
    # Bob now sees the space, as a member.
    roles = {s["id"]: s["role"] for s in client_for(bob).get("/api/v1/spaces/").json()["results"]}
    assert roles[space.pk] == "member"


def test_admin_may_add_another_admin(api, space, bob):
    response = api.post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "bob", "role": "admin"}, format="json"
    )
    assert response.status_code == 201
    assert Membership.objects.get(space=space, user=bob).role == "admin"


def test_a_member_may_not_add_members(space, carol, bob):
    response = client_for(carol).post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "bob", "role": "member"}, format="json"
    )
    assert response.status_code == 403
    assert not Membership.objects.filter(space=space, user=bob).exists()


def test_a_member_is_refused_before_the_body_is_read(space, carol):
    response = client_for(carol).post(f"/api/v1/spaces/{space.pk}/members", {}, format="json")
    assert response.status_code == 403


def test_outsiders_get_404(space, bob):
    response = client_for(bob).post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "bob", "role": "admin"}, format="json"
    )
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


def test_unknown_space_is_404(api, space):
    response = api.post(
        "/api/v1/spaces/999999/members", {"username": "bob", "role": "member"}, format="json"
    )
    assert response.status_code == 404


def test_adding_an_existing_member_is_409(api, space):
    response = api.post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "carol", "role": "admin"}, format="json"
    )
    assert response.status_code == 409
    assert "already a member" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "member"}, "username"),
        ({"username": "bob"}, "role"),
        ({"username": "nobody", "role": "member"}, "username"),
        ({"username": "bob", "role": "owner"}, "role"),
        ({"username": "bob", "role": 1}, "role"),
        ({"username": 5, "role": "member"}, "username"),
        ({"username": "bob", "role": "member", "note": "hi"}, "note"),
    ],
)
def test_member_add_refuses_bad_input(api, space, bob, body, field):
    response = api.post(f"/api/v1/spaces/{space.pk}/members", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_anonymous_cannot_add_members(anon, space):
    response = anon.post(
        f"/api/v1/spaces/{space.pk}/members", {"username": "bob", "role": "member"}, format="json"
    )
    assert response.status_code == 401
