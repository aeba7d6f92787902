"""The model page in the admin, server side: the same rules as the API, and the links to agents."""

from __future__ import annotations

import pytest
from django.test import Client

from models_app.models import ModelConnection
from models_app.services.connections import connection_create
from tests.factories import make_agent, make_space, make_user, make_version
from tests.models_app.conftest import SECRET_KEY

pytestmark = pytest.mark.django_db

ADD = "/admin/models_app/modelconnection/add/"
PROXY = "https://llm.example.com/v1"


def change_url(connection) -> str:
    return f"/admin/models_app/modelconnection/{connection.pk}/change/"


@pytest.fixture
def root(db):
    """A superuser who administers the space `lab`."""
    return make_user("root", superuser=True)


@pytest.fixture
def lab(root):
    return make_space(name="Lab", admin=root)


@pytest.fixture
def browser(root, lab) -> Client:
    client = Client()
    client.force_login(root)
    return client


def form_data(space, **fields):
    data = {
        "space": space.pk,
        "name": "proxy",
        "provider": "openai_compatible",
        "base_url": PROXY,
        "api_key": SECRET_KEY,
        "model_id": "qwen-72b",
        "window_source": "",
        "context_window": "",
        "max_output_tokens": "",
        "max_output_cap": "",
        "safety_margin_tokens": "1024",
        "source_url": "",
        "verified_on": "",
        "_save": "Save",
    }
    data.update(fields)
    return data


def edit_data(connection, **fields):
    data = form_data(
        connection.space,
        name=connection.name,
        provider=connection.provider,
        base_url=connection.base_url,
        api_key="",
        model_id=connection.model_id,
        window_source=connection.window_source,
        context_window=str(connection.context_window),
        max_output_tokens=str(connection.max_output_tokens),
        max_output_cap=str(connection.max_output_cap or ""),
        safety_margin_tokens=str(connection.safety_margin_tokens),
        source_url=connection.source_url,
        verified_on=connection.verified_on.isoformat() if connection.verified_on else "",
    )
    del data["space"]
    data.update(fields)
    return data


def errors_of(response) -> dict:
    form = response.context["adminform"].form
    return {name: list(messages) for name, messages in form.errors.items()}


@pytest.fixture
def saved(root, lab):
    return connection_create(
        user=root,
        space=lab,
        name="openai",
        provider="openai",
        api_key=SECRET_KEY,
        model_id="gpt-4o",
    )


def test_the_add_page_has_the_fetch_button_and_a_write_only_key(browser, lab, other_space):
    response = browser.get(ADD)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Fetch available models" in page
    assert 'id="discovered-models"' in page and 'data-discover-url="/api/models/discover"' in page
    assert 'type="password" name="api_key"' in page
    assert "models_app/discover.js" in page and "models_app/model_page.css" in page
    assert 'id="window-source-badge"' in page
    assert "Local demo model" in page
    # Only spaces the user administers are offered.
    choices = response.context["adminform"].form.fields["space"].queryset
    assert list(choices) == [lab]


def test_adding_with_blank_window_fields_fills_them_in(browser, lab):
    response = browser.post(ADD, form_data(lab))
    assert response.status_code == 302, errors_of(response)
    connection = ModelConnection.objects.get(name="proxy")
    assert connection.api_key == SECRET_KEY
    assert (connection.window_source, connection.context_window) == ("platform_default", 32_768)
    assert connection.max_output_tokens == 4_096


def test_adding_with_typed_values_is_manual(browser, lab):
    response = browser.post(ADD, form_data(lab, context_window="65536"))
    assert response.status_code == 302, errors_of(response)
    assert ModelConnection.objects.get(name="proxy").window_source == "manual"


def test_adding_with_discovered_values_keeps_their_source(browser, lab):
    data = form_data(
        lab,
        context_window="131072",
        max_output_tokens="4096",
        max_output_cap="8192",
        window_source="provider",
        source_url=PROXY + "/models",
        verified_on="2026-11-30",
    )
    response = browser.post(ADD, data)
    assert response.status_code == 302, errors_of(response)
    connection = ModelConnection.objects.get(name="proxy")
    assert (connection.window_source, connection.source_url) == ("provider", PROXY + "/models")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"context_window": "2000"}, "context_window"),
        ({"context_window": "many"}, "context_window"),
        ({"max_output_cap": "1000", "max_output_tokens": "2000"}, "max_output_tokens"),
        ({"base_url": ""}, "base_url"),
        ({"base_url": "http://169.254.169.254/"}, "base_url"),
        ({"base_url": "http://xn--a.com/v1"}, "base_url"),
        ({"base_url": "http://xn--/v1"}, "base_url"),
        ({"base_url": "http://exa mple.com/v1"}, "base_url"),
        ({"base_url": "http://-bad-.com"}, "base_url"),
        ({"base_url": "http://a..b"}, "base_url"),
        ({"model_id": "text-embedding-3-small"}, "model_id"),
        ({"model_id": ""}, "model_id"),
        ({"provider": "openai", "api_key": ""}, "api_key"),
        ({"window_source": "official_manifest"}, "window_source"),
        ({"safety_margin_tokens": "-1"}, "safety_margin_tokens"),
    ],
)
def test_the_form_refuses_what_the_service_refuses(browser, lab, fields, named):
    response = browser.post(ADD, form_data(lab, **fields))
    assert response.status_code == 200
    assert named in errors_of(response)
    assert SECRET_KEY not in response.content.decode()
    assert not ModelConnection.objects.exists()


