"""The Context page's cached-share chart in Chromium: it keeps to the policy, follows a dark
scheme and fits 390 px, with a run whose calls reported no usage drawn as unknown."""

from __future__ import annotations

import pytest

from sessions_app.models import ModelCall
from tests.browser.test_comfort import OVERFLOW, PHONE
from tests.browser.test_csp import LISTEN
from tests.factories import ask, make_connection, published_session

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_cached_share_chart_keeps_to_the_policy_in_the_dark_and_at_390_px(
    admin_page, lab, space_admin, screenshot, browser_errors
):
    page = admin_page
    page.context.add_init_script(LISTEN)
    session = published_session(
        space_admin, lab, make_connection(lab), name="Cache", title="Cached share"
    )
    runs = [ask(session, space_admin, f"question {n}") for n in range(6)]
    for number, run in enumerate(runs[:-1]):
        ModelCall.objects.filter(run=run).update(
            reported_prompt_tokens=1_000, cached_tokens=200 * number
        )
    ModelCall.objects.filter(run=runs[-1]).update(reported_prompt_tokens=None, usage=None)
    page.goto(f"/runs/{runs[-1].pk}/context/")
    page.wait_for_load_state("networkidle")
    chart = page.locator(".cache-chart svg.chart")
    assert chart.locator("rect.series-0").count() == 4  # run 1 was 0% cached: no bar
    assert chart.locator("rect.unknown").count() == 1
    assert page.locator("#cache-runs tbody tr").count() == 6
    assert page.evaluate("window.__cspViolations") == []
    background = "getComputedStyle(document.body).backgroundColor"
    bar = "getComputedStyle(document.querySelector('.cache-chart rect.series-0')).fill"
    outline = "getComputedStyle(document.querySelector('.cache-chart rect.unknown'))"
    light_bar = page.evaluate(bar)
    assert page.evaluate(f"{outline}.fill") == "none"
    assert page.evaluate(f"{outline}.strokeDasharray") != "none"
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(background)
    assert sum(int(part) for part in dark[4:-1].split(",")) < 200
    assert page.evaluate(bar) != light_bar
    screenshot("context-cache-dark")
    page.set_viewport_size(PHONE)
    assert page.evaluate(OVERFLOW) <= 0
    assert chart.bounding_box()["width"] <= PHONE["width"]
    screenshot("context-cache-phone")
    assert [error for error in browser_errors if "Content Security Policy" in error] == []
