"""The console in headless Chromium against a live server, with an in-process worker.

Runs are not sent to a broker in tests (`queued_runs` collects their ids); the `console_worker`
fixture executes them in a thread, as a Celery worker would, so pages see runs progress live.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time

import pytest
from django.contrib.auth.models import Permission
from django.db import connections, transaction
from playwright.sync_api import expect

from agentloom.engine import LocalDemoGateway
from agentloom.engine._tools import SleepTool
from context_app.models import Agent
from context_app.services.agents import agent_create, agent_publish
from sessions_app.demo import DEMO_AGENT_NAME, ensure_demo
from sessions_app.events import RunFeed
from sessions_app.models import SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.runs import run_ask, session_create
from tests.factories import make_connection, make_user

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_TIMEOUT_MS = 30_000


class Worker:
    """What `console_worker` yields: the run ids it executed, and `db()` for the test's reads."""

    def __init__(self, gate: threading.RLock | None):
        self.executed: list[int] = []
        self.failures: list[BaseException] = []
        self._gate = gate

    def db(self):
        """Return a context in which the test thread may use the database."""
        return self._gate if self._gate is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def gate_open(self):
        """Let pages use the database while the worker thread waits inside a run."""
        if self._gate is None:
            yield
            return
        self._gate.release()
        try:
            yield
        finally:
            self._gate.acquire()


def _shared_memory_connections() -> dict:
    """Return the in-memory SQLite connections, which every thread must share (by alias)."""
    return {
        conn.alias: conn
        for conn in connections.all()
        if conn.vendor == "sqlite" and conn.is_in_memory_db()
    }


@contextlib.contextmanager
def _gated(live_server, gate: threading.RLock, shared: dict, monkeypatch):
    """Let one thread at a time use the shared connections: a request, a run between tool
    calls, an events-stream poll; a run sleeping in the `sleep` tool opens the gate."""
    httpd = live_server.thread.httpd
    app = httpd.get_app()

    def gated_app(environ, start_response):
        with gate:
            return app(environ, start_response)

    slow_run = SleepTool.run_in

    def sleep_with_gate_open(self, arguments, context):
        gate.release()
        try:
            return slow_run(self, arguments, context)
        finally:
            gate.acquire()

    # The run's events stream reads the database after its answer has begun, outside the
    # request's gate: each of its polls takes the gate instead.
    poll_events = RunFeed.poll

    def poll_with_gate(self):
        with gate:
            return poll_events(self)

    httpd.set_app(gated_app)
    monkeypatch.setattr(SleepTool, "run_in", sleep_with_gate_open)
    monkeypatch.setattr(RunFeed, "poll", poll_with_gate)
    for conn in shared.values():
        conn.inc_thread_sharing()
    try:
        yield
    finally:
        httpd.set_app(app)
        for conn in shared.values():
            conn.dec_thread_sharing()


def _work(worker: Worker, queued_runs: list, shared: dict, stop: threading.Event) -> None:
    """Execute queued runs until `stop`, as a Celery worker would; keep what they raised."""
    for alias, conn in shared.items():
        connections[alias] = conn
    try:
        while not stop.is_set():
            try:
                run_id = queued_runs.pop(0)
            except IndexError:
                stop.wait(0.05)
                continue
            try:
                with worker.db():
                    run_execute(run_id=run_id)
            except BaseException as error:  # reported by the test, not lost in a thread
                worker.failures.append(error)
            worker.executed.append(run_id)
    finally:
        if not shared:
            connections.close_all()


