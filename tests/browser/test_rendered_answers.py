"""Rendered answers in a real browser: markdown drawn safely under the policy, copy buttons that
copy, long messages collapsed until "Show all"."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from tests.browser.test_console import (
    ask,
    chat,
    console_worker,
    demo_session,
    run_block,
    unexpected,
    wait_for_run,
)
from tests.browser.test_csp import LISTEN

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chat", "console_worker", "demo_session"]  # fixtures shared with test_console

QUESTION = (
    "Here is **bold** and a list:\n\n- one\n- two\n\n"
    "```python\nprint('NONCE-CODE')\n```\n\n"
    "[click me](javascript:alert(1)) [docs](https://example.org/docs) "
    "<img src=x onerror=alert(2)>"
)


def test_markdown_with_code_and_a_malicious_link_is_rendered_safely(
    chat, console_worker, browser_errors, screenshot
):
    page = chat
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.context.add_init_script(LISTEN)
    page.reload()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    ask(page, QUESTION)
    wait_for_run(page, 1)
    answer = run_block(page, 1).locator(".msg.answer .markdown")
    expect(answer.locator("strong")).to_have_text("bold")
    expect(answer.locator("li")).to_have_count(2)
    expect(answer.locator(".code-block code")).to_have_text("print('NONCE-CODE')\n")
    # The javascript: link is left as text; the https one is a link that opens nothing here.
    expect(answer.locator("a")).to_have_count(1)
    expect(answer.locator("a")).to_have_attribute("href", "https://example.org/docs")
    expect(answer).to_contain_text("[click me](javascript:alert(1))")
    expect(page.locator("#conversation img")).to_have_count(0)
    screenshot("rendered-answer")

    answer.locator(".code-block [data-copy]").click()
    expect(answer.locator(".code-block [data-copy]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "print('NONCE-CODE')\n"
    run_block(page, 1).locator(".msg.answer > .text-block > [data-copy]").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "**bold**" in copied and "```python" in copied  # the message as written

    # Served by the server once more, on a reload, the same.
    page.reload()
    expect(run_block(page, 1).locator(".msg.answer .markdown strong")).to_have_text("bold")
    time.sleep(0.3)
    assert dialogs == []
    assert page.evaluate("window.__cspViolations") == []
    assert unexpected(browser_errors) == []


def test_a_long_tool_result_is_collapsed_until_show_all(chat, console_worker, screenshot):
    page = chat
    ask(page, '/tool big_output {"chars": 3000}')
    wait_for_run(page, 1)
    result = run_block(page, 1).locator(".tool-result")
    result.locator("summary").click()
    block = result.locator("[data-text-block]")
    expect(block).to_have_class("text-block collapsed")
    height = block.evaluate("node => node.getBoundingClientRect().height")
    screenshot("long-result-collapsed")
    result.locator("[data-show-all]").click()
    expect(block).to_have_class("text-block")
    assert block.evaluate("node => node.getBoundingClientRect().height") > 2 * height
    expect(result.locator("[data-show-all]")).to_have_text("Show less")
    screenshot("long-result-shown")
