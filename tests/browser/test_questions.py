"""A tool server's question in the console, in headless Chromium: the run waits, the creator
fills the form built from the question's schema (the server's text shown as text) and sends it,
and the run goes on with the answer."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from sessions_app.models import Run, SessionMessage
from tests.browser.test_console import (  # noqa: F401 - the fixture is used by name
    RUN_TIMEOUT_MS,
    ask,
    console_worker,
    run_block,
    unexpected,
    wait_for_run,
)
from tests.factories import approval_session, make_space, make_user
from tests.support.mcp_servers import BOOK_STATE, Calls, mcp_app, serve

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls, asking=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture
def booking_chat(page, login, transactional_db, mcp_server, settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    url, _calls = mcp_server
    user = make_user("dora", staff=True)
    space = make_space(name="Lab", admin=user)
    session = approval_session(user, space, url, ["demo__book"], approval={"demo__book": "never"})
    login(user)
    page.goto(f"/sessions/{session.pk}/")
    return page, session


def test_the_creator_answers_a_servers_question_from_the_chat(
    booking_chat,
    console_worker,  # noqa: F811
    mcp_server,
    screenshot,
    browser_errors,
):
    page, session = booking_chat
    _url, calls = mcp_server
    ask(page, '/tool demo__book {"room": "blue"}')
    wait_for_run(page, 1, "waiting_input")
    form = page.locator("[data-question]")
    expect(form).to_contain_text("demo", timeout=RUN_TIMEOUT_MS)
    expect(form.locator(".server-text")).to_have_text("Which day for <b>blue</b>?")
    expect(page.locator("[data-questions] .warning")).to_contain_text("must not ask")
    form.get_by_label("Day").fill("2026-12-24")
    form.get_by_label("Nights").fill("2")
    form.get_by_label("Breakfast").check()
    form.get_by_label("Size").select_option("double")
    page.wait_for_timeout(1500)  # a panel refresh keeps what is typed
    expect(form.get_by_label("Day")).to_have_value("2026-12-24")
    screenshot("console-question")
    form.get_by_role("button", name="Send").click()
    wait_for_run(page, 1, "succeeded")
    expect(run_block(page, 1)).to_contain_text("booked blue on 2026-12-24", timeout=RUN_TIMEOUT_MS)
    assert calls.answers[-1] == (
        "accept",
        {"day": "2026-12-24", "nights": 2, "breakfast": True, "size": "double"},
        BOOK_STATE,
    )
    with console_worker.db():
        run = Run.objects.get(session=session, number=1)
        kinds = list(
            SessionMessage.objects.filter(run=run).order_by("seq").values_list("kind", flat=True)
        )
    assert kinds.index("feedback") > kinds.index("tool_result")
    assert unexpected(browser_errors) == []
