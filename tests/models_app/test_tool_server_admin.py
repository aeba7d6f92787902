"""The tool-server admin: the API's rules, write-only headers, and listing a real server's tools."""

from __future__ import annotations

import pytest
from django.test import Client

from models_app.models import ToolServer
from tests.factories import make_space, make_user
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db

ADD = "/admin/models_app/toolserver/add/"
CHANGELIST = "/admin/models_app/toolserver/"
SECRET = "Bearer tok-NONCE-admin-0a1b2c3d4e"


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True


@pytest.fixture
def root(db):
    return make_user("root", superuser=True)


@pytest.fixture
def lab(root):
    return make_space(name="Lab", admin=root)


@pytest.fixture
def browser(root, lab) -> Client:
    client = Client()
    client.force_login(root)
    return client


def test_a_server_is_added_its_tools_listed_and_its_headers_never_shown(browser, lab):
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        data = {
            "space": lab.pk,
            "name": "demo",
            "url": base + "/mcp",
            "headers_text": f"Authorization: {SECRET}",
            "approval": "always",
            "_save": "Save",
        }
        response = browser.post(ADD, data)
        assert response.status_code == 302, response.content.decode()[:2000]
        server = ToolServer.objects.get()
        assert server.headers == {"Authorization": SECRET}
        assert server.approval == "always"
        response = browser.post(
            CHANGELIST, {"action": "list_tools", "_selected_action": [server.pk]}, follow=True
        )
        assert "emo: 6 tools (2026-07-28)." in response.content.decode()
    page = browser.get(f"/admin/models_app/toolserver/{server.pk}/change/").content.decode()
    assert "demo__greet" in page and "Authorization" in page
    assert SECRET not in page and "tok-NONCE" not in page


def test_the_form_refuses_what_the_api_refuses(browser, lab, settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = False
    data = {"space": lab.pk, "name": "demo", "url": "http://10.0.0.3/mcp", "_save": "Save"}
    page = browser.post(ADD, data).content.decode()
    assert "loopback or private" in page
    data.update(url="https://tools.example.com/mcp", headers_text="Host: evil")
    assert "set by the MCP transport" in browser.post(ADD, data).content.decode()
    assert not ToolServer.objects.exists()


def test_a_failing_server_is_a_message_not_an_error_page(browser, lab):
    server = ToolServer.objects.create(space=lab, name="gone", url="http://127.0.0.1:9/mcp")
    response = browser.post(
        CHANGELIST, {"action": "list_tools", "_selected_action": [server.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "one: The tool server could not be reached." in response.content.decode()
