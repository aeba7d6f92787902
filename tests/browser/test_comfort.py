"""Comfort in headless Chromium: the console at 390 px wide with the composer in view, a dark
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

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chat", "console_worker", "demo_session"]  # fixtures shared with test_console

PHONE = {"width": 390, "height": 844}
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


def _in_view(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"]


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
