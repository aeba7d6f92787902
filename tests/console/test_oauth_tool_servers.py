"""OAuth tool servers end to end: connected in the console, used by runs, refreshed, revoked.

Both servers are real and on 127.0.0.1 (`tests.support.oauth_servers`): an authorization server
built from the SDK's `mcp.server.auth` routes, and the test tool server behind the SDK's bearer
middleware, which accepts only live tokens issued for its own URL. The flow is driven through
Django's test client: the console's "Connect" answers a redirect to the authorization server's
authorize endpoint, which the test follows (as a browser would) and whose redirect back to the
console's callback it follows in turn.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.db import connection as db_connection
from django.db import transaction
from django.test import Client
from django.urls import reverse

from agentloom.spaces.models import Membership
from agentloom.toolservers import ToolServerError
from context_app.services.agents import agent_create, agent_publish
from models_app.models import OAuthConnection, OAuthRegistration, ToolServer
from models_app.selectors import tool_server_secrets
from models_app.services import tool_server_oauth
from models_app.services.tool_server_oauth import oauth_token_renew, server_address_for_run
from models_app.services.tool_servers import (
    tool_server_create,
    tool_server_delete,
    tool_server_refresh,
)
from sessions_app.models import Run, SessionMessage
from sessions_app.services.runs import session_create
from tests.factories import ask, make_connection
from tests.support.oauth_servers import OAuthWorld, document_client, oauth_servers

GREET = '/tool demo__greet {"who": "Ada"}'


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 10
    settings.CONSOLE_ORIGIN = ""


@pytest.fixture
def file_database():
    """Skip a test whose threads use the database on an in-memory one (one shared connection)."""
    if db_connection.vendor == "sqlite" and db_connection.is_in_memory_db():
        pytest.skip("needs a file database (TEST_SQLITE_NAME) or PostgreSQL")


@pytest.fixture
def world():
    with oauth_servers() as found:
        yield found


def _server(alice, space, world: OAuthWorld, *, oauth="member", **fields) -> ToolServer:
    return tool_server_create(
        user=alice, space=space, name="demo", url=world.url, oauth=oauth, **fields
    )


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _start(browser: Client, server: ToolServer, *, shared: bool = False):
    url = reverse("console-oauth-connect", args=[server.space_id, server.pk])
    return browser.post(url, {"shared": "1"} if shared else {})


def _authorize(response) -> str:
    """Follow the console's redirect to the authorization server; return the callback path."""
    assert response.status_code == 302, response.content
    answer = httpx.get(response["Location"])
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["location"])
    return f"{back.path}?{back.query}"


def _connect(browser: Client, server: ToolServer, *, shared: bool = False):
    return browser.get(_authorize(_start(browser, server, shared=shared)))


def _session(user, space, alice, server):
    tool_server_refresh(user=alice, server=server)
    connection = make_connection(space, context_window=200_000)
    agent = agent_create(
        user=alice,
        space=space,
        name="Tools",
        system_prompt="You use tools.",
        model_connection=connection.pk,
        tools=["demo__greet"],
    )
    return session_create(user=user, agent_version=agent_publish(user=alice, agent=agent))


def _result(run: Run) -> dict:
    return SessionMessage.objects.get(run=run, kind="tool_result").message


