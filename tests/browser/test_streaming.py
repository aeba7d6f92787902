"""Streamed answers in headless Chromium: tokens before the run ends, Thinking folded, a key split
across two chunks never on the page, a cancel mid-stream that ends the run within a second.

The events stream holds a request open beside the worker thread; an in-memory SQLite database is
one connection shared by every thread, so these tests run on a file database or PostgreSQL.
"""

from __future__ import annotations

import json
import time

import pytest
from django.db import connections
from django.utils import timezone
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from sessions_app.models import ModelCall, Run
from tests.browser.conftest import ARTIFACTS
from tests.browser.test_console import Worker, ask, console_worker, run_block, wait_for_run
from tests.factories import make_connection, make_space, make_user, published_session
from tests.support.deepseek_double import DeepSeekDouble
from tests.support.provider_double import ProviderDouble

pytestmark = [pytest.mark.browser, pytest.mark.slow]
__all__ = ["Worker", "console_worker"]

SECRET = "sk-live-NONCE-stream-key-0123456789"
# Every text the live preview ever showed, and when its first character (answer or reasoning)
# appeared.
WATCH = """
window.shownTexts = [];
window.firstShown = null;
new MutationObserver(() => {
  for (const node of document.querySelectorAll("[data-live-answer]")) {
    window.shownTexts.push(node.textContent);
    const parts = node.querySelectorAll(".answer .text, .thinking pre");
    const text = [...parts].map((part) => part.textContent).join("");
    if (window.firstShown === null && text) window.firstShown = Date.now();
  }
}).observe(document, { childList: true, subtree: true, characterData: true });
"""


@pytest.fixture(autouse=True)
def file_database():
    if any(c.vendor == "sqlite" and c.is_in_memory_db() for c in connections.all()):
        pytest.skip("needs a file database (TEST_SQLITE_NAME) or PostgreSQL: see the docstring")


def streamed_chat(page, login, settings, double, provider, *, context_window=200_000):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    user = make_user("sam", staff=True)
    space = make_space(admin=user)
    connection = make_connection(
        space,
        provider=provider,
        base_url=double.base_url,
        api_key=SECRET,
        context_window=context_window,
        max_output_tokens=8_192,
        safety_margin_tokens=200,
    )
    session = published_session(
        user, space, connection, name="Streamer", title="Streamed", system_prompt="You stream."
    )
    page.add_init_script(WATCH)
    login(user)
    page.goto(f"/sessions/{session.pk}/")
    return user, session


def save_measure(name: str, value: dict) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(value, indent=1))


def test_tokens_show_before_the_run_ends_then_the_record_replaces_them(
    page, login, settings, console_worker, screenshot, browser_errors
):
    with DeepSeekDouble() as double:
        double.chunk_chars = 3
        double.chunk_delay = 0.08
        double.reasoning_padding = 120
        streamed_chat(page, login, settings, double, "deepseek")
        ask(page, "NONCE-QUESTION streamed slowly " * 3)
        live = page.locator("[data-live-answer]")
        expect(live.locator(".answer .text")).to_contain_text("You asked", timeout=20_000)
        status = run_block(page, 1).locator("[data-run-status]")
        assert status.inner_text() != "succeeded"  # on the page before the run ended
        thinking = live.locator("details.thinking")
        expect(thinking).to_be_visible()
        assert thinking.get_attribute("open") is None  # folded
        expect(thinking.locator("summary")).to_have_text("Thinking")
        screenshot("stream-growing")
        thinking.locator("summary").click()
        expect(thinking.locator("pre")).to_contain_text("thinking NONCE-R1")
        screenshot("stream-thinking-open")
        wait_for_run(page, 1)
        expect(live).to_have_count(0)
        answer = run_block(page, 1).locator(".msg.answer")
        expect(answer).to_contain_text("You asked: NONCE-QUESTION streamed slowly")
        expect(run_block(page, 1).locator("details.thinking")).to_have_count(1)  # the record's
        screenshot("stream-replaced-by-record")
        first_shown = page.evaluate("window.firstShown") / 1000
        save_measure(
            "stream-latency",
            {"first_byte_to_first_visible_ms": round((first_shown - double.first_bytes[0]) * 1000)},
        )
    assert browser_errors == []


