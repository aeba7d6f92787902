"""Comfort in headless Chromium: the console at 390 px wide with the composer in view, long names
and titles that never widen the home, a meter that fits its panel, notices said in view, a dark
scheme that follows the system's, and a favicon."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import (
    ask,
    chat,
    console_worker,
    demo_session,
    unexpected,
    wait_for_run,
)
from tests.factories import ask as ask_here
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_user,
    published_session,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chat", "console_worker", "demo_session"]  # fixtures shared with test_console

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


def _in_view(page, selector: str, height: int = PHONE["height"]) -> bool:
    box = page.locator(selector).bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def _outside(page, inner: str, outer: str) -> list[str]:
    """Return the text of each shown `inner` element that reaches past the `outer` box it is in."""
    return page.evaluate(
        """([inner, outer]) => [...document.querySelectorAll(inner)].filter((node) => {
             const box = node.closest(outer).getBoundingClientRect();
             const own = node.getBoundingClientRect();
             return own.width > 0 && (own.left < box.left || own.right > box.right);
           }).map((node) => node.textContent.replace(/\\s+/g, " ").trim())""",
        [inner, outer],
    )


def test_home_and_chat_fit_390_px_with_the_composer_above_the_fold(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session
    page.set_viewport_size(PHONE)
    ask(page, '/tool echo {"text": "hi"}')
    wait_for_run(page, 1)
    page.goto(f"/sessions/{session.pk}/")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(OVERFLOW) <= 0
    assert _in_view(page, "#question") and _in_view(page, "#ask-button")
    page.screenshot(path=str(screenshot("phone-chat").parent / "phone-chat-viewport.png"))
    page.goto("/")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(OVERFLOW) <= 0
    screenshot("phone-home")
    assert unexpected(browser_errors) == []


def test_the_home_fits_390_px_whatever_its_titles_names_and_statuses(
    page, login, demo_session, screenshot, browser_errors
):
    user, session = demo_session
    # Words no line can break at (an address, an identifier) and the widest status badge.
    titles = [
        "Summarise https://example.com/reports/2026/quarterly-results-for-the-board.html",
        "Check_the_nightly_export_of_customer_accounts_and_their_invoices",
        "",
    ]
    for title in titles:
        other = make_session(session.agent_version, user)
        other.title = title
        other.save()
        make_run(other, status="waiting_approval")
    make_run(session, status="waiting_approval")
    make_agent(session.space, user, name="CustomerSupportTriageAssistantForEuropeanMarkets")
    make_space(name="Laboratory_for_Applied_Computational_Linguistics", members=[user])
    login(user)
    page.set_viewport_size(PHONE)
    page.goto("/")
    page.wait_for_load_state("networkidle")
    screenshot("phone-home-long-names")
    assert page.evaluate(OVERFLOW) <= 0
    expect(page.locator("#sessions-table td.actions a")).to_have_count(4)
    assert _outside(page, "#sessions-table td.actions a", ".module") == []
    assert _outside(page, ".module td, .module h3", ".module") == []
    assert unexpected(browser_errors) == []


def test_the_meter_fits_the_side_panel_at_1280_px(
    page, login, settings, provider_double, screenshot, browser_errors
):
    # A large window read in calibrated tokens: the longest figures the meter shows.
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    user = make_user("wim", staff=True)
    space = make_space(admin=user)
    connection = make_connection(
        space,
        provider="openai",
        base_url=provider_double.base_url,
        api_key="sk-test-NONCE-meter-0123456789",
        model_id="gpt-4o",
        context_window=1_000_000,
        max_output_tokens=8_192,
        safety_margin_tokens=200,
    )
    session = published_session(user, space, connection, name="Roomy", title="Roomy")
    provider_double.reply_chat(content="hello")
    assert ask_here(session, user, "Hello there").status == "succeeded"
    login(user)
    page.set_viewport_size(LAPTOP)
    page.goto(f"/sessions/{session.pk}/")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#live-panel [data-meter-unit]")).to_have_text("calibrated tokens")
    screenshot("laptop-chat-meter")
    assert _outside(page, "#live-panel .meter-legend > span", "#live-panel") == []
    panel = page.locator("#live-panel")
    assert panel.evaluate("node => node.scrollWidth - node.clientWidth") <= 0
    assert unexpected(browser_errors) == []


def test_notices_are_said_in_view_at_900_px(page, login, demo_session, screenshot, browser_errors):
    user, session = demo_session
    questions = ['/tool echo {"text": "hi"}', "What is this?", '/tool big_output {"chars": 900}']
    for question in questions:
        assert ask_here(session, user, question).status == "succeeded"
    login(user)
    page.set_viewport_size(LAPTOP)
    page.goto(f"/sessions/{session.pk}/")
    page.wait_for_load_state("networkidle")
    # As a person does: go down to the ask box, type nothing but spaces, press Ask.
    page.locator("#ask-button").scroll_into_view_if_needed()
    page.fill("#question", "   ")
    page.click("#ask-button")
    expect(page.locator("#notice")).to_have_text("Type a question first.")
    screenshot("laptop-chat-refused")
    for shown in ("#notice", "#question", "#ask-button"):
        assert _in_view(page, shown, LAPTOP["height"]), shown
    # Right above the ask box, where the eyes are, whatever the page's length.
    notice, question = (page.locator(at).bounding_box() for at in ("#notice", "#question"))
    assert 0 <= question["y"] - (notice["y"] + notice["height"]) <= 40
    # A message of a form the page posted (a rename) is in view when the chat opens again.
    page.click("#session-actions summary")
    page.fill("#session-title", "NONCE-RENAMED")
    page.click("#rename-form button")
    expect(page.locator(".messagelist")).to_contain_text("Renamed to “NONCE-RENAMED”.")
    page.wait_for_load_state("networkidle")
    assert _in_view(page, ".messagelist", LAPTOP["height"])
    assert unexpected(browser_errors) == []


def test_the_console_follows_a_dark_system_scheme(chat, console_worker, screenshot, browser_errors):
    page = chat
    ask(page, "Some **markdown** and `code`.\n\n```\nblock\n```")
    wait_for_run(page, 1)
    background = "getComputedStyle(document.body).backgroundColor"
    assert page.evaluate(background) == "rgb(255, 255, 255)"
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(background)
    assert dark != "rgb(255, 255, 255)"
    red, green, blue = (int(part) for part in dark[4:-1].split(","))
    assert red + green + blue < 200
    question = page.locator(".msg.question").first.evaluate(
        "node => getComputedStyle(node).backgroundColor"
    )
    assert sum(int(part) for part in question[4:-1].split(",")) < 300
    screenshot("dark-chat")
    for path in ("/", f"/runs/{page.locator('.run').first.get_attribute('data-run-id')}/context/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate(background) == dark
    screenshot("dark-context")
    page.goto("/")
    screenshot("dark-home")
    assert unexpected(browser_errors) == []


def test_every_page_has_a_favicon(chat):
    page = chat
    for path in ("/", "/admin/"):
        page.goto(path)
        href = page.locator("link[rel=icon]").get_attribute("href")
        assert href.endswith("favicon.svg")
        assert page.request.get(href).status == 200
    expect(page.locator("link[rel=icon]")).to_have_count(1)
