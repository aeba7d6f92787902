"""A space's page in Chromium: an admin previews a retention rule, then saves it, within the
policy and at 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_comfort import OVERFLOW, PHONE
from tests.browser.test_csp import LISTEN

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_admin_previews_then_saves_a_retention_rule(
    admin_page, lab, space_admin, browser_errors
):
    page = admin_page
    page.context.add_init_script(LISTEN)
    page.goto("/")
    page.click(f"a[href='/spaces/{lab.pk}/']")
    expect(page.locator("#retention-rule")).to_contain_text("kept")
    page.fill("#retention-days", "30")
    page.click("#retention-preview-form button")
    expect(page.locator("#retention-preview")).to_contain_text("would delete 0 sessions now")
    page.click("#retention-form button")
    expect(page.locator(".messagelist")).to_contain_text("Rule saved")
    expect(page.locator("#retention-rule")).to_contain_text("30 days after their last run")
    expect(page.locator("#retention-rule")).to_contain_text("Set by root")
    lab.refresh_from_db()
    assert (lab.retention_days, lab.retention_set_by) == (30, space_admin)
    page.set_viewport_size(PHONE)
    assert page.evaluate(OVERFLOW) <= 0
    assert page.evaluate("window.__cspViolations") == []
    assert browser_errors == []