def test_the_change_page_shows_a_non_ascii_host_in_punycode(browser, lab):
    response = browser.post(ADD, form_data(lab, base_url="http://ex\u0430mple.com/v1"))
    assert response.status_code == 302, errors_of(response)
    connection = ModelConnection.objects.get(name="proxy")
    page = browser.get(change_url(connection)).content.decode()
    assert "http://ex\u0430mple.com/v1" in page and "http://xn--exmple-4nf.com/v1" in page


def test_an_ascii_host_has_no_punycode_row(browser, saved):
    assert "punycode" not in browser.get(change_url(saved)).content.decode().lower()


def test_the_change_page_never_shows_the_key(browser, saved):
    page = browser.get(change_url(saved)).content.decode()
    assert SECRET_KEY not in page
    assert f'data-resource-id="{saved.pk}"' in page and 'data-has-api-key="true"' in page
    assert 'data-source="official_manifest"' in page and "verified 2026-11-30" in page


def test_a_blank_key_on_the_change_page_keeps_it(browser, saved):
    response = browser.post(change_url(saved), edit_data(saved, name="renamed"))
    assert response.status_code == 302, errors_of(response)
    saved.refresh_from_db()
    assert (saved.name, saved.api_key) == ("renamed", SECRET_KEY)
    assert saved.window_source == "official_manifest"


def test_a_new_url_with_a_blank_key_is_refused(browser, saved):
    data = edit_data(saved, provider="openai_compatible", base_url="https://collector.example.net")
    response = browser.post(change_url(saved), data)
    assert response.status_code == 200
    assert "api_key" in errors_of(response)
    saved.refresh_from_db()
    assert saved.provider == "openai"


def test_a_new_provider_takes_the_url_shown_on_the_page(browser, saved):
    data = edit_data(saved, provider="openai_compatible", api_key="sk-new", model_id="m")
    response = browser.post(change_url(saved), data)
    # The page still shows OpenAI's URL, which the compatible provider then uses.
    assert response.status_code == 302, errors_of(response)
    saved.refresh_from_db()
    assert (saved.provider, saved.base_url, saved.api_key) == (
        "openai_compatible",
        "https://api.openai.com/v1",
        "sk-new",
    )


def test_a_hand_edited_window_is_saved_as_manual(browser, saved):
    data = edit_data(saved, context_window="100000", window_source="manual", source_url="")
    response = browser.post(change_url(saved), data)
    assert response.status_code == 302, errors_of(response)
    saved.refresh_from_db()
    assert (saved.context_window, saved.window_source, saved.source_url) == (
        100_000,
        "manual",
        "",
    )


def test_the_change_page_links_the_agents_that_use_it(browser, root, lab, saved):
    agent = make_agent(lab, root, connection=saved, name="Helper")
    version = make_version(agent)
    page = browser.get(change_url(saved)).content.decode()
    assert f"/admin/context_app/agent/{agent.pk}/change/" in page
    assert f"/admin/context_app/agentversion/{version.pk}/change/" in page
    assert "Helper (draft)" in page and "Helper v1 (published)" in page


def test_an_unused_connection_says_so(browser, saved):
    assert "No agent uses this connection." in browser.get(change_url(saved)).content.decode()


def test_deleting_a_used_connection_is_refused(browser, root, lab, saved):
    make_version(make_agent(lab, root, connection=saved, name="Helper"))
    url = f"/admin/models_app/modelconnection/{saved.pk}/delete/"
    response = browser.post(url, {"post": "yes"})
    assert response.status_code == 200
    assert ModelConnection.objects.filter(pk=saved.pk).exists()


def test_deleting_an_unused_connection(browser, saved):
    url = f"/admin/models_app/modelconnection/{saved.pk}/delete/"
    assert browser.post(url, {"post": "yes"}).status_code == 302
    assert not ModelConnection.objects.exists()


def test_a_member_sees_the_connection_but_cannot_change_it(saved, lab):
    from agentloom.spaces.models import Membership

    viewer = make_user("viewer", superuser=True)
    Membership.objects.create(space=lab, user=viewer, role=Membership.Role.MEMBER)
    client = Client()
    client.force_login(viewer)
    page = client.get(change_url(saved))
    assert page.status_code == 200
    content = page.content.decode()
    assert "Fetch available models" not in content and 'name="_save"' not in content
    assert SECRET_KEY not in content and "stored (write-only, never shown)" in content
    assert client.post(change_url(saved), edit_data(saved, name="x")).status_code == 403
    assert client.get(ADD).status_code == 403


