"""Tool servers over the API: registered by space admins, headers write-only, tools listed from a
real MCP server on 127.0.0.1, failures as clear messages; agents choose and freeze their tools."""

from __future__ import annotations

import json

import pytest

from context_app.models import Agent
from models_app.models import ToolServer
from tests.api.factories import client_for
from tests.factories import make_connection
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db

HEADER_SECRET = "Bearer tok-NONCE-api-5ecret-4567"
SERVER_FIELDS = {
    "id",
    "space",
    "name",
    "url",
    "header_names",
    "approval",
    "tools",
    "protocol_version",
    "listed_at",
    "listing_stale_since",
    "declares_resources",
    "resources",
    "oauth",
    "oauth_client_id",
    "created_at",
    "updated_at",
}


@pytest.fixture(scope="module")
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True


def _create(client, space, url, **fields):
    body = {"space": space.pk, "name": "demo", "url": url, **fields}
    return client.post("/api/v1/tool-servers/", body, "json")


@pytest.fixture
def listed(api, space, mcp_server):
    url, _calls = mcp_server
    created = _create(api, space, url, headers={"Authorization": HEADER_SECRET})
    assert created.status_code == 201, created.json()
    refreshed = api.post(f"/api/v1/tool-servers/{created.json()['id']}/refresh")
    assert refreshed.status_code == 200, refreshed.json()
    return refreshed.json()


def test_a_server_is_registered_and_its_headers_are_never_returned(api, space, mcp_server):
    url, _calls = mcp_server
    response = _create(api, space, url, headers={"Authorization": HEADER_SECRET})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {*SERVER_FIELDS, "listing_error"}
    assert body["header_names"] == ["Authorization"]
    for path in ("/api/v1/tool-servers/", f"/api/v1/tool-servers/{body['id']}/"):
        assert HEADER_SECRET not in api.get(path).content.decode()
    assert ToolServer.objects.get().headers == {"Authorization": HEADER_SECRET}


def test_oauth_settings_are_returned_and_the_client_secret_never(api, space, mcp_server):
    url, _calls = mcp_server
    secret = "client-NONCE-s3cret-8901"
    response = _create(
        api, space, url, oauth="member", oauth_client_id="agentloom", oauth_client_secret=secret
    )
    body = response.json()
    assert (body["oauth"], body["oauth_client_id"]) == ("member", "agentloom")
    assert secret not in api.get(f"/api/v1/tool-servers/{body['id']}/").content.decode()
    assert ToolServer.objects.get().oauth_client_secret == secret
    changed = api.patch(f"/api/v1/tool-servers/{body['id']}/", {"url": url + "/v2"}, "json")
    assert changed.json()["oauth_client_id"] == "", "a new URL drops the client"
    assert ToolServer.objects.get().oauth_client_secret == ""
    refused = api.patch(f"/api/v1/tool-servers/{body['id']}/", {"oauth": "everyone"}, "json")
    assert refused.status_code == 400


def test_registering_a_server_lists_its_tools_at_once(api, space, mcp_server):
    url, _calls = mcp_server
    response = _create(api, space, url)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["listing_error"] is None
    assert body["protocol_version"] == "2026-07-28" and body["listed_at"]
    assert "demo__greet" in {tool["model_name"] for tool in body["tools"]}
    stored = api.get(f"/api/v1/tool-servers/{body['id']}/").json()
    assert stored["tools"] == body["tools"] and "listing_error" not in stored


def test_a_server_that_does_not_answer_is_registered_and_the_answer_says_so(api, space):
    response = _create(api, space, "http://127.0.0.1:9/mcp")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["tools"], body["protocol_version"], body["listed_at"]) == ([], "", None)
    assert body["listing_error"] == "The tool server could not be reached."
    assert ToolServer.objects.filter(pk=body["id"]).exists()


def test_refresh_lists_the_tools_with_their_schemas(listed, mcp_server):
    _url, calls = mcp_server
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert tools["greet"]["model_name"] == "demo__greet"
    assert tools["greet"]["description"] == "Return a greeting for a name."
    assert tools["greet"]["input_schema"]["required"] == ["who"]
    assert listed["protocol_version"] == "2026-07-28" and listed["listed_at"]
    assert calls.headers[-1]["authorization"] == HEADER_SECRET


def test_a_server_that_fails_is_a_clear_502_and_keeps_the_listing(api, listed):
    changed = api.patch(
        f"/api/v1/tool-servers/{listed['id']}/", {"url": "http://127.0.0.1:9/mcp"}, "json"
    )
    assert changed.status_code == 200
    assert changed.json()["header_names"] == [], "a new address does not get the old headers"
    response = api.post(f"/api/v1/tool-servers/{listed['id']}/refresh")
    assert response.status_code == 502
    assert response.json() == {"detail": "The tool server could not be reached."}