def test_a_key_split_across_two_chunks_never_reaches_the_page(
    page, login, settings, console_worker, screenshot, browser_errors
):
    cut = len(SECRET) // 2

    def chunk(content):
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}

    with ProviderDouble() as double:
        double.chunk_delay = 0.3
        events = [chunk("NONCE-KEY the key is "), chunk(SECRET[:cut]), chunk(SECRET[cut:])]
        events += [
            chunk(" and more"),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        double.reply_stream(events)
        streamed_chat(page, login, settings, double, "openai_compatible")
        ask(page, "tell me the key")
        expect(page.locator("[data-live-answer] .text")).to_contain_text(
            "NONCE-KEY", timeout=20_000
        )
        screenshot("stream-key-held-back")
        first_shown = page.evaluate("window.firstShown") / 1000
        save_measure(
            "stream-latency-plain",
            {"first_byte_to_first_visible_ms": round((first_shown - double.first_bytes[0]) * 1000)},
        )
        wait_for_run(page, 1)
        expect(run_block(page, 1).locator(".msg.answer")).to_contain_text("[redacted] and more")
    shown = " ".join(page.evaluate("window.shownTexts"))
    assert "NONCE-KEY" in shown and "[redacted]" in shown
    assert SECRET[:cut] not in shown and SECRET[cut:] not in shown
    assert SECRET not in page.content()
    assert browser_errors == []


def test_a_cancel_mid_stream_ends_the_run_within_a_second(
    page, login, settings, console_worker, screenshot, browser_errors
):
    with ProviderDouble() as double:
        double.chunk_chars = 2
        double.chunk_delay = 0.2
        double.reply_chat(content="NONCE-SLOW " * 40)  # about 44 s of streaming
        _, session = streamed_chat(page, login, settings, double, "openai_compatible")
        ask(page, "answer slowly")
        expect(page.locator("[data-live-answer] .text")).to_contain_text("NONCE", timeout=20_000)
        screenshot("stream-before-cancel")
        asked = timezone.now()
        page.click("#cancel-run")
        wait_for_run(page, 1, "cancelled")
        expect(page.locator("[data-live-answer]")).to_have_count(0)
        screenshot("stream-cancelled")
        with console_worker.db():
            run = Run.objects.get(session=session)
            call = ModelCall.objects.get(run=run)
        ended = (run.finished_at - asked).total_seconds()
        save_measure("stream-cancel", {"cancel_to_run_end_s": round(ended, 3)})
        assert ended < 1.0
        assert call.discarded and call.cost_incomplete
        deadline = time.monotonic() + 2
        while not double.streams_cut and time.monotonic() < deadline:
            time.sleep(0.05)
        assert double.streams_cut == 1
        # Another user gets 404 for these events; Last-Event-ID resumes after the last seen.
        events_url = f"/api/v1/runs/{run.pk}/events"
        whole = page.request.get(f"{events_url}?after=0").text()
        ids = [line[4:] for line in whole.splitlines() if line.startswith("id: ")]
        resumed = page.request.get(events_url, headers={"Last-Event-ID": ids[0]}).text()
        assert resumed.count("id: ") == len(ids) - 1
    other = make_user("olga", staff=True)
    page.context.clear_cookies()
    login(other)
    assert page.request.get(events_url).status == 404
    assert [e for e in browser_errors if "404" not in e] == []


# A snapshot of the latest run at every change of the page: its visible answers, the streamed
# text in view, its status in the block and in the run box. The observer starts once the page's
# scripts have run, so it sees each change as their own observers leave it, as it is painted.
# The runs numbered in `window.followAgain` are followed a second time once their streamed text
# shows, as when the chat's session watch finds a run before the ask's answer does.
SAMPLE = """
window.liveSamples = [];
window.followAgain = [];
document.addEventListener("DOMContentLoaded", () => new MutationObserver(() => {
  const blocks = document.querySelectorAll("#conversation article.run");
  const block = blocks[blocks.length - 1];
  const summary = document.getElementById("live-summary");
  if (!block || !summary) return;
  const shown = (node) => node.getClientRects().length > 0;
  const live = [...block.querySelectorAll("[data-live-answer] .answer .text")].filter(shown);
  window.liveSamples.push({
    run: block.dataset.runId,
    answers: [...block.querySelectorAll(".msg.answer")].filter(shown).length,
    recorded: block.querySelectorAll(".msg.answer[data-seq]").length,
    live: live.map((node) => node.textContent).join("|"),
    badge: block.querySelector("[data-run-status]").textContent.trim(),
    box: summary.dataset.runId === block.dataset.runId ? summary.dataset.status : null,
  });
  const number = Number(block.querySelector(".run-head h3").textContent.replace("Run #", ""));
  if (live.length && window.followAgain.includes(number)) {
    window.followAgain.splice(window.followAgain.indexOf(number), 1);
    const detail = { runId: Number(block.dataset.runId) };
    document.dispatchEvent(new CustomEvent("agentloom:follow", { detail }));
  }
}).observe(document, { childList: true, subtree: true, characterData: true, attributes: true }));
"""


# True once run `number` has finished on the page: succeeded, its answer record in place of the
# streamed text, and Ask enabled for the next question.
RUN_SETTLED = """number => {
  const block = [...document.querySelectorAll("#conversation article.run")]
    .find((node) => node.querySelector(".run-head h3").textContent.trim() === `Run #${number}`);
  return Boolean(block)
    && block.querySelector("[data-run-status]").textContent.trim() === "succeeded"
    && Boolean(block.querySelector(".msg.answer[data-seq]"))
    && !block.querySelector("[data-live-answer]")
    && !document.getElementById("ask-button").disabled;
}"""


def stream_faults(samples: list[dict], run_id: str) -> list[str]:
    """Return what the samples of one run show going wrong: two answers at once, streamed text
    that shrank or vanished before its record, a status behind the stream."""
    faults = []
    before = ""
    for number, sample in enumerate(s for s in samples if s["run"] == run_id):
        where = f"sample {number} {sample}"
        if sample["answers"] > 1:
            faults.append(f"two answers: {where}")
        if sample["recorded"]:
            if sample["live"]:
                faults.append(f"streamed text beside its record: {where}")
            before = None  # the record replaced the streamed text
            continue
        if before is None or not sample["live"].startswith(before):
            faults.append(f"streamed text vanished or lost a prefix (was {before!r}): {where}")
            before = sample["live"] or before
            continue
        before = sample["live"]
        if sample["live"] and ("queued" in (sample["badge"], sample["box"]) or not sample["box"]):
            faults.append(f"status behind the stream: {where}")
    return faults


def test_thirty_questions_in_a_row_each_stream_once_then_their_record_replaces_them(
    page, login, settings, console_worker, browser_errors
):
    questions = 30
    with ProviderDouble() as double:
        double.chunk_chars = 3
        double.chunk_delay = 0.04
        for number in range(1, questions + 1):
            double.reply_chat(content=f"NONCE-{number:02} streamed answer, short.")
        page.add_init_script(SAMPLE)
        streamed_chat(page, login, settings, double, "openai_compatible")
        page.evaluate("window.followAgain.push(2, 12, 22)")
        faults = []
        for number in range(1, questions + 1):
            ask(page, f"question {number}")
            try:
                page.wait_for_function(RUN_SETTLED, arg=number, timeout=20_000)
            except PlaywrightTimeout:
                pytest.fail(f"run {number} never settled: succeeded, its answer in place, Ask on")
            block = run_block(page, number)
            expect(block.locator(".msg.answer")).to_contain_text(f"NONCE-{number:02} streamed")
            samples = page.evaluate("window.liveSamples.splice(0)")
            run_id = block.get_attribute("data-run-id")
            streamed = [s for s in samples if s["run"] == run_id and s["live"]]
            assert streamed, f"run {number}: no streamed text was ever on the page"
            faults += [f"run {number}: {fault}" for fault in stream_faults(samples, run_id)]
        assert page.evaluate("window.followAgain") == []  # each was followed twice
        expect(page.locator(".msg.answer")).to_have_count(questions)
        expect(page.locator("[data-live-status]")).to_have_text("succeeded")
    save_measure("stream-thirty-questions", {"faults": faults})
    assert not faults, f"{len(faults)} faults (all in artifacts): " + "\n".join(faults[:8])
    assert browser_errors == []


def test_a_summary_call_streams_as_compacting_never_as_the_answer(
    page, login, settings, console_worker, browser_errors
):
    # Long questions on a small window: the session compacts, and the summary call streams too
    # (the double answers it "You asked: <the summary request>"), but only as a notice.
    with DeepSeekDouble() as double:
        double.chunk_chars = 12
        double.chunk_delay = 0.02
        page.add_init_script(WATCH)
        _, session = streamed_chat(page, login, settings, double, "deepseek", context_window=16_000)
        number = 0
        while not ModelCall.objects.filter(run__session=session, purpose="compaction").exists():
            number += 1
            assert number <= 12, "the session compacted within twelve questions"
            ask(page, f"NONCE-Q{number:02} " + "a long question about the harbour " * 70)
            wait_for_run(page, number)
        shown = page.evaluate("window.shownTexts")
    assert any("Compacting the context…" in text for text in shown), "announced as it streamed"
    # Neither form of summary request (segmented, or the conversation with the instruction last).
    markers = ("Summary so far", "Next material", "[summary request]")
    summaries = [text for text in shown if any(marker in text for marker in markers)]
    assert summaries == [], summaries[:3]
    assert browser_errors == []
