"""Setup that checks itself, in headless Chromium: "Test connection" on the model page with a
good key, a bad key and a dead port, and a refused form that asks for the key again."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_model_page import ADD, KEY, provider
from tests.factories import make_connection
from tests.models_app.test_connection_test import dead_port_url

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["provider"]  # the provider double of test_model_page


def fill(page, base_url: str, key: str) -> None:
    page.goto(ADD)
    page.select_option("#id_provider", "openai_compatible")
    page.fill("#id_base_url", base_url)
    page.fill("#id_api_key", key)
    page.fill("#id_model_id", "qwen-72b")


def test_test_connection_with_a_good_key_a_bad_key_and_a_dead_port(
    admin_page, lab, provider, screenshot, browser_errors
):
    page = admin_page
    status = page.locator("#test-status")

    provider.reply_chat(content="OK", model="qwen-72b")
    fill(page, provider.base_url, KEY)
    page.click("#test-connection")
    expect(status).to_have_text(
        re.compile(r"^Connected: the model answered in [\d,]+ ms \(qwen-72b\)\.$")
    )
    expect(status).to_have_attribute("data-kind", "ok")
    screenshot("test-connection-ok")

    provider.reply(status=401, json={"error": {"message": "invalid key"}})
    page.fill("#id_api_key", "sk-wrong")
    page.click("#test-connection")
    expect(status).to_contain_text("The provider rejected the credentials. (HTTP 401)")
    expect(status).to_have_attribute("data-kind", "error")
    screenshot("test-connection-bad-key")

    fill(page, dead_port_url(), KEY)
    page.click("#test-connection")
    expect(status).to_contain_text("The provider could not be reached.")
    screenshot("test-connection-dead-port")
    paths = [request.path for request in provider.requests]
    assert [path for path in paths if path == "/v1/chat/completions"] == [
        "/v1/chat/completions"
    ] * 2
    # The test that answered also asked whether the server tokenizes (the probe's routes).
    assert set(paths) - {"/v1/chat/completions"} <= {"/tokenize", "/extras/tokenize/count"}
    assert browser_errors == []


def test_a_refused_form_keeps_what_was_typed_and_asks_for_the_key_again(
    admin_page, lab, provider, screenshot
):
    page = admin_page
    fill(page, provider.base_url, KEY)
    page.select_option("#id_space", str(lab.pk))
    page.fill("#id_name", "NONCE-NAME")
    page.fill("#id_safety_margin_tokens", "-1")
    page.click("input[name=_save]")
    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator("#id_name")).to_have_value("NONCE-NAME")
    expect(page.locator("#id_model_id")).to_have_value("qwen-72b")
    expect(page.locator("#id_api_key")).to_have_value("")
    expect(page.locator("#key-again")).to_have_text(
        "Enter the API key again: the key you typed was not saved, and a key is never shown back."
    )
    screenshot("connection-form-key-again")


def test_the_agent_form_shows_all_its_errors_at_once_in_words(
    admin_page, lab, space_admin, screenshot, browser_errors
):
    page = admin_page
    connection = make_connection(lab, name="Demo connection")
    page.goto("/admin/context_app/agent/add/")
    page.select_option("#id_space", str(lab.pk))
    page.select_option("#id_owner", str(space_admin.pk))
    page.fill("#id_name", "Form agent")
    page.select_option("#id_model_connection", str(connection.pk))
    page.fill("#id_sub_agents-0-name", "checker")
    page.fill("#id_sub_agents-1-name", "Bad Name")
    page.fill("#id_target_ratio", "0.9")
    page.fill("#id_max_compaction_calls", "40")
    page.click("input[name=_continue]")

    expect(page.locator(".field-target_ratio .errorlist")).to_have_text(
        "Target share must be below the trigger share."
    )
    expect(page.locator(".field-max_compaction_calls .errorlist")).to_have_text(
        "Calls per compaction must be an integer from 1 to 16."
    )
    expect(page.locator("#sub-agent-error-1")).to_have_text(
        "Sub-agent names use lower-case letters, digits and underscores, starting with a "
        "letter (at most 40 characters)."
    )
    expect(page.locator(".errorlist")).to_have_count(3)
    # What was typed stays, and only the faulty box is outlined.
    expect(page.locator("#id_sub_agents-1-name")).to_have_value("Bad Name")
    border = "node => getComputedStyle(node).borderTopColor"
    good = page.locator("#id_sub_agents-0-name").evaluate(border)
    bad = page.locator("#id_sub_agents-1-name").evaluate(border)
    assert good != bad
    assert page.locator(".sub-agent-row.row-error").count() == 1
    page.locator(".field-sub_agents").scroll_into_view_if_needed()
    screenshot("agent-form-all-errors")
    assert browser_errors == []
