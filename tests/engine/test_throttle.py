"""Compaction never thrashes: nothing is spent on a hopeless attempt or on an unchanged retry."""

from __future__ import annotations

from agentloom.engine import (
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    InstanceFrame,
    JournalContextManager,
)
from agentloom.engine._context import THROTTLE_GROWTH_SHARE, THROTTLE_STEPS
from agentloom.engine.testing import text_response
from tests.engine.helpers import FakeClock, add_group
from tests.engine.test_compaction import SMALL, grown_context, summariser


def test_pinned_content_above_the_trigger_skips_without_a_model_call(scripted):
    context = JournalContextManager(
        ContextBinding(ContextPolicy(), SMALL), ContextOptions(clock=FakeClock())
    )
    context.create(
        instance="main",
        system_prompt="s" * 6_000,  # alone above the 5,600 trigger
        task="the task",
        run_number=1,
        attempt=1,
    )
    add_group(context, ["a result"])
    gateway = summariser(scripted)
    outcome = context.compact_if_triggered([], gateway.complete)
    assert (outcome.outcome, outcome.reason, outcome.calls) == ("skipped", "pinned_too_large", 0)
    assert gateway.requests == []


def test_a_failed_compaction_is_not_retried_until_the_view_grows_or_steps_pass(scripted):
    context = grown_context(groups=6)  # above the trigger, within the effective budget
    empty = scripted(*[text_response("   ")] * 20)
    first = context.compact_if_triggered([], empty.complete)
    assert (first.outcome, first.reason) == ("failed", "empty_summary")
    calls = len(empty.requests)
    # The same view again: skipped as throttled, no call; a stretch of skips is one log row.
    for _ in range(3):
        again = context.compact_if_triggered([], empty.complete)
        assert (again.outcome, again.reason, again.calls) == ("skipped", "throttled", 0)
    assert len(empty.requests) == calls
    log = context.frame.state.compaction_log
    assert [entry["reason"] for entry in log] == ["empty_summary", "throttled"]
    assert log[-1]["repeats"] == 3

    # The throttle is in the checkpoint: a resumed context keeps it.
    restored = JournalContextManager(
        ContextBinding(ContextPolicy(), SMALL), ContextOptions(clock=FakeClock())
    )
    restored.restore(InstanceFrame.from_dict(context.frame.to_dict()))
    assert restored.compact_if_triggered([], empty.complete).reason == "throttled"

    # Enough growth lets the next attempt through, and a success lifts the throttle.
    grown = int(SMALL.effective_input_budget * THROTTLE_GROWTH_SHARE) // 800 + 1
    for n in range(grown):
        add_group(restored, [f"more {n} " + "q" * 800])
    works = summariser(scripted)
    retried = restored.compact_if_triggered([], works.complete)
    assert retried.outcome == "succeeded"
    assert restored.frame.state.compaction_throttle is None


def test_model_steps_also_release_the_throttle(scripted):
    context = grown_context(groups=6)
    empty = scripted(*[text_response("   ")] * 20)
    context.compact_if_triggered([], empty.complete)
    for n in range(THROTTLE_STEPS):
        assert context.compact_if_triggered([], empty.complete).reason == "throttled"
        add_group(context, [f"x{n}"])  # a model step with a tiny result: hardly any growth
    assert context.compact_if_triggered([], summariser(scripted).complete).outcome == "succeeded"


def test_a_snapshot_names_exactly_the_records_its_summary_replaced(scripted):
    context = grown_context()
    records_before = {r.seq for r in context.frame.records}
    first = context.compact_if_triggered([], summariser(scripted).complete)
    assert first.succeeded
    snapshot = context.frame.compactions[-1]
    covered = {s for a, b in snapshot["sources"]["own"] for s in range(a, b + 1)}
    # The summarised groups' records (assistant calls and results), never the task (seq 1).
    assert covered and 1 not in covered and covered <= records_before
    kept = {origin["own"] for origin in context.frame.origins if origin and "own" in origin}
    assert not covered & kept
    # A second compaction that summarises the first summary covers what it covered.
    for n in range(12):
        add_group(context, [f"later {n} " + "w" * 800])
    second = context.compact_if_triggered([], summariser(scripted).complete)
    assert second.succeeded
    again = context.frame.compactions[-1]["sources"]["own"]
    assert covered <= {s for a, b in again for s in range(a, b + 1)}
    # Read back from its checkpoint, the snapshot keeps its sources.
    restored = InstanceFrame.from_dict(context.frame.to_dict())
    assert restored.compactions[-1]["sources"] == context.frame.compactions[-1]["sources"]


def test_a_request_over_the_hard_budget_always_gets_its_compaction(scripted):
    # The audit's repro (D1): a 503 on the compaction call throttled every later attempt, and a
    # request over the hard budget then failed without any model call, run after run.
    from agentloom.engine import GatewayError, ModelBudget
    from agentloom.engine.testing import tool_call_response
    from tests.engine.helpers import make_engine

    policy = ContextPolicy(context_ratio=0.95)
    budget = ModelBudget(11_000, 1_000, 0)
    unavailable = GatewayError("upstream", "The provider failed to answer.", status=503)
    failing = scripted(
        tool_call_response(("echo", {"text": "x" * 4_500})),
        unavailable,  # the compaction call before the next step
        tool_call_response(("echo", {"text": "y" * 200})),
        tool_call_response(("echo", {"text": "z" * 200})),
    )
    engine = make_engine(failing, policy=policy, budget=budget)
    failed = engine.start(run_number=1, attempt=1, system_prompt="sys", question="q")
    purposes = failing.purposes()
    assert purposes[:3] == ["action", "compaction", "action"]
    # It could not make room: the run fails and says why compaction did not help.
    assert failed.status == "failed"
    assert failed.error.startswith("context_budget_exceeded")
    assert "(compaction failed: " in failed.error

    # Resumed with a summariser that works: the request over the hard budget is compacted first.
    def summary(request):
        assert request.purpose == "compaction"
        return text_response("the echo calls returned x, y and z filler")

    working = scripted(summary, text_response("done"), summary, text_response("done"))
    resumed = make_engine(working, policy=policy, budget=budget).resume(failed.frame, attempt=2)
    assert resumed.status == "succeeded", (failed.error, resumed.error)
    assert "compaction" in working.purposes()
    for request in [*failing.requests, *working.requests]:
        from agentloom.engine import JsonBytesEstimator

        size = JsonBytesEstimator().upper_bound(request.messages, request.tools)
        assert size <= budget.effective_input_budget
