"""Sessions against the MCP maintainers' reference server, from npm, on 127.0.0.1.

The server is `@modelcontextprotocol/server-everything`, pinned in `tests/support/node/package.json`
and installed there by `./dev test` (`npm ci`, where npm exists), never fetched by a test. It runs
under Node on a free port of 127.0.0.1 over Streamable HTTP (`dist/index.js streamableHttp`, the
port from `PORT`), with an environment of its own (its `get-env` tool answers with every variable
it was given) and `loopback.mjs` loaded first, since it listens on every interface when left to
itself. The module starts it once and stops it at the end; without Node or the package, its tests
skip.

The application drives it as a person would: registered over the API (its tools listed at once),
a tool of it frozen into a published agent, a session's question calling `echo`, and
`read_resource` reading a resource its result linked and one it lists; a URI it never offered is
refused with nothing sent. The server logs each POST it receives on its standard output
("Received MCP POST request"), which is how a test counts what it was sent.

Where the server differs from the specification (2025-11-25, the revision it speaks), as met here:

- It listens on every interface and accepts any `Origin` (CORS `*`), where the Streamable HTTP
  transport says servers must validate `Origin` and, running locally, should bind to loopback.
- It speaks no 2026-07-28: the `server/discover` probe gets HTTP 400 with JSON-RPC error -32000
  "Server not initialized" (and `id: null`), and the client falls back to `initialize`. Every
  request without a session id, the probe too, makes a server and transport that are never
  dropped.
- An unknown tool is a tool result with `isError` ("MCP error -32602: Tool nope not found"), not
  the JSON-RPC error the specification lists for it; an unknown resource is -32603 (internal
  error), not -32002 (resource not found).
- Its blob resources are read with `mimeType: text/plain` while their template lists
  `application/octet-stream`.
- It lists `simulate-research-query` (`execution.taskSupport: "required"`) to a client that
  declared no `tasks` capability; called without task augmentation it answers a tool error
  ("requires task augmentation"). The tools that need a client feature the client does not
  declare (elicitation, sampling, roots) are not listed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from context_app.services.agents import agent_create, agent_publish
from sessions_app.models import Run, SessionMessage
from sessions_app.services.runs import session_create
from tests.factories import ask, make_connection
from tests.support.mcp_servers import free_port

pytestmark = pytest.mark.django_db

NODE_DIR = Path(__file__).resolve().parents[1] / "support" / "node"
PACKAGE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
NAME = "@modelcontextprotocol/server-everything"
START_SECONDS = 20
REQUEST_LINE = "Received MCP POST request"
LISTED_DOC = "demo://resource/static/document/instructions.md"


class ReferenceServer:
    """The reference server running under Node: its URL and what it printed."""

    def __init__(self, node: str, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = log
        self._out = log.open("wb")
        self.process = subprocess.Popen(
            [
                node,
                "--import",
                str(NODE_DIR / "loopback.mjs"),
                str(PACKAGE / "dist" / "index.js"),
                "streamableHttp",
            ],
            cwd=NODE_DIR,
            env={"PORT": str(self.port), "NODE_ENV": "production"},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the reference server exited: {self.output()}")
            with socket.socket() as sock:
                sock.settimeout(0.5)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the reference server did not answer: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def requests(self) -> int:
        """Return how many POST requests (every message a client sends) the server received."""
        return self.output().count(REQUEST_LINE)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._out.close()


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node is not installed: the reference MCP server from npm needs it")
    if not (PACKAGE / "dist" / "index.js").is_file():
        pytest.skip(
            "@modelcontextprotocol/server-everything is not installed in tests/support/node "
            "(./dev test installs it with `npm ci` where npm exists)"
        )
    return node


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory):
    server = ReferenceServer(_node(), tmp_path_factory.mktemp("everything") / "server.log")
    try:
        server.wait_until_it_answers()
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    settings.TOOL_CALL_SECONDS = 20


@pytest.fixture
def registered(alice, space, reference_server) -> dict:
    """Register the server over the API, as a space admin does; return the answer."""
    api = APIClient()
    api.force_authenticate(alice)
    body = {"space": space.pk, "name": "everything", "url": reference_server.url}
    response = api.post("/api/v1/tool-servers/", body, "json")
    assert response.status_code == 201, response.json()
    return response.json()


def _session(user, space, tools: list[str]):
    agent = agent_create(
        user=user,
        space=space,
        name="Everything",
        system_prompt="You use the reference server.",
        model_connection=make_connection(space).pk,
        tools=tools,
    )
    return session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


def _result(run: Run) -> dict:
    return SessionMessage.objects.filter(run=run, kind="tool_result").latest("seq").message


def _read(session, user, uri: str) -> Run:
    return ask(session, user, f'/tool read_resource {{"server": "everything", "uri": "{uri}"}}')


def test_the_installed_package_is_the_pinned_version():
    _node()
    pinned = json.loads((NODE_DIR / "package.json").read_text(encoding="utf-8"))
    installed = json.loads((PACKAGE / "package.json").read_text(encoding="utf-8"))
    assert installed["version"] == pinned["dependencies"][NAME] == "2026.8.31"


def test_registering_lists_its_tools_and_resources_at_once(registered):
    assert registered["listing_error"] is None
    # The 2026-07-28 probe is refused; the 2025 handshake is what it speaks.
    assert registered["protocol_version"] == "2025-11-25"
    names = {tool["model_name"] for tool in registered["tools"]}
    assert {
        "everything__echo",
        "everything__get-sum",
        "everything__get-resource-links",
        "everything__get-tiny-image",
        "everything__get-structured-content",
    } <= names
    # All usable but the one the server runs only as a task (below).
    unavailable = [tool["name"] for tool in registered["tools"] if tool.get("unavailable")]
    assert unavailable == ["simulate-research-query"]
    # Listed only to clients that declare elicitation, sampling or roots; ours declares none
    # when listing.
    assert not {"trigger-elicitation-request", "trigger-sampling-request", "get-roots-list"} & {
        tool["name"] for tool in registered["tools"]
    }
    [echo] = [tool for tool in registered["tools"] if tool["name"] == "echo"]
    assert echo["input_schema"]["properties"]["message"]["type"] == "string"
    assert echo["input_schema"]["required"] == ["message"]
    assert registered["declares_resources"] is True
    assert LISTED_DOC in {resource["uri"] for resource in registered["resources"]}


def test_a_session_calls_echo_and_the_result_is_journaled(alice, space, registered):
    session = _session(alice, space, ["everything__echo"])
    [frozen] = session.agent_version.snapshot["server_tools"]
    assert (frozen["server"], frozen["tool"]) == ("everything", "echo")
    assert frozen["input_schema"]["required"] == ["message"]

    run = ask(session, alice, '/tool everything__echo {"message": "NONCE-ECHO-39"}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    message = _result(run)
    assert message["content"] == "Echo: NONCE-ECHO-39"
    mcp = message["detail"]["mcp"]
    assert mcp["isError"] is False and mcp["protocol_version"] == "2025-11-25"
    assert mcp["content"] == [{"type": "text", "text": "Echo: NONCE-ECHO-39"}]
    assert "NONCE-ECHO-39" in run.answer


def test_resources_it_links_and_lists_are_read_and_others_refused_unsent(
    alice, space, registered, reference_server
):
    session = _session(alice, space, ["everything__get-resource-links"])
    assert session.agent_version.snapshot["resource_servers"] == [
        {"server_id": registered["id"], "server": "everything"}
    ]
    # Odd numbers link blobs, even ones texts.
    linked = ask(session, alice, '/tool everything__get-resource-links {"count": 2}')
    assert linked.status == Run.Status.SUCCEEDED, linked.error
    content = _result(linked)["content"]
    assert "[resource link: demo://resource/dynamic/blob/1]" in content
    assert "[resource link: demo://resource/dynamic/text/2]" in content

    text = _read(session, alice, "demo://resource/dynamic/text/2")
    assert text.status == Run.Status.SUCCEEDED, text.error
    message = _result(text)
    assert message["content"].startswith("Resource 2: This is a plaintext resource created at")
    [contents] = message["detail"]["mcp"]["contents"]
    assert contents["uri"] == "demo://resource/dynamic/text/2"
    assert contents["mimeType"] == "text/plain"

    blob = _read(session, alice, "demo://resource/dynamic/blob/1")
    content = _result(blob)["content"]
    assert content.startswith("[blob: demo://resource/dynamic/blob/1, text/plain, ")
    assert _result(blob)["detail"]["mcp"]["contents"][0]["blob"]

    listed = _read(session, alice, LISTED_DOC)
    assert "Everything Server" in _result(listed)["content"]

    # Its template would serve any number; the session never saw this one named.
    requests = reference_server.requests()
    refused = _read(session, alice, "demo://resource/dynamic/text/3")
    assert refused.status == Run.Status.SUCCEEDED, refused.error
    content = _result(refused)["content"]
    assert content.startswith("ERROR: read_resource: 'demo://resource/dynamic/text/3' was not")
    assert "nothing was requested" in content
    assert reference_server.requests() == requests, "the server saw no request"


def test_a_tool_that_requires_tasks_is_listed_as_unavailable(registered):
    # The client declares no task support: a tool the server runs only as a task is never
    # offered (called, the server answers "requires task augmentation").
    [research] = [t for t in registered["tools"] if t["name"] == "simulate-research-query"]
    assert "taskSupport: required" in research["unavailable"]
    usable = [t for t in registered["tools"] if "unavailable" not in t]
    assert usable and all(t["name"] != "simulate-research-query" for t in usable)