@pytest.fixture
def console_worker(transactional_db, live_server, queued_runs, monkeypatch):
    """Execute queued runs in a thread beside the live server, as a Celery worker would.

    With a file database or PostgreSQL the thread has its own connection, like a real worker.
    An in-memory SQLite database cannot be opened twice: the live server, its request threads
    and this thread all share the test's one connection, and one connection used by two threads
    at once fails ("database table is locked"). So in that case a gate lets one thread at a
    time use it: a whole request, or a run between tool calls. Sleeping in the `sleep` tool
    opens the gate, so pages can poll and send supplements while a run waits.
    """
    shared = _shared_memory_connections()
    gate = threading.RLock() if shared else None
    worker = Worker(gate)
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        if gate is not None:
            stack.enter_context(_gated(live_server, gate, shared, monkeypatch))
        thread = threading.Thread(
            target=_work, args=(worker, queued_runs, shared, stop), name="console-worker"
        )
        thread.daemon = True
        thread.start()
        yield worker
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the worker thread did not stop"
    assert not worker.failures, worker.failures


@pytest.fixture
def demo_session(transactional_db):
    """Return a staff user (the admin login form admits staff only) and a demo session.

    The demo agent has every built-in tool, a `researcher` sub-agent, and a window small enough
    to compact within a few questions.
    """
    user = make_user("dora", staff=True)
    space = ensure_demo(owner=user)
    version = Agent.objects.get(space=space, name=DEMO_AGENT_NAME).versions.get()
    return user, session_create(user=user, agent_version=version, title="Demo chat")


@pytest.fixture
def chat(page, login, demo_session):
    """Return the demo session's chat page, signed in as its creator."""
    user, session = demo_session
    login(user)
    page.goto(f"/sessions/{session.pk}/")
    return page


def ask(page, question: str) -> None:
    page.fill("#question", question)
    page.click("#ask-form button[type=submit]")


def run_block(page, number: int):
    return page.locator(".run", has=page.locator("h3", has_text=f"Run #{number}"))


def wait_for_run(page, number: int, status: str = "succeeded") -> None:
    badge = run_block(page, number).locator("[data-run-status]")
    expect(badge).to_have_text(status, timeout=RUN_TIMEOUT_MS)


def unexpected(errors: list[str]) -> list[str]:
    """Return browser errors other than the refusals a test provoked on purpose (409)."""
    return [error for error in errors if "status of 409" not in error]


def test_an_answer_appears_without_reload(chat, console_worker, browser_errors):
    page = chat
    page.evaluate("window.sameDocument = true")

    ask(page, '/tool echo {"text": "NONCE-ECHO <b>bold</b>"}')

    wait_for_run(page, 1)
    answer = run_block(page, 1).locator(".msg.answer")
    expect(answer).to_contain_text("NONCE-ECHO <b>bold</b>")  # as text, not markup
    expect(page.locator("#conversation b")).to_have_count(0)
    expect(page.locator("[data-live-status]")).to_have_text("succeeded")
    expect(page.locator("[data-live-tools]")).to_have_text("1 (last: echo)")
    # This run's counts and the session's are labelled apart: a tool call and the answer.
    expect(page.locator("[data-live-run-steps]")).to_have_text("2")
    expect(page.locator("#run-counts")).to_have_text("This run")
    expect(page.locator("#session-counts")).to_have_text("Session so far")
    expect(page.locator("[data-context-link]")).to_be_visible()
    assert page.evaluate("window.sameDocument") is True
    assert unexpected(browser_errors) == []


