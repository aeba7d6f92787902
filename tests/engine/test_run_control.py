"""Run control in the engine: the lease heartbeat, cancel that stops tools, run-status notes."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

from agentloom.engine import (
    CANCELLED_RESULT,
    INTERRUPTED_RESULT,
    ConfigurationError,
    ContextPolicy,
    EngineConfig,
    LeaseLostError,
    ModelBudget,
    ModelGateway,
    WatchedCall,
    Watcher,
    WatchHooks,
)
from agentloom.engine._protocol import protocol_problems
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import Recorder, kinds, make_engine


def start(engine, question="q"):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question=question)


class SlowGateway(ModelGateway):
    """Answer from a script, each reply after `seconds` of wall time."""

    def __init__(self, seconds, *replies, deadline=None):
        self.seconds = seconds
        self.replies = list(replies)
        self.requests = []
        self.deadline_seconds = deadline

    def complete(self, request):
        self.requests.append(request)
        time.sleep(self.seconds)
        return self.replies.pop(0)


class Lease(WatchHooks):
    """A lease renewed every 0.05 s; `held` turns False to simulate losing it."""

    heartbeat_seconds = 0.05
    cancel_poll_seconds = 0.05

    def __init__(self, held=True):
        self.held = held
        self.renewals: list[float] = []
        self.exits = 0

    def renew(self, run) -> bool:
        self.renewals.append(time.monotonic())
        return self.held

    def release(self) -> None:
        self.exits += 1


def watched(lease):
    """Return `make_engine` options: the run watched by a watcher of its own over `lease`."""
    return {"watch": Watcher(lease).run("run-1")}


def wait_for(condition, seconds=2.0):
    """Return whether `condition()` turns true within `seconds`."""
    ends = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > ends:
            return False
        time.sleep(0.01)
    return True


# --- the lease heartbeat ---------------------------------------------------------------------


def test_a_long_model_call_renews_the_lease_while_it_runs_and_not_after():
    lease = Lease()
    gateway = SlowGateway(0.5, text_response("done"))

    outcome = start(make_engine(gateway, **watched(lease)))

    assert outcome.status == "succeeded"
    assert len(lease.renewals) >= 5, "about one renewal every 0.05 s of a 0.5 s call"
    count = len(lease.renewals)
    time.sleep(0.2)
    assert len(lease.renewals) == count, "no renewal once the call has returned"
    assert wait_for(lambda: lease.exits == 1), "the watching thread ends with the call"


def test_the_heartbeat_never_renews_past_the_calls_own_deadline():
    lease = Lease()
    gateway = SlowGateway(0.8, text_response("done"), deadline=0.2)

    start(make_engine(gateway, **watched(lease)))

    # Renewals only in the first 0.2 s of the 0.8 s call: a hung call lets the lease go.
    assert 1 <= len(lease.renewals) <= 5
    assert lease.renewals[-1] - lease.renewals[0] < 0.3


def test_a_tool_renews_the_lease_up_to_its_own_limit():
    lease = Lease()
    gateway = SlowGateway(0, tool_call_response(("sleep", {"seconds": 0.4})), text_response("ok"))

    outcome = start(make_engine(gateway, tools=("sleep",), **watched(lease)))

    assert outcome.status == "succeeded"
    assert len(lease.renewals) >= 4


def test_a_lost_lease_stops_the_run_after_the_call_without_writing():
    lease = Lease(held=False)
    gateway = SlowGateway(0.3, tool_call_response(("echo", {"text": "never run"})))
    recorder = Recorder()
    engine = make_engine(gateway, recorder=recorder, **watched(lease))

    with pytest.raises(LeaseLostError):
        start(engine)

    assert len(lease.renewals) == 1, "the first refused renewal stops the heartbeat"
    # The call was reported (the application records it as discarded) ...
    assert [call.purpose for call in recorder.calls] == ["action"]
    # ... but nothing after it was saved: the first save is the one before the call.
    assert len(recorder.saves) == 1
    assert kinds(recorder.saves[-1]) == ["user_input"]


def test_a_lost_lease_closes_a_streamed_call_at_once():
    closed = threading.Event()
    call = WatchedCall(
        deadline_seconds=None,
        lost=threading.Event(),
        cancelled=threading.Event(),
        relay_cancel=True,
        on_cancel=closed.set,
    )

    with Watcher(Lease(held=False)).run("run-1").watching(call):
        # A streamed call waits on its stream: only closing it ends the wait.
        assert closed.wait(2), "the stream is closed as soon as the lease is lost"
    assert call.lost.is_set() and call.cancelled.is_set()


def test_a_lost_lease_stops_a_running_tool_at_once():
    lease = Lease(held=False)
    gateway = SlowGateway(0, tool_call_response(("sleep", {"seconds": 20})))
    recorder = Recorder()
    engine = make_engine(gateway, tools=("sleep",), recorder=recorder, **watched(lease))

    began = time.monotonic()
    with pytest.raises(LeaseLostError):
        start(engine)

    assert time.monotonic() - began < 2
    assert "tool_result" not in kinds(recorder.saves[-1]), "no result written without the lease"


class SharedWatch:
    """A `watch` hook: records every call it watches, and can lose the lease during one."""

    def __init__(self, *, lose_during: int | None = None):
        self.calls: list[dict] = []
        self.lose_during = lose_during

    def watching(self, call: WatchedCall):
        import contextlib

        self.calls.append({"deadline": call.deadline_seconds, "relay_cancel": call.relay_cancel})
        if self.lose_during == len(self.calls):
            call.lost.set()
            call.cancelled.set()
        return contextlib.nullcontext()


def test_a_watch_hook_replaces_the_watching_thread_for_every_call():
    watch = SharedWatch()
    gateway = SlowGateway(
        0.1, tool_call_response(("sleep", {"seconds": 0.1})), text_response("ok"), deadline=7
    )
    before = set(threading.enumerate())
    started = []  # the threads started since the run began, seen during each model call
    answer = gateway.complete

    def complete(request):
        started.append(set(threading.enumerate()) - before)
        return answer(request)

    gateway.complete = complete

    outcome = start(
        make_engine(gateway, tools=("sleep",), watch=watch, should_cancel=lambda: False)
    )

    assert outcome.status == "succeeded"
    # (Compared by identity: a thread of an earlier test may end meanwhile.)
    assert started == [set(), set()], "no thread of its own while a call runs"
    # Two model calls (their deadline, no cancel relay) and one tool (its limit, relayed).
    assert watch.calls == [
        {"deadline": 7, "relay_cancel": False},
        {"deadline": 5.1, "relay_cancel": True},
        {"deadline": 7, "relay_cancel": False},
    ]


def test_a_lease_lost_under_a_watch_hook_stops_the_run_after_the_call():
    recorder = Recorder()
    gateway = SlowGateway(0, tool_call_response(("echo", {"text": "never run"})))
    engine = make_engine(gateway, recorder=recorder, watch=SharedWatch(lose_during=1))

    with pytest.raises(LeaseLostError):
        start(engine)

    assert len(recorder.saves) == 1 and kinds(recorder.saves[-1]) == ["user_input"]


class Runs(Lease):
    """Leases of many runs; `asked` holds the runs whose cancel is requested."""

    def __init__(self, asked=()):
        super().__init__()
        self.asked = set(asked)
        self.renewed: set[str] = set()
        self.questions: list[set[str]] = []

    def renew(self, run) -> bool:
        self.renewed.add(run)
        return True

    def cancels_asked(self, runs):
        self.questions.append(set(runs))
        return runs & self.asked


def test_one_watcher_thread_watches_every_call_and_asks_for_all_runs_at_once():
    hooks = Runs()
    watcher = Watcher(hooks)
    calls = {
        run: WatchedCall(
            deadline_seconds=None,
            lost=threading.Event(),
            cancelled=threading.Event(),
            relay_cancel=True,
        )
        for run in ("a", "b", "c")
    }
    threads = threading.active_count()
    with contextlib.ExitStack() as stack:
        for run, call in calls.items():
            stack.enter_context(watcher.run(run).watching(call))
        # Asked only once all three are watched: a tick may come between two registrations.
        hooks.asked.add("b")
        assert calls["b"].cancelled.wait(2), "a cancel request reaches its run's call"
        time.sleep(0.15)
        assert threading.active_count() == threads + 1, "one thread for every call"
        assert watcher.in_flight() == 3
    assert not calls["a"].cancelled.is_set() and not calls["c"].cancelled.is_set()
    assert {"a", "b", "c"} in hooks.questions, "one question for all the runs"
    assert hooks.renewed == {"a", "b", "c"}
    assert wait_for(lambda: threading.active_count() == threads), "no thread once no call is left"
    assert hooks.exits == 1


def test_a_call_with_nothing_to_watch_starts_no_thread():
    watcher = Watcher(WatchHooks())
    call = WatchedCall(
        deadline_seconds=1, lost=threading.Event(), cancelled=threading.Event(), relay_cancel=False
    )
    threads = threading.active_count()
    with watcher.run("a").watching(call):
        assert threading.active_count() == threads and watcher.in_flight() == 0


def test_the_watch_keeps_beating_after_a_failed_write():
    class Busy(Lease):
        answers = iter([RuntimeError("database busy"), True, True, True, True, True, True])

        def renew(self, run):
            answer = next(self.answers)
            if isinstance(answer, Exception):
                raise answer
            return answer

    lost = threading.Event()
    watcher = Watcher(Busy())
    call = WatchedCall(
        deadline_seconds=None, lost=lost, cancelled=threading.Event(), relay_cancel=False
    )
    with watcher.run("run-1").watching(call):
        time.sleep(0.2)
    assert not lost.is_set()
    assert watcher.beats >= 2


@pytest.mark.parametrize("name", ["cancel_poll_seconds", "model_call_seconds"])
@pytest.mark.parametrize("value", [0, -1, True, "5"])
def test_watch_intervals_must_be_positive(name, value):
    with pytest.raises(ConfigurationError) as error:
        EngineConfig(**{name: value})
    assert error.value.field == name


# --- cancel ----------------------------------------------------------------------------------


def test_calls_returned_after_a_cancel_request_are_not_executed(scripted):
    ran = []
    cancelled = []

    def respond_after_cancel(request):
        cancelled.append(True)  # the user presses Cancel while the model is thinking
        return tool_call_response(("echo", {"text": "one"}), ("echo", {"text": "two"}))

    gateway = scripted(respond_after_cancel)
    engine = make_engine(gateway, should_cancel=lambda: bool(cancelled))
    engine.registry["echo"].run = lambda arguments: ran.append(arguments) or "ran"

    outcome = start(engine)

    assert outcome.status == "cancelled"
    assert ran == [], "no tool of a response returned after the cancel runs"
    frame = outcome.frame
    results = [r["message"] for r in frame["context"]["records"] if r["kind"] == "tool_result"]
    assert [r["content"] for r in results] == [CANCELLED_RESULT, CANCELLED_RESULT]
    assert json.loads(CANCELLED_RESULT)["status"] == "cancelled"
    # Every call has its result: the protocol holds and the next model could be asked.
    assert protocol_problems(frame["messages"]) == []
    assert kinds(frame)[-2:] == ["feedback", "status"]


def test_a_cancelled_sleep_stops_within_a_second():
    asked = time.monotonic()
    gateway = SlowGateway(0, tool_call_response(("sleep", {"seconds": 20})))
    engine = make_engine(
        gateway,
        tools=("sleep",),
        should_cancel=lambda: time.monotonic() - asked > 1.0,
        config=EngineConfig(cancel_poll_seconds=0.1),
    )

    outcome = start(engine)

    elapsed = time.monotonic() - asked
    assert outcome.status == "cancelled"
    assert elapsed < 2.0, f"cancelled after 1 s, ended after {elapsed:.2f} s"
    results = [r for r in outcome.frame["context"]["records"] if r["kind"] == "tool_result"]
    assert results[0]["message"]["content"] == INTERRUPTED_RESULT


def test_a_cancel_stops_a_delegations_child():
    asked = time.monotonic()
    gateway = SlowGateway(
        0,
        tool_call_response(("delegate_helper", {"task": "wait"})),
        tool_call_response(("sleep", {"seconds": 20})),
    )
    engine = make_engine(
        gateway,
        tools=(),
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "s", "tools": ["sleep"]}
        ],
        should_cancel=lambda: time.monotonic() - asked > 0.5,
        config=EngineConfig(cancel_poll_seconds=0.1),
    )

    outcome = start(engine)

    assert outcome.status == "cancelled"
    assert time.monotonic() - asked < 2.0
    records = outcome.frame["context"]["records"]
    delegation = [r["message"] for r in records if r["kind"] == "tool_result"]
    assert delegation[0]["content"] == INTERRUPTED_RESULT
    child = outcome.frame["state"]["children"]["1.1"]
    child_kinds = [r["kind"] for r in child["context"]["records"]]
    assert child_kinds[-1] == "status"
    assert child["context"]["records"][-1]["message"]["status"] == "cancelled"


# --- run-status notes ------------------------------------------------------------------------


def test_after_a_resume_the_last_user_message_is_the_task_not_the_stop_note(scripted):
    from agentloom.engine import GatewayError

    gateway = scripted(GatewayError("upstream", "The provider failed to answer."))
    recorder = Recorder()
    failed = start(make_engine(gateway, recorder=recorder), question="NONCE-TASK")
    assert failed.status == "failed"
    note = failed.frame["context"]["records"][-2]["message"]
    assert note["role"] == "system" and note["content"].startswith("[run note] run stopped")
    # The note waits for the message that follows it: no request ends with it.
    assert failed.frame["messages"][-1]["content"] == "NONCE-TASK"

    again = scripted(text_response("done"))
    resumed = make_engine(again, recorder=recorder, config=EngineConfig(record_store=None))
    outcome = resumed.resume(failed.frame, attempt=2)

    assert outcome.status == "succeeded"
    first = again.requests[0].messages
    assert first[-1] == {"role": "user", "content": "NONCE-TASK"}
    roles = [m["role"] for m in outcome.frame["messages"]]
    assert roles[-3:] == ["user", "system", "assistant"]
    assert outcome.frame["messages"][: len(first)] == first


def test_under_rendering_1_the_stop_note_stays_on_the_assistant_side(scripted):
    from agentloom.engine import GatewayError

    gateway = scripted(GatewayError("upstream", "The provider failed to answer."))
    failed = start(make_engine(gateway, rendering=1), question="NONCE-TASK")
    note = failed.frame["messages"][-1]
    assert note["role"] == "assistant" and note["content"].startswith("[run note] run stopped")


# --- verification evidence -------------------------------------------------------------------


def engine_bound(messages):
    from agentloom.engine import JsonBytesEstimator

    return JsonBytesEstimator().upper_bound(messages, [])


def test_verification_keeps_recent_complete_evidence_groups_within_the_budget(scripted):
    budget = ModelBudget(12_000, 1_000, 0)  # effective 11,000
    gateway = scripted(
        *[tool_call_response(("echo", {"text": f"NONCE-{n} " + "e" * 1_000})) for n in range(4)],
        text_response("final " + "c" * 3_000),
        text_response("PASS"),
    )
    policy = ContextPolicy(context_ratio=1.0, target_ratio=0.9)

    outcome = start(make_engine(gateway, budget=budget, policy=policy, verify_completion=True))

    assert outcome.status == "succeeded", outcome.error
    verification = gateway.requests[-1]
    # Without trimming, the view and the long candidate would not fit one request.
    action = gateway.requests[-2]
    assert engine_bound(action.messages) + 3_000 > budget.effective_input_budget
    assert verification.purpose == "verification"
    text = verification.messages[1]["content"]
    assert "earlier evidence group(s) omitted" in text
    assert "NONCE-3" in text, "the most recent group is kept"
    assert "NONCE-0" not in text, "the oldest group is dropped first"
    # Whole groups only: a call is never shown without its result.
    assert text.count("[tool call") == text.count("[tool result")
