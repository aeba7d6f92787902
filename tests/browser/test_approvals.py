"""The console's approval panel in headless Chromium: the run waits, the creator approves one
call and denies another with a note, and the run goes on by itself."""

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
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        yield base + "/mcp", calls


@pytest.fixture
def careful_chat(page, login, transactional_db, mcp_server, settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True
    url, _calls = mcp_server
    user = make_user("dora", staff=True)
    space = make_space(name="Lab", admin=user)
    session = approval_session(user, space, url, ["demo__greet"])
    login(user)
    page.goto(f"/sessions/{session.pk}/")
    return page, session


def test_the_creator_approves_and_denies_from_the_chat(
    careful_chat,
    console_worker,  # noqa: F811
    mcp_server,
    screenshot,
    browser_errors,
):
    page, session = careful_chat
    _url, calls = mcp_server
    ask(page, '/tool demo__greet {"who": "Ada"}')
    wait_for_run(page, 1, "waiting_approval")
    panel = page.locator("[data-approvals]")
    expect(panel).to_contain_text("demo__greet", timeout=RUN_TIMEOUT_MS)
    expect(panel.locator("pre.arguments")).to_contain_text('"who": "Ada"')
    screenshot("console-approval")
    assert calls.calls == [], "nothing runs before the decision"
    panel.get_by_role("button", name="Approve").click()
    wait_for_run(page, 1, "succeeded")
    expect(run_block(page, 1)).to_contain_text("hello Ada", timeout=RUN_TIMEOUT_MS)
    assert calls.calls == [("greet", {"who": "Ada"})]

    ask(page, '/tool demo__greet {"who": "Mallory"}')
    wait_for_run(page, 2, "waiting_approval")
    panel = page.locator("[data-approvals]")
    expect(panel).to_contain_text("Mallory", timeout=RUN_TIMEOUT_MS)
    page.locator("[data-approval-note]").fill("not this one")
    page.wait_for_timeout(1500)  # a panel refresh keeps the note being typed
    expect(page.locator("[data-approval-note]")).to_have_value("not this one")
    panel.get_by_role("button", name="Deny").click()
    wait_for_run(page, 2, "succeeded")
    with console_worker.db():
        run = Run.objects.get(session=session, number=2)
        result = SessionMessage.objects.get(run=run, kind="tool_result").message["content"]
    assert '"status": "denied"' in result and "not this one" in result
    assert len(calls.calls) == 1, "the denied call never ran"
    assert unexpected(browser_errors) == []
