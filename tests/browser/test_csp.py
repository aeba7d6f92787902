"""The Content-Security-Policy holds in a real browser: no page of the console, the admin or the
API docs trips it, and the pages still work under it (scripts run, the meter is drawn)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import ask, chat, console_worker, demo_session, wait_for_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chat", "console_worker", "demo_session"]  # fixtures shared with test_console

# Recorded in the page before any of its own code runs; Playwright's init script is not subject
# to the page's policy.
LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def _violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations || []")


def _visit(page, path: str) -> list[str]:
    page.goto(path)
    page.wait_for_load_state("networkidle")
    return _violations(page)


def test_console_admin_and_docs_pages_keep_to_the_policy(
    chat, console_worker, demo_session, browser_errors
):
    page = chat
    page.context.add_init_script(LISTEN)
    _, session = demo_session
    ask(page, '/tool echo {"text": "<img src=x onerror=alert(1)>"}')
    wait_for_run(page, 1)
    run_id = page.locator(".run[data-run-id]").first.get_attribute("data-run-id")
    found, width = {}, None
    for path in (
        "/",
        f"/sessions/{session.pk}/",
        f"/sessions/{session.pk}/journal/",
        f"/runs/{run_id}/context/",
        "/admin/",
        "/admin/sessions_app/session/",
        f"/admin/sessions_app/session/{session.pk}/change/",
        "/api/docs/",
    ):
        found[path] = _visit(page, path)
        if path.startswith("/runs/"):
            # console.js ran and drew the meter from its data attributes.
            width = page.locator("[data-meter-fill]").evaluate(
                "node => parseFloat(node.style.width)"
            )
        if path == "/api/docs/":
            # Swagger UI started from its script file and loaded the schema.
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("AgentLoom API")
    assert found == {path: [] for path in found}
    assert width > 0
    refused = [error for error in browser_errors if "Content Security Policy" in error]
    assert refused == []
    # The page header really is there (the listener would see nothing without a policy).
    response = page.request.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