@pytest.mark.django_db
def test_a_member_connects_by_pkce_with_the_resource_and_runs_act_as_them(
    alice, carol, space, world
):
    server = _server(alice, space, world)
    start = _start(_browser(alice), server)
    asked = parse_qs(urlsplit(start["Location"]).query)
    assert asked["code_challenge_method"] == ["S256"]
    assert asked["resource"] == [world.url]
    assert asked["redirect_uri"] == ["http://testserver/oauth/callback/"]
    assert len(asked["state"][0]) >= 43

    browser = _browser(alice)
    start = _start(browser, server)
    back = browser.get(_authorize(start))
    assert back.status_code == 302 and back["Location"].endswith("#tool-servers")
    (granted,) = world.state.authorize_params[-1:]
    assert granted.resource == world.url
    exchange = world.state.token_requests[-1]
    assert exchange["grant_type"] == "authorization_code" and exchange["resource"] == world.url
    assert len(exchange["code_verifier"]) >= 43
    assert OAuthRegistration.objects.get(server=server).kind == "dynamic"
    assert OAuthConnection.objects.filter(server=server, member=alice).count() == 1

    server = tool_server_refresh(user=alice, server=server)
    assert [tool["name"] for tool in server.tools][:1] == ["greet"]
    run = ask(_session(alice, space, alice, server), alice, GREET)
    assert run.status == Run.Status.SUCCEEDED, run.error
    result = _result(run)
    assert result["content"] == "hello Ada"
    assert result["detail"]["identity"] == {"kind": "member", "member": "alice"}
    assert world.calls.subjects[-1] == "alice@idp"

    # Carol has not connected: her runs' calls are tool errors that say what to connect.
    carols = _session(carol, space, alice, server)
    run = ask(carols, carol, GREET)
    assert "needs the account of the session's creator connected" in _result(run)["content"]
    # She connects her own account: her runs act as her, alice's as alice.
    world.state.subject = "carol@idp"
    _connect(_browser(carol), server)
    run = ask(carols, carol, GREET)
    assert _result(run)["detail"]["identity"] == {"kind": "member", "member": "carol"}
    assert world.calls.subjects[-1] == "carol@idp"
    page = _browser(carol).get(reverse("console-space", args=[space.pk])).content.decode()
    assert "each member's own account" in page and "Your account is connected" in page


@pytest.mark.django_db
def test_a_shared_connection_is_an_admins_and_every_run_says_it_used_it(alice, carol, space, world):
    server = _server(alice, space, world, oauth="space")
    assert _start(_browser(carol), server, shared=True).status_code == 403
    _connect(_browser(alice), server, shared=True)
    shared = OAuthConnection.objects.get(server=server)
    assert shared.member is None and shared.connected_by == alice

    run = ask(_session(carol, space, alice, server), carol, GREET)
    result = _result(run)
    assert result["content"] == "hello Ada"
    assert result["detail"]["identity"] == {"kind": "space", "connected_by": "alice"}
    journal = _browser(carol).get(reverse("console-journal", args=[run.session_id]))
    assert "as the space&#x27;s shared account (connected by alice)" in journal.content.decode()
    chat = _browser(carol).get(reverse("console-chat", args=[run.session_id]))
    assert "as the space&#x27;s shared account" in chat.content.decode()


@pytest.mark.django_db
def test_state_is_bound_to_the_browser_session_and_the_user_and_used_once(
    alice, carol, space, world
):
    server = _server(alice, space, world)
    browser = _browser(alice)
    callback = _authorize(_start(browser, server))

    other_session = _browser(alice).get(callback, follow=True)
    assert "started by another browser session" in other_session.content.decode()
    assert not OAuthConnection.objects.exists()
    # Refused once, the state is spent: the right session cannot use it after that either.
    assert browser.get(callback).status_code == 302
    assert not OAuthConnection.objects.exists()

    callback = _authorize(_start(browser, server))
    carols = _browser(carol).get(callback, follow=True)
    assert "started by another browser session" in carols.content.decode()
    callback = _authorize(_start(browser, server))
    browser.get(callback)
    assert OAuthConnection.objects.filter(member=alice).count() == 1
    again = browser.get(callback, follow=True)
    assert "unknown, already used or expired" in again.content.decode()


@pytest.mark.django_db
def test_an_expiring_token_is_refreshed_before_the_call(alice, space, world):
    world.state.tokens_live = 30  # within the refresh margin: each use refreshes first
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    first = OAuthConnection.objects.get(server=server)
    session = _session(alice, space, alice, server)
    assert world.state.refreshes == 1, "the listing refreshed"
    run = ask(session, alice, GREET)
    assert _result(run)["content"] == "hello Ada"
    assert world.state.refreshes == 2
    assert world.state.token_requests[-1]["grant_type"] == "refresh_token"
    assert world.state.token_requests[-1]["resource"] == world.url
    assert OAuthConnection.objects.get(pk=first.pk).access_token != first.access_token