def test_a_superuser_outside_the_space_only_views(saved):
    outsider = make_user("outsider", superuser=True)
    make_space(name="Theirs", admin=outsider)
    client = Client()
    client.force_login(outsider)
    page = client.get(change_url(saved)).content.decode()
    assert SECRET_KEY not in page and 'name="_save"' not in page
    assert client.post(change_url(saved), edit_data(saved, name="x")).status_code == 403
    url = f"/admin/models_app/modelconnection/{saved.pk}/delete/"
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert ModelConnection.objects.get(pk=saved.pk).name == "openai"


def test_staff_outside_the_space_do_not_see_it(saved):
    from django.contrib.auth.models import Permission

    staff = make_user("staffer", staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_modelconnection"))
    make_space(name="Theirs", admin=staff)
    client = Client()
    client.force_login(staff)
    assert client.get(change_url(saved)).status_code == 302  # "does not exist" redirect
    listing = client.get("/admin/models_app/modelconnection/")
    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == []


def test_agent_pages_link_back_to_the_connection(browser, root, lab, saved):
    agent = make_agent(lab, root, connection=saved, name="Helper")
    version = make_version(agent)
    link = change_url(saved)
    assert (
        link
        in browser.get(f"/admin/context_app/agentversion/{version.pk}/change/").content.decode()
    )
    agent_page = browser.get(f"/admin/context_app/agent/{agent.pk}/change/").content.decode()
    assert "/admin/models_app/modelconnection/__fk__/change/" in agent_page


def test_the_model_page_takes_manual_prices_and_thinking_and_marks_retired_ids(browser, lab):
    response = browser.post(
        ADD,
        {
            "space": lab.pk,
            "name": "proxy",
            "provider": "openai_compatible",
            "base_url": PROXY,
            "model_id": "qwen-72b",
            "prices": '{"input": "0.4", "output": "1.6", "currency": "USD"}',
            "safety_margin_tokens": "1024",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    proxy = ModelConnection.objects.get(name="proxy")
    assert proxy.prices["input"] == "0.4"
    page = browser.get(change_url(proxy)).content.decode()
    assert "source manual, entered" in page
    retired = connection_create(
        user=proxy.space.memberships.get().user,
        space=lab,
        name="old",
        provider="deepseek",
        api_key=SECRET_KEY,
        model_id="deepseek-reasoner",
        thinking="enabled",
    )
    page = browser.get(change_url(retired)).content.decode()
    assert "retired the model ID deepseek-reasoner" in page
    assert "choose deepseek-flash (thinking enabled)" in page
    refused = browser.post(
        change_url(retired),
        {
            "name": "old",
            "provider": "deepseek",
            "model_id": "deepseek-reasoner",
            "thinking": "disabled",
            "reasoning_effort": "max",
            "safety_margin_tokens": "1024",
        },
    )
    assert refused.status_code == 200
    assert "applies in thinking mode only" in refused.content.decode()


def test_the_model_page_has_a_test_connection_button(browser, lab):
    html = browser.get(ADD).content.decode()
    assert 'id="test-connection"' in html
    assert 'data-test-url="/api/v1/model-connections/test"' in html


def test_a_refused_form_keeps_what_was_typed_and_asks_for_the_key_again(browser, lab):
    response = browser.post(ADD, form_data(lab, name="NONCE-NAME", safety_margin_tokens="-1"))
    html = response.content.decode()
    assert "safety_margin_tokens" in errors_of(response)
    assert 'value="NONCE-NAME"' in html and 'value="qwen-72b"' in html
    assert 'id="key-again"' in html and "Enter the API key again" in html
    assert SECRET_KEY not in html


def test_a_refused_form_without_a_typed_key_does_not_ask_for_one(browser, lab):
    response = browser.post(ADD, form_data(lab, api_key="", safety_margin_tokens="-1"))
    assert 'id="key-again"' not in response.content.decode()


def test_a_refusal_when_saving_is_shown_on_the_form_and_nothing_is_kept(browser, lab, monkeypatch):
    from agentloom.errors import InvalidInput
    from models_app.admin import connections as connection_admin

    def refuse(**fields):
        # A rule the form's check could not see: the write refuses after the check passed.
        ModelConnection.objects.create(space=lab, name="seen", provider="local", model_id="x")
        raise InvalidInput("NONCE-REFUSAL: the name was taken meanwhile.", field="name")

    monkeypatch.setattr(connection_admin, "connection_create_nested", refuse)
    response = browser.post(ADD, form_data(lab))
    assert response.status_code == 200
    assert errors_of(response) == {"name": ["NONCE-REFUSAL: the name was taken meanwhile."]}
    # The page's transaction was rolled back with the refused write.
    assert not ModelConnection.objects.exists()
