"""The admin is scoped like the API: staff see and change their own spaces only.

Mallory is staff with every model permission, an admin of "Mine" and nothing else; "Theirs" is
bob's space with an agent, a session and its journal.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from agentloom.spaces.models import Membership, Space
from sessions_app.models import (
    ModelCall,
    Run,
    RunSupplement,
    Session,
    SessionDeletion,
    SessionMessage,
    SessionView,
)
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_user,
    make_version,
)

pytestmark = pytest.mark.django_db

PROMPT = "NONCE-prompt-of-theirs"
APPS = ("spaces", "context_app", "sessions_app", "models_app")


def _world(owner, name: str) -> dict:
    """A space of `owner` with one of everything."""
    space = make_space(name=name, admin=owner)
    connection = make_connection(space, name=f"conn-{name}")
    agent = make_agent(space, owner, connection=connection, name=f"agent-{name}")
    agent.system_prompt = f"{PROMPT}-{name}"
    agent.save()
    version = make_version(agent)
    session = make_session(version, owner)
    run = make_run(session, status="succeeded")
    message = SessionMessage.objects.create(
        session=session,
        seq=1,
        run=run,
        kind="user_input",
        entry_key="user_input",
        message={"role": "user", "content": "hi"},
        created_at=timezone.now(),
    )
    view = SessionView.objects.create(
        session=session, revision=1, watermark=1, messages=[], run=run
    )
    call = ModelCall.objects.create(run=run, purpose="action")
    supplement = RunSupplement.objects.create(run=run, position=1, text="more")
    return {
        "space": space,
        "membership": space.memberships.get(),
        "modelconnection": connection,
        "agent": agent,
        "agentversion": version,
        "session": session,
        "run": run,
        "sessionmessage": message,
        "sessionview": view,
        "modelcall": call,
        "runsupplement": supplement,
    }


LABELS = {
    "space": "spaces",
    "membership": "spaces",
    "modelconnection": "models_app",
    "agent": "context_app",
    "agentversion": "context_app",
    "session": "sessions_app",
    "run": "sessions_app",
    "sessionmessage": "sessions_app",
    "sessionview": "sessions_app",
    "modelcall": "sessions_app",
    "runsupplement": "sessions_app",
}


def url(obj, action="change") -> str:
    model = type(obj).__name__.lower()
    return f"/admin/{LABELS[model]}/{model}/{obj.pk}/{action}/"


@pytest.fixture
def mallory(db):
    user = make_user("mallory", staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS))
    return user


@pytest.fixture
def mine(mallory):
    return _world(mallory, "Mine")


@pytest.fixture
def theirs(bob):
    return _world(bob, "Theirs")


@pytest.fixture
def browser(mallory):
    client = Client()
    client.force_login(mallory)
    return client


@pytest.mark.parametrize("model", list(LABELS))
def test_lists_show_only_the_staff_users_spaces(browser, mine, theirs, model):
    response = browser.get(f"/admin/{LABELS[model]}/{model}/")
    assert response.status_code == 200
    shown = set(response.context["cl"].queryset)
    assert mine[model] in shown
    assert theirs[model] not in shown
    # Not even in a filter's choices.
    assert b"Theirs" not in response.content and PROMPT.encode() not in response.content


@pytest.mark.parametrize("model", list(LABELS))
def test_another_spaces_rows_do_not_exist(browser, mine, theirs, model):
    obj = theirs[model]
    response = browser.get(url(obj))
    assert response.status_code == 302  # "does not exist", back to the admin index
    assert PROMPT.encode() not in browser.get(response.url, follow=True).content
    assert browser.post(url(obj), {"name": "taken"}).status_code in (302, 403)
    assert browser.post(url(obj, "delete"), {"post": "yes"}).status_code in (302, 403)
    assert type(obj).objects.filter(pk=obj.pk).exists()
    if model == "agent":
        obj.refresh_from_db()
        assert obj.name == "agent-Theirs"


def test_she_cannot_make_herself_admin_of_another_space(browser, mallory, mine, theirs):
    add = "/admin/spaces/membership/add/"
    page = browser.get(add)
    assert page.status_code == 200
    assert list(page.context["adminform"].form.fields["space"].queryset) == [mine["space"]]
    response = browser.post(add, {"space": theirs["space"].pk, "user": "mallory", "role": "admin"})
    assert response.status_code == 200  # the form again, with the error
    assert "space" in response.context["adminform"].form.errors
    assert not Membership.objects.filter(space=theirs["space"], user=mallory).exists()
    # Nor through the space page's member list.
    space_page = url(theirs["space"])
    assert browser.get(space_page).status_code == 302
    # In her own space she may add people.
    carol = make_user("carol")
    ok = browser.post(add, {"space": mine["space"].pk, "user": "carol", "role": "member"})
    assert ok.status_code == 302
    assert Membership.objects.filter(space=mine["space"], user=carol, role="member").exists()


def test_a_plain_member_sees_but_does_not_edit_memberships(client, mallory, theirs, bob):
    Membership.objects.create(space=theirs["space"], user=mallory, role="member")
    client.force_login(mallory)
    membership = theirs["membership"]
    assert client.get(url(membership)).status_code == 200
    response = client.post(url(membership), {"space": membership.space_id, "role": "member"})
    assert response.status_code == 403
    membership.refresh_from_db()
    assert membership.role == "admin"
    assert client.get("/admin/spaces/membership/add/").status_code == 403
    assert client.post(url(membership, "delete"), {"post": "yes"}).status_code == 403
    # Agents of a space she does not administer: read-only too.
    assert client.post(url(theirs["agent"]), {"name": "x"}).status_code == 403


def test_foreign_key_choices_stay_in_her_spaces(browser, mallory, mine, theirs):
    form = browser.get("/admin/context_app/agent/add/").context["adminform"].form
    assert list(form.fields["space"].queryset) == [mine["space"]]
    assert list(form.fields["model_connection"].queryset) == [mine["modelconnection"]]
    assert list(form.fields["owner"].queryset) == [mallory]
    form = browser.get(url(mine["agent"])).context["adminform"].form
    assert theirs["modelconnection"] not in form.fields["model_connection"].queryset
    response = browser.post(
        url(mine["agent"]),
        {
            "space": mine["space"].pk,
            "owner": mallory.pk,
            "name": "hijack",
            "model_connection": theirs["modelconnection"].pk,
            "tools": "[]",
            "sub_agents": "[]",
            "context_policy": "null",
        },
    )
    assert response.status_code == 200
    assert "model_connection" in response.context["adminform"].form.errors


def test_a_staff_space_creator_becomes_its_admin(browser, mallory):
    # The fields as the page sends them, defaults included.
    form = {"name": "Fresh", "time_zone": "UTC", "retention_days": "0"}
    response = browser.post("/admin/spaces/space/add/", form)
    assert response.status_code == 302
    space = Space.objects.get(name="Fresh")
    assert Membership.objects.get(space=space).user == mallory
    assert space.retention_set_by is None


def test_the_retention_rule_set_in_the_admin_records_who_set_it(browser, mallory):
    browser.post("/admin/spaces/space/add/", {"name": "Fresh", "retention_days": "0"})
    space = Space.objects.get(name="Fresh")
    form = {"name": "Fresh", "time_zone": "UTC", "retention_days": "30"}
    form.update({"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    response = browser.post(f"/admin/spaces/space/{space.pk}/change/", form)
    assert response.status_code == 302
    space.refresh_from_db()
    assert (space.retention_days, space.retention_set_by) == (30, mallory)
    assert space.retention_set_at is not None
    forged = {**form, "retention_days": "30", "retention_set_by": "1"}
    browser.post(f"/admin/spaces/space/{space.pk}/change/", forged)
    space.refresh_from_db()
    assert space.retention_set_by == mallory


def test_a_rule_set_as_a_space_is_added_is_its_creators_and_a_non_admin_cannot_set_one(
    browser, mallory, theirs
):
    form = {"name": "Fresh", "time_zone": "UTC", "retention_days": "30"}
    assert browser.post("/admin/spaces/space/add/", form).status_code == 302
    space = Space.objects.get(name="Fresh")
    assert (space.retention_days, space.retention_set_by) == (30, mallory)
    # A superuser who is not an admin of the space sees the rule but does not set it: the
    # beat deletes in the name of whoever set it, as a space admin.
    root = Client()
    root.force_login(make_user("root", superuser=True))
    other = theirs["space"]
    page = root.get(f"/admin/spaces/space/{other.pk}/change/")
    assert "retention_days" not in page.context["adminform"].form.fields
    form = {"name": "Theirs", "time_zone": "UTC", "retention_days": "5"}
    form.update({"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    root.post(f"/admin/spaces/space/{other.pk}/change/", form)
    other.refresh_from_db()
    assert other.retention_days == 0


def test_superusers_see_every_space(mine, theirs):
    client = Client()
    client.force_login(make_user("root", superuser=True))
    for model in LABELS:
        shown = set(client.get(f"/admin/{LABELS[model]}/{model}/").context["cl"].queryset)
        assert {mine[model], theirs[model]} <= shown, model


@pytest.mark.parametrize("model", ["run", "sessionmessage", "sessionview", "modelcall"])
def test_the_journal_is_never_changed_or_deleted_even_by_a_superuser(mine, model):
    client = Client()
    client.force_login(make_user("root", superuser=True))
    obj = mine[model]
    assert client.get(url(obj)).status_code == 200
    assert client.post(url(obj), {}).status_code == 403
    assert client.get(url(obj, "delete")).status_code == 403
    assert client.post(url(obj, "delete"), {"post": "yes"}).status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).exists()
    changelist = client.get(f"/admin/sessions_app/{model}/")
    assert "delete_selected" not in changelist.context["cl"].model_admin.get_actions(
        changelist.wsgi_request
    )


def test_deleting_a_session_in_the_admin_is_the_soft_delete(browser, mallory, mine, theirs):
    session = mine["session"]
    page = browser.get(url(session, "delete"))
    assert page.status_code == 200
    assert browser.post(url(session, "delete"), {"post": "yes"}).status_code == 302
    session.refresh_from_db()
    assert session.deleted_at is not None
    assert SessionMessage.objects.filter(session=session).count() == 1
    assert SessionDeletion.objects.get(session_number=session.pk).deleted_by == mallory
    # Hidden from her lists from now on.
    shown = browser.get("/admin/sessions_app/session/").context["cl"].queryset
    assert session not in shown
    # The bulk action does the same, and refuses a session with an active run.
    other = make_session(mine["agentversion"], mallory)
    make_run(other, status="running")
    response = browser.post(
        "/admin/sessions_app/session/",
        {"action": "soft_delete", "_selected_action": [other.pk]},
        follow=True,
    )
    assert b"still active" in response.content
    assert Session.objects.get(pk=other.pk).deleted_at is None
    assert Run.objects.filter(session=other).exists()


def test_tokens_in_the_admin_are_their_owners_and_can_be_revoked(browser, mallory, bob):
    from agentloom.spaces.models import ApiToken
    from agentloom.spaces.services.tokens import token_create

    own, _ = token_create(user=mallory)
    other, _ = token_create(user=bob)
    response = browser.get("/admin/spaces/apitoken/")
    assert set(response.context["cl"].queryset) == {own}
    assert (
        own.digest.encode() not in browser.get(f"/admin/spaces/apitoken/{own.pk}/change/").content
    )
    browser.post(
        "/admin/spaces/apitoken/",
        {"action": "revoke", "_selected_action": [own.pk, other.pk]},
    )
    assert ApiToken.objects.get(pk=own.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=other.pk).revoked_at is None


def test_a_token_made_in_the_admin_shows_its_key_once(browser, mallory, bob):
    from agentloom.spaces.models import ApiToken
    from agentloom.spaces.services.tokens import key_digest

    # Staff make their own tokens only, whoever the form names.
    page = browser.post(
        "/admin/spaces/apitoken/add/", {"name": "ci", "expires_days": "7", "user": bob.pk}
    )
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]
    key = page.context["key"]
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.digest) == (mallory, "ci", key_digest(key))
    assert token.expires_at is not None
    assert key.encode() in page.content
    change = browser.get(f"/admin/spaces/apitoken/{token.pk}/change/")
    assert key.encode() not in change.content and token.digest.encode() not in change.content
    refused = browser.post("/admin/spaces/apitoken/add/", {"name": "x", "expires_days": "0"})
    assert "expires_days" in refused.context["adminform"].form.errors
    root = Client()
    root.force_login(make_user("root", superuser=True))
    made = root.post(
        "/admin/spaces/apitoken/add/", {"user": bob.pk, "name": "", "expires_days": ""}
    )
    assert made.status_code == 200
    assert ApiToken.objects.get(user=bob).expires_at is None


# --- users, groups and permissions: superusers only ----------------------------------------


@pytest.fixture
def eve(db):
    """Staff with every auth permission and no membership at all."""
    user = make_user("eve", staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="auth"))
    return user


def test_staff_with_auth_permissions_cannot_make_themselves_superuser(client, eve, bob):
    client.force_login(eve)
    assert client.get("/admin/auth/user/").status_code == 403
    assert client.get(f"/admin/auth/user/{bob.pk}/change/").status_code == 403
    assert client.get(f"/admin/auth/user/{bob.pk}/password/").status_code == 403
    response = client.post(
        f"/admin/auth/user/{eve.pk}/change/",
        {
            "username": "eve",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert response.status_code == 403
    eve.refresh_from_db()
    assert not eve.is_superuser
    assert client.post("/admin/auth/user/add/", {"username": "x"}).status_code == 403
    assert client.get("/admin/auth/group/").status_code == 403
    assert client.post("/admin/auth/group/add/", {"name": "root"}).status_code == 403
    # Nor do users or groups appear in her admin index, nor can she search users.
    index = client.get("/admin/")
    assert b"/admin/auth/" not in index.content
    search = client.get(
        "/admin/autocomplete/",
        {"app_label": "spaces", "model_name": "membership", "field_name": "user", "term": "b"},
    )
    assert search.status_code in (403, 404)
    assert b"bob" not in search.content


def test_a_space_admin_adds_members_by_username_without_a_list_of_users(browser, mine, bob):
    add = "/admin/spaces/membership/add/"
    page = browser.get(add)
    assert b"bob" not in page.content
    refused = browser.post(add, {"space": mine["space"].pk, "user": "nobody", "role": "member"})
    assert "user" in refused.context["adminform"].form.errors
    ok = browser.post(add, {"space": mine["space"].pk, "user": "bob", "role": "member"})
    assert ok.status_code == 302
    membership = Membership.objects.get(space=mine["space"], user=bob)
    # The change page names the member by username; the member stays who he is.
    change = browser.get(url(membership))
    assert b"bob" in change.content


def test_superusers_manage_users(bob):
    client = Client()
    client.force_login(make_user("root", superuser=True))
    assert client.get("/admin/auth/user/").status_code == 200
    assert client.get(f"/admin/auth/user/{bob.pk}/change/").status_code == 200
    assert client.get("/admin/auth/group/").status_code == 200


def test_a_space_admin_holds_and_releases_sessions_in_the_admin(browser, mallory, mine, bob):
    from agentloom.spaces.models import Membership

    session = mine["session"]
    changelist = "/admin/sessions_app/session/"
    browser.post(changelist, {"action": "hold", "_selected_action": [session.pk]})
    assert Session.objects.get(pk=session.pk).legal_hold
    browser.post(changelist, {"action": "release", "_selected_action": [session.pk]})
    assert not Session.objects.get(pk=session.pk).legal_hold
    # A plain member of the space may see the session but not hold it.
    Membership.objects.filter(space=session.space, user=mallory).update(role="member")
    response = browser.post(
        changelist, {"action": "hold", "_selected_action": [session.pk]}, follow=True
    )
    assert b"Only a space admin" in response.content
    assert not Session.objects.get(pk=session.pk).legal_hold