def test_a_private_address_is_refused_when_not_allowed(api, space, settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = False
    response = _create(api, space, "http://127.0.0.1:8123/mcp")
    assert response.status_code == 400
    assert "loopback or private" in response.json()["url"][0]
    response = _create(api, space, "http://169.254.169.254/mcp")
    assert response.status_code == 400 and "url" in response.json()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"name": "a__b"}, "name"),
        ({"url": "ftp://127.0.0.1/mcp"}, "url"),
        ({"url": "http://user:pw@127.0.0.1/mcp"}, "url"),
        ({"headers": {"Content-Type": "text/plain"}}, "headers"),
        ({"headers": {"X-Key": "line\nbreak"}}, "headers"),
        ({"headers": {"bad name": "x"}}, "headers"),
        ({"headers": ["Authorization"]}, "headers"),
        ({"headers": {"X-Key": 7}}, "headers"),
        ({"approval": "sometimes"}, "approval"),
    ],
)
def test_bad_input_names_the_field(api, space, fields, field):
    body = {"url": "http://127.0.0.1:8123/mcp", **fields}
    response = _create(api, space, body.pop("url"), **body)
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert "line\nbreak" not in json.dumps(response.json())


def test_a_member_may_read_but_not_write(space, carol, listed):
    client = client_for(carol)
    assert client.get(f"/api/v1/tool-servers/{listed['id']}/").status_code == 200
    assert client.patch(f"/api/v1/tool-servers/{listed['id']}/", {}, "json").status_code == 403
    assert client.post(f"/api/v1/tool-servers/{listed['id']}/refresh").status_code == 403
    assert client.delete(f"/api/v1/tool-servers/{listed['id']}/").status_code == 403
    response = _create(client, space, "http://127.0.0.1:8123/mcp")
    assert response.status_code == 403


def test_another_space_sees_nothing(bob, other_space, listed):
    client = client_for(bob)
    assert client.get(f"/api/v1/tool-servers/{listed['id']}/").status_code == 404
    assert client.post(f"/api/v1/tool-servers/{listed['id']}/refresh").status_code == 404
    assert client.get("/api/v1/tool-servers/").json()["count"] == 0


def test_an_agent_chooses_server_tools_and_publishing_freezes_them(api, space, listed):
    connection = make_connection(space)
    body = {
        "space": space.pk,
        "name": "Scout",
        "model_connection": connection.pk,
        "tools": ["echo", "demo__greet"],
    }
    created = api.post("/api/v1/agents/", body, "json")
    assert created.status_code == 201, created.json()
    assert created.json()["tools"] == ["echo", "demo__greet"]
    published = api.post(f"/api/v1/agents/{created.json()['id']}/publish")
    assert published.status_code == 201, published.json()
    frozen = published.json()["snapshot"]["server_tools"]
    assert [(entry["name"], entry["tool"], entry["server"]) for entry in frozen] == [
        ("demo__greet", "greet", "demo")
    ]
    assert frozen[0]["input_schema"]["required"] == ["who"]


def test_an_unlisted_server_tool_is_refused_naming_tools(api, space, listed):
    response = api.post(
        "/api/v1/agents/", {"space": space.pk, "name": "Scout", "tools": ["demo__nope"]}, "json"
    )
    assert response.status_code == 400
    assert "demo__nope" in response.json()["tools"][0]


def test_sub_agents_take_built_in_tools_only(api, space, listed):
    sub = {"name": "helper", "description": "", "system_prompt": "", "tools": ["demo__greet"]}
    response = api.post(
        "/api/v1/agents/", {"space": space.pk, "name": "Scout", "sub_agents": [sub]}, "json"
    )
    assert response.status_code == 400 and "sub_agents" in response.json()


def test_publishing_after_the_server_dropped_the_tool_is_refused(api, space, listed):
    connection = make_connection(space)
    agent = api.post(
        "/api/v1/agents/",
        {
            "space": space.pk,
            "name": "Scout",
            "model_connection": connection.pk,
            "tools": ["demo__greet"],
        },
        "json",
    ).json()
    ToolServer.objects.filter(pk=listed["id"]).update(tools=[])
    assert api.get(f"/api/v1/agents/{agent['id']}/").status_code == 200
    response = api.post(f"/api/v1/agents/{agent['id']}/publish")
    assert response.status_code == 400
    assert "demo__greet" in response.json()["tools"][0]
    assert Agent.objects.get(pk=agent["id"]).versions.count() == 0


def test_deleting_a_server_keeps_published_versions(api, space, listed):
    connection = make_connection(space)
    agent = api.post(
        "/api/v1/agents/",
        {
            "space": space.pk,
            "name": "Scout",
            "model_connection": connection.pk,
            "tools": ["demo__greet"],
        },
        "json",
    ).json()
    version = api.post(f"/api/v1/agents/{agent['id']}/publish").json()
    assert api.delete(f"/api/v1/tool-servers/{listed['id']}/").status_code == 204
    again = api.get(f"/api/v1/agents/{agent['id']}/versions/").json()
    assert again["results"][0]["snapshot"] == version["snapshot"]
