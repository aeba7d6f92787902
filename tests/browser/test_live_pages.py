"""Pages that stay live, in headless Chromium: a run started elsewhere shows up in the chat
within a second, the home page refreshes, the composer states its limit and never cuts text."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from context_app.engine_adapter import input_check
from sessions_app.services.runs import run_ask
from tests.browser.test_console import (
    chat,
    console_worker,
    demo_session,
    run_block,
    unexpected,
    wait_for_run,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chat", "console_worker", "demo_session"]  # fixtures shared with test_console


def test_a_run_started_elsewhere_shows_up_within_a_second(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    user, session = demo_session
    expect(page.locator("#question")).to_be_focused()
    expect(page.locator("#ask-button")).to_be_enabled()
    with console_worker.db():
        run_ask(user=user, session=session, question='/tool sleep {"seconds": 2}')
    started = time.monotonic()
    expect(run_block(page, 1)).to_be_visible(timeout=1500)
    seen_after = time.monotonic() - started
    expect(page.locator("#ask-button")).to_be_disabled()
    expect(page.locator("#active-hint")).to_be_visible()
    screenshot("second-tab-run-live")
    wait_for_run(page, 1)
    expect(page.locator("#ask-button")).to_be_enabled()
    expect(run_block(page, 1).locator(".msg.answer")).to_contain_text("sleep")
    assert seen_after < 1.5
    assert unexpected(browser_errors) == []


def test_a_question_over_the_door_limit_is_refused_before_sending_and_not_cut(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session
    with console_worker.db():
        limit = input_check(session.agent_version, "x").limit  # the door the server keeps
    expect(page.locator("#ask-limit")).to_have_text(
        re.compile(rf"^Questions up to about [\d,]+ characters \({limit:,} bytes\)\.$")
    )
    posts: list[str] = []
    page.on(
        "request", lambda request: posts.append(request.url) if request.method == "POST" else None
    )
    pasted = "x" * 150_000
    page.fill("#question", pasted)
    page.click("#ask-button")
    notice = page.locator("#notice")
    expect(notice).to_be_visible()
    with console_worker.db():
        door = input_check(session.agent_version, pasted)  # the figures the server refuses with
    expect(notice).to_contain_text(
        f"This question is estimated at {door.size:,} bytes, "
        f"above the limit of {door.limit:,} bytes"
    )
    assert page.locator("#question").evaluate("node => node.value.length") == 150_000
    assert page.locator("#question").get_attribute("maxlength") is None
    expect(page.locator("#ask-size")).to_have_class(re.compile("error-text"))
    screenshot("question-over-the-door")
    time.sleep(0.3)
    assert posts == []
    assert unexpected(browser_errors) == []


def test_the_home_page_refreshes_its_sessions(page, login, demo_session, console_worker):
    user, session = demo_session
    login(user)
    page.goto("/")
    row = page.locator("#sessions-table tr", has_text="Demo chat")
    expect(row).to_contain_text("no runs yet")
    with console_worker.db():
        run_ask(user=user, session=session, question="hello")
    expect(row).to_contain_text("#1", timeout=5000)
    expect(row.locator(".badge")).to_have_text("succeeded", timeout=10_000)


def test_keys_slash_focuses_the_composer_and_escape_closes_a_panel(chat):
    page = chat
    page.locator("#session-actions summary").click()
    expect(page.locator("#session-actions")).to_have_attribute("open", "")
    page.keyboard.press("Escape")
    expect(page.locator("#session-actions")).not_to_have_attribute("open", "")
    page.locator("h1").click()
    page.keyboard.press("/")
    expect(page.locator("#question")).to_be_focused()
    expect(page.locator("#question")).to_have_value("")
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second")
    expect(page.locator("#question")).to_have_value("first line\nsecond")


def _ask_when_idle(worker, user, session, question: str):
    """Ask once the session has no active run (the worker thread runs it meanwhile)."""
    deadline = time.monotonic() + 10
    while True:
        with worker.db():
            if not session.runs.filter(status__in=["queued", "running"]).exists():
                return run_ask(user=user, session=session, question=question)
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.1)


def test_the_journal_and_context_pages_follow_runs_started_elsewhere(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    user, session = demo_session
    with console_worker.db():
        first = run_ask(user=user, session=session, question="NONCE-FIRST")
    page.goto(f"/sessions/{session.pk}/journal/")
    expect(page.locator("#timeline")).to_contain_text("NONCE-FIRST", timeout=10_000)
    page.reload()
    expect(page.locator("#journal-end")).to_be_visible()
    _ask_when_idle(console_worker, user, session, "NONCE-SECOND")
    expect(page.locator("#timeline")).to_contain_text("NONCE-SECOND", timeout=3_000)
    expect(page.locator("li.run-boundary", has_text="Run #2")).to_have_count(1)
    screenshot("journal-follows-runs")

    page.goto(f"/runs/{first.pk}/context/")
    expect(page.locator("#newer-run")).to_be_hidden()
    _ask_when_idle(console_worker, user, session, "NONCE-THIRD")
    expect(page.locator("#newer-run")).to_be_visible(timeout=3_000)
    expect(page.locator("#newer-run")).to_contain_text("Run #3 of this session has started")
    screenshot("context-newer-run")
    assert unexpected(browser_errors) == []