@pytest.mark.django_db(transaction=True)
def test_a_token_the_server_refuses_is_renewed_once_and_the_call_sent_again(
    alice, space, world, file_database
):
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    row = OAuthConnection.objects.get(server=server)
    del world.state.access[row.access_token]  # the server no longer knows it: 401
    run = ask(_session(alice, space, alice, server), alice, GREET)
    assert _result(run)["content"] == "hello Ada"
    assert world.state.refreshes == 1


@pytest.mark.django_db(transaction=True)
def test_a_revoked_connection_is_a_tool_error_that_says_to_connect_again(
    alice, space, world, file_database
):
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    session = _session(alice, space, alice, server)
    world.state.revoked_families.update(issued.family for issued in world.state.access.values())
    run = ask(session, alice, GREET)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert "connect the account again" in _result(run)["content"]


@pytest.mark.django_db(transaction=True)
def test_a_refresh_race_spends_the_rotating_refresh_token_once(alice, space, world, file_database):
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    row = OAuthConnection.objects.get(server=server)
    got: list[str | None] = []
    start = threading.Barrier(2)

    def renew() -> None:
        start.wait()
        try:
            got.append(oauth_token_renew(connection_id=row.pk, stale=row.access_token))
        finally:
            db_connection.close()

    threads = [threading.Thread(target=renew) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert world.state.refreshes == 1, "a second refresh would spend the rotated token again"
    assert got[0] == got[1] == OAuthConnection.objects.get(pk=row.pk).access_token
    assert not world.state.revoked_families
    assert world.state.live_access("alice@idp") == [got[0]]


@pytest.mark.django_db(transaction=True)
def test_invalid_grant_reads_the_row_again_for_a_token_refreshed_meanwhile(
    alice, space, world, monkeypatch
):
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    row = OAuthConnection.objects.get(server=server)

    def spent_elsewhere(*args, **kwargs):
        # Another process's refresh commits while this one's request is refused.
        transaction.on_commit(
            lambda: OAuthConnection.objects.filter(pk=row.pk).update(access_token="newer-token")
        )
        raise ToolServerError("invalid_grant")

    monkeypatch.setattr(tool_server_oauth, "refresh", spent_elsewhere)
    assert oauth_token_renew(connection_id=row.pk, stale=row.access_token) == "newer-token"


@pytest.mark.django_db
def test_disconnecting_deleting_the_server_and_removing_the_member_revoke(
    alice, carol, space, world, django_capture_on_commit_callbacks
):
    server = _server(alice, space, world)
    _connect(_browser(alice), server)
    world.state.subject = "carol@idp"
    _connect(_browser(carol), server)
    with django_capture_on_commit_callbacks(execute=True):
        url = reverse("console-oauth-disconnect", args=[space.pk, server.pk])
        _browser(alice).post(url)
    assert not OAuthConnection.objects.filter(member=alice).exists()
    assert world.state.live_access("alice@idp") == []

    with django_capture_on_commit_callbacks(execute=True):
        Membership.objects.filter(space=space, user=carol).delete()
    assert not OAuthConnection.objects.exists()
    assert world.state.live_access("carol@idp") == []

    world.state.subject = "alice@idp"
    _connect(_browser(alice), server)
    assert world.state.live_access("alice@idp")
    with django_capture_on_commit_callbacks(execute=True):
        tool_server_delete(user=alice, server=server)
    assert world.state.live_access("alice@idp") == []


@pytest.mark.django_db
def test_no_token_or_code_is_stored_in_clear_logged_or_returned(
    alice, space, world, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.DEBUG)
    server = _server(alice, space, world)
    callback = _authorize(_start(_browser(alice), server))
    code = parse_qs(urlsplit(callback).query)["code"][0]
    browser = _browser(alice)
    callback = _authorize(_start(browser, server))
    code = parse_qs(urlsplit(callback).query)["code"][0]
    verifier_seen = []
    browser.get(callback)
    verifier_seen.append(world.state.token_requests[-1]["code_verifier"])
    run = ask(_session(alice, space, alice, server), alice, GREET)
    row = OAuthConnection.objects.get(server=server)
    secrets = [row.access_token, row.refresh_token, code, *verifier_seen]
    assert tool_server_secrets(space.pk)[:2] == [row.access_token, row.refresh_token]

    dumped = []
    with db_connection.cursor() as cursor:
        for table in db_connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            dumped.extend(repr(value) for line in cursor.fetchall() for value in line)
    text = "\n".join(dumped)
    logged = "\n".join(
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        # Not the test's own browser (httpx), which follows the redirects.
        if record.name.split(".")[0] not in ("httpx", "httpcore")
    )
    answer = _browser(alice).get(f"/api/v1/tool-servers/{server.pk}/")
    assert answer.status_code == 200
    api = answer.content.decode()
    journal = str(SessionMessage.objects.filter(run=run).values_list("message", flat=True))
    address = repr(server_address_for_run(server, member_id=alice.pk))
    for secret in secrets:
        assert secret not in text and secret not in logged and secret not in api
        assert secret not in journal and secret not in address


@pytest.mark.django_db
def test_a_client_registered_beforehand_comes_first(alice, space, settings):
    from mcp.shared.auth import OAuthClientInformationFull

    with oauth_servers(dynamic=False) as world:
        world.state.clients["agentloom-pre"] = OAuthClientInformationFull(
            client_id="agentloom-pre",
            redirect_uris=["http://testserver/oauth/callback/"],
            token_endpoint_auth_method="none",
            scope="tools",
        )
        server = _server(alice, space, world)
        refused = _browser(alice)
        answer = _start(refused, server)
        assert answer.status_code == 302 and "oauth" not in urlsplit(answer["Location"]).netloc
        page = refused.get(answer["Location"]).content.decode()
        assert "offers no way for this deployment to register" in page

        server.oauth_client_id = "agentloom-pre"
        server.save()
        browser = _browser(alice)
        start = _start(browser, server)
        assert parse_qs(urlsplit(start["Location"]).query)["client_id"] == ["agentloom-pre"]
        back = browser.get(_authorize(start), follow=True)
        assert "is connected" in back.content.decode(), back.content.decode()[-3000:]
        assert OAuthRegistration.objects.get(server=server).kind == "preregistered"
        assert OAuthConnection.objects.filter(member=alice).exists()


@pytest.mark.django_db
def test_a_client_id_metadata_document_under_an_https_origin(alice, space, settings):
    assert Client().get("/oauth/client-metadata.json").status_code == 404
    settings.CONSOLE_ORIGIN = "https://console.example"
    document = Client().get("/oauth/client-metadata.json").json()
    url = "https://console.example/oauth/client-metadata.json"
    assert document["client_id"] == url
    assert document["redirect_uris"] == ["https://console.example/oauth/callback/"]
    assert document["token_endpoint_auth_method"] == "none"
    with oauth_servers(dynamic=False, documents=True) as world:
        # The authorization server would fetch the document; the test hands it over.
        world.state.documents[url] = document_client(document)
        server = _server(alice, space, world)
        browser = _browser(alice)
        start = _start(browser, server)
        asked = parse_qs(urlsplit(start["Location"]).query)
        assert asked["client_id"] == [url]
        assert asked["redirect_uri"] == ["https://console.example/oauth/callback/"]
        browser.get(_authorize(start))
        assert OAuthRegistration.objects.get(server=server).kind == "document"
        assert OAuthConnection.objects.filter(member=alice).exists()
