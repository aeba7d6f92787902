"""The usage page in Chromium: its charts keep to the policy, follow a dark scheme, fit 390 px."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from sessions_app.models import UsageDay
from tests.browser.test_comfort import OVERFLOW, PHONE
from tests.browser.test_csp import LISTEN

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_usage_charts_keep_to_the_policy_in_the_dark_and_at_390_px(
    admin_page, lab, space_admin, screenshot, browser_errors
):
    page = admin_page
    page.context.add_init_script(LISTEN)
    today = datetime.datetime.now(datetime.UTC).date()
    for back in range(0, 30, 3):
        UsageDay.objects.create(
            space=lab,
            day=today - datetime.timedelta(days=back),
            agent_id=1,
            member_id=space_admin.pk,
            model="gpt-5.4-a-rather-long-model-name-for-a-narrow-screen",
            currency="USD",
            calls=10 + back,
            input_tokens=40_000 + 1_000 * back,
            cached_tokens=30_000,
            output_tokens=5_000,
            cost=Decimal("0.25"),
            runs_succeeded=5,
            runs_failed=back % 2,
            summaries=1,
        )
    page.goto(f"/usage/?space={lab.pk}")
    page.wait_for_load_state("networkidle")
    assert page.locator("svg.chart").count() == 3
    assert page.locator("svg.chart rect").count() > 20
    assert page.evaluate("window.__cspViolations") == []
    background = "getComputedStyle(document.body).backgroundColor"
    bar = "getComputedStyle(document.querySelector('svg.chart rect')).fill"
    light_bar = page.evaluate(bar)
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(background)
    assert sum(int(part) for part in dark[4:-1].split(",")) < 200
    assert page.evaluate(bar) != light_bar
    screenshot("usage-dark")
    page.set_viewport_size(PHONE)
    assert page.evaluate(OVERFLOW) <= 0
    screenshot("usage-phone")
    assert [error for error in browser_errors if "Content Security Policy" in error] == []
