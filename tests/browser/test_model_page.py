"""The model page in headless Chromium: fetch the provider's models, pick one, override, save."""

from __future__ import annotations

import pytest
from django.db import connection as db_connection
from playwright.sync_api import expect

from models_app.models import ModelConnection
from models_app.services.connections import connection_create
from tests.support.provider_double import ProviderDouble

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADD = "/admin/models_app/modelconnection/add/"
KEY = "sk-browser-3c2b1a09f8e7d6c5"


@pytest.fixture
def provider(settings):
    """A provider double with a chat model that states its window and a non-chat model."""
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    with ProviderDouble() as double:
        double.models = [
            {"id": "qwen-72b", "object": "model", "context_length": 131_072, "max_tokens": 8_192},
            {"id": "llama-3-8b", "object": "model"},
            {"id": "text-embedding-3-small", "object": "model"},
        ]
        yield double


def test_fetch_pick_override_and_save(admin_page, lab, provider, screenshot, browser_errors):
    page = admin_page
    page.goto(ADD)
    expect(page.locator("#window-source-badge")).to_have_text("not set")
    expect(page.locator("#effective-budget")).to_have_text("computed on save")
    # A provider that lists models only for a key: the page says so without asking it.
    page.select_option("#id_provider", "openai")
    page.click("#fetch-models")
    expect(page.locator("#discover-status")).to_have_text(
        "Enter the API key first: this provider lists its models only for a key."
    )
    page.select_option("#id_space", str(lab.pk))
    page.fill("#id_name", "Team proxy")
    page.select_option("#id_provider", "openai_compatible")
    page.fill("#id_base_url", provider.base_url)
    page.fill("#id_api_key", KEY)

    page.click("#fetch-models")
    models = page.locator("#discovered-models option")
    expect(models).to_have_count(3)
    expect(page.locator("#discover-status")).to_have_text("3 models (2 chat). Pick one.")
    # Window sources are named in words, never as raw codes.
    expect(page.locator("#discovered-models option[value='qwen-72b']")).to_contain_text(
        "(from the provider)"
    )
    expect(models.first).to_contain_text("(32K fallback: check it)")
    assert "platform_default" not in " ".join(models.all_text_contents())
    expect(
        page.locator("#discovered-models option[value='text-embedding-3-small']")
    ).to_be_disabled()
    expect(page.locator("#discovered-models option[value='qwen-72b']")).to_be_enabled()

    page.select_option("#discovered-models", "qwen-72b")
    expect(page.locator("#id_model_id")).to_have_value("qwen-72b")
    expect(page.locator("#id_context_window")).to_have_value("131072")
    expect(page.locator("#id_max_output_tokens")).to_have_value("4096")
    expect(page.locator("#id_max_output_cap")).to_have_value("8192")
    badge = page.locator("#window-source-badge")
    expect(badge).to_have_text("provider")
    expect(badge).to_have_attribute("data-source", "provider")
    expect(page.locator("#window-source-link a")).to_have_attribute(
        "href", provider.base_url + "/models"
    )
    expect(page.locator("#window-verified")).to_contain_text("verified 20")
    expect(page.locator("#effective-budget")).to_have_text("125,952 tokens")
    screenshot("model-page")

    page.fill("#id_context_window", "100000")
    expect(badge).to_have_text("manual")
    expect(page.locator("#id_window_source")).to_have_value("manual")
    expect(page.locator("#id_source_url")).to_have_value("")
    expect(page.locator("#effective-budget")).to_have_text("94,880 tokens")
    screenshot("model-page-manual")

    page.click("input[name=_save]")
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Team proxy")
    assert browser_errors == []

    saved = ModelConnection.objects.get(name="Team proxy")
    assert (saved.space_id, saved.provider, saved.base_url) == (
        lab.pk,
        "openai_compatible",
        provider.base_url,
    )
    assert (saved.model_id, saved.context_window, saved.max_output_tokens) == (
        "qwen-72b",
        100_000,
        4_096,
    )
    assert (saved.window_source, saved.source_url, saved.verified_on) == ("manual", "", None)
    assert saved.api_key == KEY
    with db_connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM models_app_modelconnection WHERE id = %s", [saved.pk])
        (raw,) = cursor.fetchone()
    raw = raw.encode() if isinstance(raw, str) else bytes(raw)
    assert KEY.encode() not in raw
    # Discovery sent the typed key once (then asked the server's own window routes, absent
    # here); nothing was saved before the form was.
    (request,) = [r for r in provider.requests if r.path == "/v1/models"]
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_the_edit_page_reuses_the_stored_key_and_shows_errors(
    admin_page, space_admin, lab, provider, browser_errors
):
    saved = connection_create(
        user=space_admin,
        space=lab,
        name="Stored",
        provider="openai_compatible",
        base_url=provider.base_url,
        api_key=KEY,
        model_id="qwen-72b",
    )
    page = admin_page
    page.goto(f"/admin/models_app/modelconnection/{saved.pk}/change/")
    expect(page.locator("#window-source-badge")).to_have_text("platform_default")
    expect(page.locator("#id_api_key")).to_have_value("")
    page.click("#fetch-models")
    expect(page.locator("#discovered-models option")).to_have_count(3)
    # The list selects the connection's current model.
    expect(page.locator("#discovered-models")).to_have_value("qwen-72b")
    listed = [r for r in provider.requests if r.path == "/v1/models"]
    assert listed[-1].headers["authorization"] == f"Bearer {KEY}"

    provider.reply(path="/v1/models", status=401, json={"error": {"message": f"bad key {KEY}"}})
    page.click("#fetch-models")
    status = page.locator("#discover-status")
    expect(status).to_have_text("The provider rejected the credentials. (HTTP 401)")
    expect(status).to_have_attribute("data-kind", "error")
    expect(page.locator("body")).not_to_contain_text("bad key")

    # Another address: the stored key is not sent, and the page says to type it.
    hits = len(provider.requests)
    page.fill("#id_base_url", provider.origin + "/other/v1")
    page.click("#fetch-models")
    expect(status).to_contain_text("API key: Enter the API key")
    assert len(provider.requests) == hits
    # The failed fetches answered 400/502, which the browser logs as failed resources.
    assert all("Failed to load resource" in error for error in browser_errors)