def test_a_supplement_sent_during_a_run_follows_the_tool_group(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session

    # Long enough for the supplement below to arrive while the tool runs on a loaded machine
    # (arriving after it, the supplement is answered after the first answer instead).
    ask(page, '/tool sleep {"seconds": 6}')
    # The call is journaled before the tool runs: the page shows it while the run sleeps.
    expect(page.locator(".records .tool-calls")).to_have_count(1, timeout=RUN_TIMEOUT_MS)
    expect(page.locator("[data-live-tools]")).to_have_text("1 (running sleep)")
    page.fill("#supplement-text", "NONCE-SUPP consider this too")
    page.click("#supplement-form button[type=submit]")
    # The confirmation sits next to the button pressed.
    expect(page.locator("#supplement-notice")).to_contain_text("Supplement 1 queued")

    # No second question while the run is active: Ask is disabled, and Enter does nothing.
    expect(page.locator("#ask-button")).to_be_disabled()
    page.fill("#question", "a second question")
    page.press("#question", "Enter")
    expect(page.locator("#active-hint")).to_be_visible()

    wait_for_run(page, 1)
    expect(page.locator("#ask-button")).to_be_enabled()
    expect(page.locator("#supplement-notice")).to_be_hidden()
    expect(page.locator(".msg.supplement")).to_contain_text("NONCE-SUPP")
    shown = run_block(page, 1).locator(".records > *")
    classes = shown.evaluate_all("nodes => nodes.map(n => n.className)")
    assert classes == [
        "tool-calls",
        "tool-result",
        "msg supplement",
        "msg answer",
        "status-line",
    ], classes
    screenshot("console-chat")

    with console_worker.db():
        kinds = list(
            SessionMessage.objects.filter(session=session)
            .order_by("seq")
            .values_list("kind", flat=True)
        )
        assert session.runs.count() == 1
    assert kinds == ["user_input", "assistant", "tool_result", "supplement", "assistant", "status"]

    page.click("nav.tabs >> text=Journal")
    badges = page.locator("#timeline li.rec .badge.kind")
    expect(badges).to_have_count(6)
    assert badges.all_text_contents() == kinds
    assert unexpected(browser_errors) == []


def test_a_cancelled_run_can_be_resumed_from_the_chat(chat, console_worker, browser_errors):
    page = chat
    ask(page, '/tool sleep {"seconds": 20}')
    expect(page.locator(".records .tool-calls")).to_have_count(1, timeout=RUN_TIMEOUT_MS)

    page.click("#cancel-run")
    # Until its safe point the run is still running, and the button says it is cancelling.
    expect(page.locator("#cancel-run")).to_have_text("Cancelling…")
    expect(page.locator("#cancel-notice")).to_have_text(
        "Cancel requested: the run stops at its next safe point."
    )
    # The sleep receives the cancellation and stops: far sooner than its 20 seconds.
    wait_for_run(page, 1, "cancelled")
    expect(page.locator("#run-controls")).to_be_hidden()
    resume = run_block(page, 1).locator("[data-resume]")
    expect(resume).to_be_visible()

    resume.click()
    wait_for_run(page, 1)
    block = run_block(page, 1)
    expect(block.locator("[data-run-attempt]")).to_have_text("attempt 2")
    expect(block.locator(".status-line .badge")).to_have_text(["cancelled", "succeeded"])
    # The interrupted sleep is reported as cancelled, never as done.
    expect(block.locator(".msg.answer")).to_contain_text('sleep: {"status": "cancelled"')
    expect(resume).to_be_hidden()
    assert unexpected(browser_errors) == []


def test_the_journal_search_box_ranks_records_and_appends_nothing(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session
    ask(page, '/tool echo {"text": "NONCE-FIND stored at /srv/app/settings.toml"}')
    wait_for_run(page, 1)
    page.goto(f"/sessions/{session.pk}/journal/")
    page.fill("#journal-q", "/srv/app/settings.toml")
    page.press("#journal-q", "Enter")
    page.wait_for_url("**/journal/?*q=*")
    expect(page.locator("#search-summary")).to_contain_text("match")
    rows = page.locator("#timeline li.rec")
    # The question, the call, its result and the answer that cites it; the status holds none.
    expect(rows).to_have_count(4)
    assert "kind-status" not in " ".join(rows.evaluate_all("rows => rows.map(r => r.className)"))
    screenshot("console-journal-search")
    page.click("#search-summary >> text=Back to the timeline")
    expect(rows).to_have_count(5)
    assert unexpected(browser_errors) == []


def test_the_viewer_filters_a_child_instance_and_loads_more(
    chat, console_worker, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session
    ask(page, '/tool delegate_researcher {"task": "/tool echo {\\"text\\": \\"NONCE-CHILD\\"}"}')
    wait_for_run(page, 1)

    page.click("nav.tabs >> text=Journal")
    rows = page.locator("#timeline li.rec")
    expect(rows).to_have_count(10)  # main: 5 records; child 1.1: 5 records
    expect(page.locator("#timeline li.run-boundary")).to_have_count(1)
    page.select_option("#instance", "1.1")  # the script submits the filter form
    page.wait_for_url("**/journal/?instance=1.1")
    # The child's question, tool call, tool result, answer and status.
    expect(rows).to_have_count(5)
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.instance)") == ["1.1"] * 5
    result = page.locator("li.rec.kind-tool_result details")
    expect(result.locator("pre")).not_to_be_visible()  # collapsed until asked for
    result.locator("summary").click()
    expect(result.locator("pre")).to_have_text("NONCE-CHILD")
    screenshot("console-journal-child")

    # Paging: two records a page; "Load more" appends the rows the server renders next, and
    # disappears with the last of them.
    page.goto(f"/sessions/{session.pk}/journal/?limit=2")
    expect(rows).to_have_count(2)
    for shown in (4, 6, 8, 10):
        page.click("#load-more")
        expect(rows).to_have_count(shown)
    expect(page.locator("#journal-end")).to_be_visible()
    # One run: its heading is shown once, not again with each page.
    expect(page.locator("#timeline li.run-boundary")).to_have_count(1)
    expect(page.locator("#load-more")).to_be_hidden()
    seqs = rows.evaluate_all("rows => rows.map(r => Number(r.dataset.seq))")
    assert seqs == list(range(1, 11))
    assert unexpected(browser_errors) == []


# Asks the questions given to `window.askAtOnce` one by one, each the moment Ask is enabled (a
# user pressing Enter at once), while the chat's record fragments arrive `window.recordsDelay` ms
# late, as over a slow link.
ASK_AT_ONCE = """
window.recordsDelay = 0;
const fetchNow = window.fetch;
window.fetch = async (...args) => {
  const response = await fetchNow(...args);
  if (String(args[0]).includes("/records/")) {
    await new Promise((done) => setTimeout(done, window.recordsDelay));
  }
  return response;
};
document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("ask-button");
  const waiting = [];
  const next = () => {
    if (button.disabled || !waiting.length) return;
    document.getElementById("question").value = waiting.shift();
    button.click();
  };
  new MutationObserver(next).observe(button, { attributes: true, attributeFilter: ["disabled"] });
  window.askAtOnce = (questions) => {
    waiting.push(...questions);
    next();
  };
});
"""


def test_a_question_asked_the_moment_a_run_ends_is_followed_to_its_end(
    chat, console_worker, browser_errors
):
    page = chat
    page.add_init_script(ASK_AT_ONCE)
    page.reload()
    page.evaluate("window.recordsDelay = 300")
    page.evaluate("questions => window.askAtOnce(questions)", [f"NONCE-{n}" for n in range(1, 6)])
    for number in range(1, 6):
        wait_for_run(page, number)
        expect(run_block(page, number).locator(".msg.answer")).to_have_count(1)
    expect(page.locator("#ask-button")).to_be_enabled()
    expect(page.locator("[data-live-status]")).to_have_text("succeeded")
    assert unexpected(browser_errors) == []


def test_the_context_page_shows_the_meter_and_compaction_history(
    chat, console_worker, screenshot, browser_errors
):
    page = chat
    # The demo window is small: a few large tool results make the run compact its view.
    for number in range(1, 6):
        ask(page, '/tool big_output {"chars": 600}')
        wait_for_run(page, number)
        run_id = run_block(page, number).get_attribute("data-run-id")
        context = page.request.get(f"/api/v1/runs/{run_id}/context").json()
        if any(item["outcome"] == "succeeded" for item in context["compactions"]):
            break
    else:
        pytest.fail("the demo agent never compacted")
    expect(page.locator("[data-meter-compactions]")).not_to_have_text("0")
    # The chat marks each successful compaction where it happened, live and once reloaded.
    succeeded = [
        index
        for index, item in enumerate(context["compactions"], start=1)
        if item["outcome"] == "succeeded"
    ]
    marks = run_block(page, number).locator(".compaction-mark")
    expect(marks).to_have_count(len(succeeded))
    page.reload()
    expect(marks).to_have_count(len(succeeded))
    # The page opens at the latest run.
    expect(run_block(page, number).locator(".run-head")).to_be_in_viewport()
    marks.last.scroll_into_view_if_needed()
    screenshot("console-chat-compaction-mark")
    marks.last.locator("a").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run_id}/context/#compaction-{succeeded[-1]}$"))
    row = page.locator(f"#compaction-{succeeded[-1]}")
    expect(row).to_be_visible()
    assert row.evaluate("row => row.matches(':target')")
    expect(row.locator(".badge")).to_have_text("succeeded")
    page.go_back()

    page.click("[data-context-link]")
    expect(page.locator("h1")).to_contain_text(f"Context of run #{number}")
    meter = page.locator("[data-meter]")
    expect(meter.locator("[data-meter-estimate]")).to_have_text(f"{context['estimate']:,}")
    expect(meter.locator("[data-meter-budget]")).to_have_text(f"{context['effective_budget']:,}")
    expect(meter.locator("[data-meter-trigger-at]")).to_have_text(f"{context['trigger_at']:,}")
    expect(meter.locator("[data-meter-target-at]")).to_have_text(f"{context['target_at']:,}")
    width = meter.locator("[data-meter-fill]").evaluate("node => parseFloat(node.style.width)")
    assert 0 < width <= 100
    history = page.locator("#compactions tbody tr")
    expect(history).to_have_count(len(context["compactions"]))
    expect(history.first.locator(".badge")).to_have_text("succeeded")
    summarised = any(
        item["stage"] == "summary" and item["outcome"] == "succeeded"
        for item in context["compactions"]
    )
    # A summary, and from compaction version 5 a masking too, saves a reusable view.
    assert summarised or any(item["stage"] == "masking" for item in context["compactions"])
    expect(page.locator("#session-views tbody tr").first).to_contain_text("r1")
    # The first stage masks older tool results without a call; a summary is a compaction call.
    if any(item["stage"] == "summary" for item in context["compactions"]):
        expect(page.locator("#model-calls")).to_contain_text("compaction")
    expect(page.locator(".view-messages")).to_contain_text(
        re.compile("handoff summary|hidden to save room")
    )
    screenshot("console-context")

    # On a phone the page never scrolls sideways: wide tables scroll inside their box.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("#compactions")).to_be_visible()
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')]
        .filter(n => n.getBoundingClientRect().right > 391 && !n.closest('.table-scroll'))
        .map(n => `${n.tagName}.${n.className}#${n.id}`)
        .slice(0, 15)"""
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, wide
    screenshot("console-context-phone")
    assert unexpected(browser_errors) == []


def test_pages_keep_hostile_text_inert(chat, console_worker, demo_session, browser_errors):
    """Markup in a question and a tool result stays text, live and as rendered by the server."""
    page = chat
    _, session = demo_session
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    ask(page, f"/tool echo {json.dumps({'text': hostile})} {hostile}")
    wait_for_run(page, 1)
    run_block(page, 1).locator(".tool-result summary").click()
    for path in (None, "", "journal/"):
        if path is not None:
            page.goto(f"/sessions/{session.pk}/{path}")
        expect(page.locator("#content")).to_contain_text("<script>alert(2)</script>")
        markup = page.locator('#content img, #content script:not([type="application/json"])')
        expect(markup).to_have_count(0)
    time.sleep(0.5)  # an injected handler would have fired by now
    assert dialogs == []
    assert unexpected(browser_errors) == []


def test_publish_from_the_admin_then_chat_with_the_new_version(
    page, login, demo_session, console_worker, screenshot, browser_errors
):
    user, session = demo_session
    with console_worker.db():
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label="context_app"))
        agent = session.agent
        Agent.objects.create(space=agent.space, owner=user, name="Notes drafter")
    login(user)

    # The home lists the new draft as not published yet.
    page.goto("/")
    draft = page.locator("tr.draft-agent", has_text="Notes drafter")
    expect(draft.locator(".not-published")).to_contain_text("Not published yet.")
    screenshot("console-home-draft")

    page.goto(f"/admin/context_app/agent/{agent.pk}/change/")
    expect(page.locator(".field-publication")).to_contain_text("Published as v1")
    page.fill("#id_system_prompt", "NONCE-PROMPT-V2 You answer briefly.")
    page.click("#publish-button")
    expect(page.locator(".messagelist")).to_contain_text(f"Published {agent.name} as v2.")
    expect(page.locator(".field-publication")).to_contain_text("Published as v2")
    screenshot("admin-agent-published")

    page.locator(".messagelist a", has_text="console").click()
    row = page.locator("tr", has_text=agent.name).filter(has=page.locator("button"))
    expect(row).to_contain_text("v2")
    row.locator("button", has_text="New session").click()
    expect(page.locator(".binding")).to_contain_text("v2")

    # Enter sends; Shift+Enter breaks the line. The session is titled from the question.
    page.click("#question")
    page.keyboard.type("What is in version two?")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("Second line")
    expect(page.locator("#question")).to_have_value("What is in version two?\nSecond line")
    page.keyboard.press("Enter")
    wait_for_run(page, 1)
    expect(run_block(page, 1).locator(".msg.question")).to_contain_text("Second line")
    page.reload()
    expect(page.locator("h1")).to_have_text("What is in version two?")
    screenshot("console-chat-new-version")
    assert unexpected(browser_errors) == []


def test_the_thinking_indicator_shows_while_the_model_is_asked(
    chat, console_worker, monkeypatch, screenshot, browser_errors
):
    page = chat
    asked = threading.Event()
    answer = threading.Event()
    reply = LocalDemoGateway.complete

    def slow_complete(self, request):
        if request.purpose == "action" and "NONCE-SLOW" in json.dumps(request.messages):
            asked.set()
            with console_worker.gate_open():
                answer.wait(RUN_TIMEOUT_MS / 1000)
        return reply(self, request)

    monkeypatch.setattr(LocalDemoGateway, "complete", slow_complete)
    thinking = page.locator("#thinking")
    expect(thinking).to_be_hidden()
    ask(page, "NONCE-SLOW take your time")
    assert asked.wait(RUN_TIMEOUT_MS / 1000)
    expect(thinking).to_be_visible()
    expect(thinking).to_have_text("Model is thinking…")
    expect(page.locator("#ask-button")).to_be_disabled()
    screenshot("console-chat-thinking")
    answer.set()
    wait_for_run(page, 1)
    expect(thinking).to_be_hidden()
    expect(page.locator("#ask-button")).to_be_enabled()
    assert unexpected(browser_errors) == []


def test_a_session_is_renamed_and_deleted_from_the_chat(
    chat, demo_session, screenshot, browser_errors
):
    page = chat
    _, session = demo_session
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#session-actions summary")
    page.fill("#session-title", "NONCE-RENAMED chat")
    screenshot("console-chat-rename")
    page.click("#rename-form button")
    expect(page.locator("h1")).to_have_text("NONCE-RENAMED chat")
    expect(page.locator(".messagelist")).to_contain_text("Renamed to “NONCE-RENAMED chat”.")

    page.click("#session-actions summary")
    page.click("#delete-form button")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(page.locator(".messagelist")).to_contain_text("Deleted “NONCE-RENAMED chat”.")
    sessions = page.locator("section[aria-labelledby=sessions-title]")
    expect(sessions).to_contain_text("No sessions yet.")
    screenshot("console-home-after-delete")
    assert unexpected(browser_errors) == []
    assert page.goto(f"/sessions/{session.pk}/").status == 404


def test_the_login_fields_are_one_width(page, screenshot):
    page.goto("/accounts/login/")
    widths = [
        page.locator(selector).bounding_box()["width"]
        for selector in ("#id_username", "#id_password")
    ]
    assert widths[0] == widths[1], widths
    screenshot("console-login")


def test_the_agent_form_round_trip_shows_a_refusal_on_its_field(
    admin_page, lab, space_admin, screenshot, browser_errors
):
    page = admin_page
    connection = make_connection(lab, name="Demo connection")
    page.goto("/admin/context_app/agent/add/")
    # A new agent starts from the default policy.
    expect(page.locator("#id_context_ratio")).to_have_value("0.8")
    expect(page.locator("#id_target_ratio")).to_have_value("0.6")
    expect(page.locator("#id_user_turns")).to_have_value("")
    page.select_option("#id_space", str(lab.pk))
    page.select_option("#id_owner", str(space_admin.pk))
    page.fill("#id_name", "Form agent")
    page.select_option("#id_model_connection", str(connection.pk))
    page.check("input[name=tools][value=echo]")
    page.check("input[name=tools][value=calculator]")
    page.fill("#id_sub_agents-0-name", "checker")
    page.fill("#id_sub_agents-0-description", "Checks sums.")
    page.check("input[name='sub_agents-0-tools'][value=calculator]")
    page.fill("#id_target_ratio", "0.9")
    page.click("input[name=_continue]")

    error = page.locator(".field-target_ratio .errorlist")
    expect(error).to_have_text("Target share must be below the trigger share.")
    expect(page.locator(".errorlist")).to_have_count(1)
    screenshot("admin-agent-form-error")

    page.fill("#id_target_ratio", "0.5")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    expect(page.locator("input[name=tools][value=calculator]")).to_be_checked()
    expect(page.locator("input[name=tools][value=fail]")).not_to_be_checked()
    expect(page.locator("#id_sub_agents-0-name")).to_have_value("checker")
    expect(page.locator("input[name='sub_agents-0-tools'][value=calculator]")).to_be_checked()
    expect(page.locator("#id_target_ratio")).to_have_value("0.5")
    expect(page.locator(".field-publication")).to_contain_text("Not published yet")
    screenshot("admin-agent-form-saved")
    with transaction.atomic():
        agent = Agent.objects.get(name="Form agent")
    assert agent.sub_agents[0]["tools"] == ["calculator"]
    assert agent.context_policy["target_ratio"] == 0.5
    assert browser_errors == []


def test_admin_records_read_as_trees_and_link_to_the_console(
    admin_page, lab, space_admin, screenshot, browser_errors
):
    page = admin_page
    connection = make_connection(lab, name="Demo connection")
    agent = agent_create(
        user=space_admin,
        space=lab,
        name="Tree agent",
        model_connection=connection.pk,
        tools=["echo"],
    )
    version = agent_publish(user=space_admin, agent=agent)
    session = session_create(user=space_admin, agent_version=version)
    run = run_ask(user=space_admin, session=session, question='/tool echo {"text": "NONCE-T"}')
    run_execute(run_id=run.pk)

    page.goto(f"/admin/sessions_app/run/{run.pk}/change/")
    tree = page.locator(".field-checkpoint_tree .json-tree")
    expect(tree).to_be_visible()
    expect(tree.locator("details.json-node").first).to_have_attribute("open", "")
    screenshot("admin-run-checkpoint")

    page.locator(".field-console a", has_text="Context").click()
    expect(page.locator("h1")).to_contain_text("Context of run #1")
    page.locator("a.admin-link", has_text="This run in the admin").click()
    expect(page).to_have_url(re.compile(rf"/admin/sessions_app/run/{run.pk}/change/$"))

    # A model call's admin page and its row on the Context page link to each other.
    page.goto(f"/runs/{run.pk}/context/")
    page.locator("#model-calls tbody tr").first.locator("a").click()
    expect(page.locator(".field-response_tree .json-tree")).to_contain_text("NONCE-T")
    screenshot("admin-model-call-response")
    page.locator(".field-console a").click()
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/context/#model-call-\d+$"))
    assert browser_errors == []
