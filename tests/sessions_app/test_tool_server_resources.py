"""Resources and changing lists of tool servers in runs, against real SDK servers on 127.0.0.1.

`read_resource` reads a URI that a result of the same server named in the session (or that the
server lists); any other URI is refused with no request sent. A call that sees the server's
tools differ from the stored listing (or is told they changed) marks the listing stale.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from context_app.engine_adapter import offered_tools
from context_app.services.agents import agent_create, agent_publish
from models_app.models import ToolServer
from models_app.services.tool_servers import tool_server_create, tool_server_refresh
from sessions_app.models import Run, SessionMessage
from sessions_app.services.runs import session_create
from tests.factories import ask, make_connection, make_space, make_user
from tests.support.mcp_servers import NOTE_TEXT, NOTE_URI, PNG_BYTES, Calls, mcp_app, serve

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module", params=["2026", "2025"])
def resource_server(request):
    calls = Calls()
    with serve(mcp_app(calls, era=request.param, resources=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture(scope="module")
def other_server():
    calls = Calls()
    with serve(mcp_app(calls, name="other", resources=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 10


@pytest.fixture
def space(alice):
    return make_space(admin=alice)


def _register(user, space, name: str, url: str) -> ToolServer:
    server = tool_server_create(user=user, space=space, name=name, url=url)
    return tool_server_refresh(user=user, server=server)


def _session(user, space, tools):
    agent = agent_create(
        user=user,
        space=space,
        name="Reader",
        system_prompt="You read resources.",
        model_connection=make_connection(space).pk,
        tools=tools,
    )
    return session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


def _result(run: Run) -> dict:
    return SessionMessage.objects.filter(run=run, kind="tool_result").latest("seq").message


def _read(session, user, server: str, uri: str) -> Run:
    return ask(session, user, f'/tool read_resource {{"server": "{server}", "uri": "{uri}"}}')


def test_a_refresh_stores_the_resources_and_publishing_offers_read_resource(
    alice, space, resource_server
):
    url, _calls = resource_server
    server = _register(alice, space, "demo", url)
    assert server.declares_resources is True
    assert [entry["uri"] for entry in server.resources] == [NOTE_URI]
    session = _session(alice, space, ["demo__greet"])
    snapshot = session.agent_version.snapshot
    assert snapshot["resource_servers"] == [{"server_id": server.pk, "server": "demo"}]
    offered = {tool["function"]["name"]: tool for tool in offered_tools(snapshot)}
    assert offered["read_resource"]["function"]["parameters"]["properties"]["server"] == {
        "type": "string",
        "enum": ["demo"],
    }


def test_a_server_declaring_no_resources_gets_no_read_resource(alice, space, resource_server):
    url, _calls = resource_server
    server = _register(alice, space, "demo", url)
    ToolServer.objects.filter(pk=server.pk).update(declares_resources=False)
    session = _session(alice, space, ["demo__greet"])
    assert session.agent_version.snapshot["resource_servers"] == []
    names = [tool["function"]["name"] for tool in offered_tools(session.agent_version.snapshot)]
    assert "read_resource" not in names
    run = _read(session, alice, "demo", NOTE_URI)
    assert "is not available to this agent" in _result(run)["content"]


def test_a_linked_text_resource_and_an_embedded_blob_are_read_and_journaled(
    alice, space, resource_server
):
    url, calls = resource_server
    _register(alice, space, "demo", url)
    session = _session(alice, space, ["demo__linker"])
    first = ask(session, alice, '/tool demo__linker {"number": 7}')
    assert "[resource link: demo://report/7]" in _result(first)["content"]

    text = _read(session, alice, "demo", "demo://report/7")
    assert text.status == Run.Status.SUCCEEDED, text.error
    message = _result(text)
    assert message["content"] == "report 7: NONCE-REPORT-7"
    contents = message["detail"]["mcp"]["contents"]
    assert contents == [
        {"uri": "demo://report/7", "mimeType": "text/plain", "text": "report 7: NONCE-REPORT-7"}
    ]
    assert "NONCE-REPORT-7" in text.answer

    blob = _read(session, alice, "demo", "demo://pixel/7")
    message = _result(blob)
    assert message["content"] == f"[blob: demo://pixel/7, image/png, {len(PNG_BYTES)} bytes]"
    assert message["detail"]["mcp"]["contents"][0]["blob"]
    assert calls.reads[-2:] == ["demo://report/7", "demo://pixel/7"]


def test_a_listed_resource_is_read_without_a_link(alice, space, resource_server):
    url, _calls = resource_server
    _register(alice, space, "demo", url)
    session = _session(alice, space, ["demo__greet"])
    run = _read(session, alice, "demo", NOTE_URI)
    assert _result(run)["content"] == NOTE_TEXT


def test_a_uri_never_offered_is_refused_without_a_request(alice, space, resource_server):
    url, calls = resource_server
    _register(alice, space, "demo", url)
    session = _session(alice, space, ["demo__linker"])
    # The user names it: text is not a result of the server.
    requests = len(calls.headers)
    run = _read(session, alice, "demo", "demo://report/8")
    assert run.status == Run.Status.SUCCEEDED, run.error
    content = _result(run)["content"]
    assert content.startswith("ERROR: read_resource: 'demo://report/8' was not named")
    assert "nothing was requested" in content
    assert len(calls.headers) == requests, "the server saw no request"
    assert "demo://report/8" not in calls.reads
    feedback = SessionMessage.objects.filter(run=run, kind="feedback").values_list(
        "message", flat=True
    )
    assert any("read_resource" in item["content"] for item in feedback)


def test_a_uri_another_server_named_is_refused_without_a_request(
    alice, space, resource_server, other_server
):
    url, calls = resource_server
    other_url, other_calls = other_server
    _register(alice, space, "demo", url)
    _register(alice, space, "other", other_url)
    session = _session(alice, space, ["demo__greet", "other__linker"])
    assert sorted(
        entry["server"] for entry in session.agent_version.snapshot["resource_servers"]
    ) == ["demo", "other"]
    linked = ask(session, alice, '/tool other__linker {"number": 9}')
    assert "demo://report/9" in _result(linked)["content"]
    requests, other_requests = len(calls.headers), len(other_calls.headers)
    run = _read(session, alice, "demo", "demo://report/9")
    assert "was not named by a result of tool server 'demo'" in _result(run)["content"]
    assert len(calls.headers) == requests and len(other_calls.headers) == other_requests
    # The server that named it may read it.
    assert _result(_read(session, alice, "other", "demo://report/9"))["content"] == (
        "report 9: NONCE-REPORT-9"
    )


def test_the_console_lists_the_resources(alice, space, resource_server, client):
    url, _calls = resource_server
    server = _register(alice, space, "demo", url)
    client.force_login(make_user("root", superuser=True))
    page = client.get(reverse("admin:models_app_toolserver_change", args=[server.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert NOTE_URI in html and "The readme." in html


# --- lists that change ------------------------------------------------------------------------


@pytest.fixture(params=["2026", "2025"])
def changing_server(request):
    calls = Calls()
    with serve(mcp_app(calls, era=request.param, changing=True)) as base:
        yield request.param, base + "/mcp", calls


def test_a_changed_list_marks_the_listing_stale_and_frozen_tools_keep_working(
    alice, space, changing_server, client
):
    era, url, _calls = changing_server
    server = _register(alice, space, "demo", url)
    assert server.listing_stale_since is None
    session = _session(alice, space, ["demo__grow", "demo__greet"])
    grown = ask(session, alice, "/tool demo__grow {}")
    assert _result(grown)["content"] == "grown"
    server.refresh_from_db()
    if era == "2025":
        # Told during the call (notifications/tools/list_changed).
        assert server.listing_stale_since is not None
    greeted = ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    assert _result(greeted)["content"] == "hello Ada", "a frozen tool keeps its schema"
    server.refresh_from_db()
    assert server.listing_stale_since is not None, "the next call saw the new listing"
    assert "fresh" not in {entry["name"] for entry in server.tools}

    client.force_login(make_user("root", superuser=True))
    page = client.get(reverse("admin:models_app_toolserver_change", args=[server.pk]))
    assert "stale since" in page.content.decode()

    server = tool_server_refresh(user=alice, server=server)
    assert server.listing_stale_since is None
    assert "fresh" in {entry["name"] for entry in server.tools}


def test_an_unchanged_list_is_not_marked(alice, space, changing_server):
    _era, url, _calls = changing_server
    server = _register(alice, space, "demo", url)
    session = _session(alice, space, ["demo__greet"])
    ask(session, alice, '/tool demo__greet {"who": "Ada"}')
    server.refresh_from_db()
    assert server.listing_stale_since is None
