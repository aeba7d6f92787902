"""Browser fixtures: headless Chromium through Playwright against Django's live server.

Debian's `/usr/bin/chromium` is used as it is (nothing is downloaded). Tests get a `page` whose
relative URLs go to the live server, `login(user)` to sign in through the admin login form,
`space_admin` / `lab` / `admin_page` for a superuser who administers a space, `screenshot(name)`
to save `artifacts/<name>.png`, and `browser_errors`, the page's console errors and uncaught
exceptions. A failing test leaves `artifacts/failures/<test>.png` behind, and the stacks of the
process's threads beside it (`<test>.threads.txt`, also printed).
"""

from __future__ import annotations

import faulthandler
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import CHROMIUM
from tests.factories import make_space, make_user

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
# No sandbox: tests often run as root in a container, where Chromium's sandbox cannot start.
# Everything that would reach the network on its own is switched off.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]
TIMEOUT_MS = 15_000


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    # Read by the `page` fixture's teardown to keep a screenshot of a failure.
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


_REPORTS = pytest.StashKey[dict]()


@pytest.fixture(autouse=True)
def browser_settings(settings):
    """Settings a browser on plain http://localhost needs."""
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False


@pytest.fixture
def browser(monkeypatch):
    """Yield a headless Chromium; one per test, so no event loop outlives it."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, and Django's ORM refuses
    # to run where a loop runs unless told that this is safe (it is: nothing here is async).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def browser_errors() -> list[str]:
    """Console errors and uncaught exceptions of `page`, in order."""
    return []


@pytest.fixture
def page(browser, live_server, browser_errors, request):
    """Yield a page whose relative URLs go to the live server."""
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 1000}
    )
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.on("console", lambda message: _record_console(message, browser_errors))
    tab.on("pageerror", lambda error: browser_errors.append(str(error)))
    yield tab
    reports = request.node.stash.get(_REPORTS, {})
    if any(report.failed for report in reports.values()):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
        path = ARTIFACTS / "failures" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(path), full_page=True)
        # Where every thread stood (a run that never finished shows where it waits), kept and
        # printed past the capture, so that a CI log shows it too.
        with path.with_suffix(".threads.txt").open("w") as threads:
            faulthandler.dump_traceback(file=threads, all_threads=True)
        sys.__stderr__.write(f"threads at the failure of {request.node.nodeid}:\n")
        sys.__stderr__.write(path.with_suffix(".threads.txt").read_text())
    context.close()


def _record_console(message, errors: list[str]) -> None:
    # Chromium asks every site for /favicon.ico on its own; the admin has none.
    if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
        errors.append(message.text)


@pytest.fixture
def screenshot(page) -> Callable[..., Path]:
    """Return `save(name)`: save the whole page to `artifacts/<name>.png` and return the path."""

    def save(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def login(page) -> Callable[..., None]:
    """Return `login(user, password=None)`: sign in through the admin login form."""
    from playwright.sync_api import expect

    def sign_in(user, password: str | None = None) -> None:
        page.goto("/admin/login/?next=/admin/")
        page.fill("#id_username", user.username)
        # tests.factories gives every user the password "pw-<username>".
        page.fill("#id_password", password or f"pw-{user.username}")
        page.click("input[type=submit]")
        expect(page).to_have_url(re.compile(r"/admin/$"))

    return sign_in


@pytest.fixture
def lab(transactional_db):
    """A space; `space_admin` administers it."""
    return make_space(name="Lab")


@pytest.fixture
def space_admin(lab):
    """A superuser who is an admin of `lab` (services check the space role, not superuser)."""
    from agentloom.spaces.models import Membership

    user = make_user("root", superuser=True)
    Membership.objects.create(space=lab, user=user, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def admin_page(page, login, space_admin) -> Iterator:
    """Yield `page`, signed in as `space_admin`."""
    login(space_admin)
    yield page
