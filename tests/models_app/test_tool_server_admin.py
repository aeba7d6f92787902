"""The tool-server admin: the API's rules, write-only headers, and listing a real server's tools."""

from __future__ import annotations

import pytest
from django.test import Client

from models_app.models import ToolServer
from tests.factories import make_connection, make_space, make_user
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
        assert "Demo: 6 tools listed (2026-07-28)." in response.content.decode()
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


# --- refusals on the form, never a 500 ----------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_url():
    with serve(mcp_app(Calls())) as base:
        yield base + "/mcp"


UNREACHABLE = "http://127.0.0.1:9/mcp"


def test_a_duplicate_name_is_refused_on_the_form(browser, lab):
    ToolServer.objects.create(space=lab, name="demo", url=UNREACHABLE)
    data = {"space": lab.pk, "name": "demo", "url": UNREACHABLE, "_save": "Save"}
    response = browser.post(ADD, data)
    assert response.status_code == 200
    assert "A tool server with this name already exists in this space." in response.content.decode()
    assert ToolServer.objects.count() == 1


def test_the_check_refuses_a_taken_name_as_the_write_would(root, lab):
    from agentloom.errors import InvalidInput
    from models_app.services.tool_servers import tool_server_validate

    taken = ToolServer.objects.create(space=lab, name="demo", url=UNREACHABLE)
    with pytest.raises(InvalidInput) as refused:
        tool_server_validate(user=root, space=lab, changes={"name": "demo", "url": UNREACHABLE})
    assert refused.value.field == "name"
    other = ToolServer.objects.create(space=lab, name="other", url=UNREACHABLE)
    with pytest.raises(InvalidInput):
        tool_server_validate(user=root, server=other, changes={"name": "demo"})
    # Its own name is not taken by itself.
    assert tool_server_validate(user=root, server=taken, changes={"name": "demo"}).name == "demo"


def test_a_refusal_when_saving_is_shown_on_the_form(browser, lab, monkeypatch):
    from models_app.admin import tool_servers as tool_servers_admin

    checked = tool_servers_admin.tool_server_validate

    def raced(**kwargs):
        # Another page registers the same name after this form was checked.
        probe = checked(**kwargs)
        ToolServer.objects.create(space=lab, name="demo", url=UNREACHABLE)
        return probe

    monkeypatch.setattr(tool_servers_admin, "tool_server_validate", raced)
    data = {"space": lab.pk, "name": "demo", "url": UNREACHABLE, "_save": "Save"}
    response = browser.post(ADD, data)
    assert response.status_code == 200
    page = response.content.decode()
    assert "A tool server with this name already exists in this space." in page
    assert 'class="errorlist' in page
    # The refused save was rolled back: only the racing row is left.
    assert list(ToolServer.objects.values_list("name", flat=True)) == ["demo"]


# --- registration lists the tools at once -------------------------------------------------------


def test_registering_a_server_lists_its_tools_at_once(browser, lab, mcp_url):
    data = {"space": lab.pk, "name": "demo", "url": mcp_url, "_save": "Save"}
    response = browser.post(ADD, data, follow=True)
    assert response.status_code == 200
    server = ToolServer.objects.get()
    assert server.protocol_version == "2026-07-28" and server.listed_at is not None
    assert "demo__greet" in {entry["model_name"] for entry in server.tools}
    assert "Demo: 6 tools listed (2026-07-28)." in response.content.decode()


def test_a_server_that_does_not_answer_is_registered_and_the_page_says_so(browser, lab):
    data = {"space": lab.pk, "name": "gone", "url": UNREACHABLE, "_save": "Save"}
    response = browser.post(ADD, data, follow=True)
    assert response.status_code == 200
    server = ToolServer.objects.get()
    assert (server.tools, server.listed_at) == ([], None)
    page = response.content.decode()
    assert "Gone: its tools could not be listed: The tool server could not be reached." in page


def test_the_change_page_has_the_list_tools_button_it_names(browser, lab, mcp_url):
    server = ToolServer.objects.create(space=lab, name="demo", url=mcp_url)
    change = f"/admin/models_app/toolserver/{server.pk}/change/"
    page = browser.get(change).content.decode()
    assert "“List tools” action" not in page
    button = f'formaction="/admin/models_app/toolserver/{server.pk}/list-tools/"'
    assert button in page and "List tools now" in page
    # Enter in a field submits with the form's first button: Save comes first.
    assert page.index('name="_save"') < page.index(button)
    response = browser.post(f"/admin/models_app/toolserver/{server.pk}/list-tools/", follow=True)
    assert response.redirect_chain[-1][0] == change
    assert "Demo: 6 tools listed (2026-07-28)." in response.content.decode()
    assert ToolServer.objects.get().listed_at is not None


def test_listing_from_the_change_page_needs_the_right_to_change(lab, mcp_url):
    from django.contrib.auth.models import Permission

    member = make_user("member", staff=True)
    member.user_permissions.add(*Permission.objects.filter(content_type__app_label="models_app"))
    lab.memberships.create(user=member, role="member")
    server = ToolServer.objects.create(space=lab, name="demo", url=mcp_url)
    client = Client()
    client.force_login(member)
    page = client.get(f"/admin/models_app/toolserver/{server.pk}/change/").content.decode()
    assert "/list-tools/" not in page
    response = client.post(f"/admin/models_app/toolserver/{server.pk}/list-tools/")
    assert response.status_code == 403
    assert ToolServer.objects.get().listed_at is None


# --- agents choose the tools, and their approval, on the agent form -----------------------------

AGENT_ADD = "/admin/context_app/agent/add/"


@pytest.fixture
def listed_server(root, lab, mcp_url):
    from models_app.services.tool_servers import tool_server_create, tool_server_refresh

    server = tool_server_create(user=root, space=lab, name="demo", url=mcp_url, approval="always")
    return tool_server_refresh(user=root, server=server)


def agent_data(lab, root, **fields):
    from agentloom.engine import DEFAULT_POLICY

    data = {
        "space": lab.pk,
        "owner": root.pk,
        "name": "Helper",
        "system_prompt": "Help.",
        "model_connection": make_connection(lab).pk,
        **{name: "" if value is None else value for name, value in DEFAULT_POLICY.items()},
        "_save": "Save",
    }
    data.update(fields)
    return data


def test_the_agent_add_page_offers_tool_server_tools_before_the_first_save(browser, listed_server):
    page = browser.get(AGENT_ADD).content.decode()
    assert 'value="demo__greet"' in page and "(tool server)" in page
    assert 'name="approval-demo__greet"' in page


def test_the_agent_form_sets_each_tool_servers_tools_approval(browser, lab, root, listed_server):
    from context_app.models import Agent

    data = agent_data(
        lab,
        root,
        tools=["echo", "demo__greet", "demo__weather"],
        **{
            "approval-demo__greet": "never",
            "approval-demo__weather": "",
            "approval-demo__picture": "never",  # not chosen: no mode is kept for it
        },
    )
    response = browser.post(AGENT_ADD, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    agent = Agent.objects.get()
    assert agent.tools == ["echo", "demo__greet", "demo__weather"]
    assert agent.approval == {"demo__greet": "never"}
    page = browser.get(f"/admin/context_app/agent/{agent.pk}/change/").content.decode()
    assert '<option value="never" selected>' in page
    assert "Server default (always)" in page
    data = agent_data(lab, root, tools=["demo__greet"], **{"approval-demo__greet": "sometimes"})
    refused = browser.post(f"/admin/context_app/agent/{agent.pk}/change/", data)
    assert refused.status_code == 200 and "approval" in refused.context["adminform"].form.errors
