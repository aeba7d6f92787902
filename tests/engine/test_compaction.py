import json
import re

import pytest

from agentloom.engine import (
    BudgetCompactionPolicy,
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    GatewayError,
    InstanceFrame,
    JournalContextManager,
    LegacyCharPolicy,
    ModelBudget,
)
from agentloom.engine._compaction import HANDOFF_HEADER, PLAN_HEADER, SUMMARY_CUT
from agentloom.engine._measure import SUMMARY_RESERVE_SHARE
from agentloom.engine._protocol import protocol_problems, render_message
from agentloom.engine.testing import text_response
from tests.engine.helpers import FakeClock, add_group, new_context, snapshot

SMALL = ModelBudget(8_000, 1_000, 0)  # effective 7,000; trigger 5,600; target 4,200


def summariser(scripted, text="short summary NONCE-S"):
    """Return a validating gateway that answers every summary request with `text`."""
    return scripted(*[text_response(text)] * 20)


def grown_context(groups=10, chars=800, *, calls_per_group=1, policy=None, budget=SMALL, **options):
    context = new_context(policy=policy or ContextPolicy(), budget=budget, **options)
    for n in range(groups):
        add_group(context, [f"result {n}.{k} " + "z" * chars for k in range(calls_per_group)])
    return context


def test_a_triggered_compaction_replaces_old_history_with_a_validated_summary(scripted):
    context = grown_context()
    gateway = summariser(scripted)
    records_before = [r.to_dict() for r in context.frame.records]
    size_before, fired = context.triggers([])
    assert fired == ("budget",)

    prepared = context.prepare("action", tools=[], call_model=gateway.complete)

    outcome = prepared.compaction
    frame = context.frame
    assert outcome.outcome == "succeeded", outcome
    assert outcome.before == size_before
    assert outcome.after < outcome.before
    assert outcome.after < ContextPolicy().trigger_at(SMALL)
    assert gateway.purposes() == ["compaction"]
    view = frame.messages
    assert view[0] == {"role": "system", "content": "sys"}
    # The summary covers the run's own progress, so it follows the task it reports on.
    assert view[1] == {"role": "user", "content": "the task NONCE-TASK"}
    assert view[2]["content"].startswith(HANDOFF_HEADER)
    assert "short summary NONCE-S" in view[2]["content"]
    assert frame.state.task_index == 1
    assert protocol_problems(view) == []
    assert prepared.request.messages == view
    assert [r.to_dict() for r in frame.records] == records_before
    assert (frame.counters.baseline_user_turns, frame.counters.baseline_model_steps) == (1, 10)
    snapshot_ = frame.compactions[-1]
    assert snapshot_["revision"] == 1
    assert snapshot_["covered_seq"] == frame.records[-1].seq
    assert snapshot_["messages"] == view
    assert snapshot_["counters"] == frame.counters.to_dict()
    assert snapshot_["metrics"]["outcome"] == "succeeded"
    log = frame.state.compaction_log
    assert [(e["revision"], e["outcome"], e["calls"]) for e in log] == [(1, "succeeded", 1)]


def test_tool_groups_are_kept_whole_or_summarised_whole(scripted):
    context = grown_context(groups=8, chars=250, calls_per_group=3)

    outcome = context.prepare("action", call_model=summariser(scripted).complete).compaction

    assert outcome.outcome == "succeeded"
    view = context.frame.messages
    kept = view[3:]
    assert kept, "recent groups should be kept"
    assert kept[0]["role"] == "assistant"
    for index, message in enumerate(kept):
        if message["role"] == "assistant":
            ids = [call["id"] for call in message["tool_calls"]]
            assert [m["tool_call_id"] for m in kept[index + 1 : index + 4]] == ids
    assert protocol_problems(view) == []


def test_an_oversized_group_is_summarised_piece_by_piece_in_order(scripted):
    budget = ModelBudget(16_000, 2_000, 0)  # effective 14,000
    context = new_context(budget=budget)
    result = "".join(f"<{n:05d}>" for n in range(2_600))  # 18,200 characters
    add_group(context, [result])
    unit_text = "\n".join(render_message(m) for m in context.frame.messages[2:])
    replies = iter(["first part NONCE-1", "both parts NONCE-1 NONCE-2", "all NONCE-3"])
    gateway = scripted(*[lambda request: text_response(next(replies))] * 3)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert outcome.outcome == "succeeded", outcome
    assert outcome.calls >= 2
    segments = []
    for request in gateway.requests:
        body = request.messages[1]["content"]
        material = body.split("Next material, in order:\n", 1)[1].rsplit("\n\nReturn", 1)[0]
        segments.append(re.sub(r"--- (next item|continued) ---\n", "", material))
        assert context.estimator.estimate(request.messages, []) <= budget.effective_input_budget
    assert "".join(segments) == unit_text
    assert "Summary so far:\nfirst part NONCE-1" in gateway.requests[1].messages[1]["content"]
    assert context.frame.messages[1] == {"role": "user", "content": "the task NONCE-TASK"}
    assert context.frame.messages[2]["content"].startswith(HANDOFF_HEADER)
    assert len(context.frame.messages) == 3


def test_no_more_summary_calls_than_the_policy_allows(scripted):
    budget = ModelBudget(16_000, 2_000, 0)
    context = new_context(budget=budget, policy=ContextPolicy(max_compaction_calls=1))
    add_group(context, ["".join(f"<{n:05d}>" for n in range(2_600))])
    before = snapshot(context)
    gateway = summariser(scripted)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert gateway.purposes() == ["compaction"]
    assert outcome.calls == 1
    assert outcome.outcome == "failed"
    assert snapshot(context) == before


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (GatewayError("upstream", "The provider failed to answer."), "gateway_error: upstream"),
        (text_response("   "), "empty_summary"),
    ],
)
def test_a_failed_compaction_keeps_view_sources_and_baselines(scripted, reply, reason):
    # Above the trigger, within the effective budget; the segmented request of version 2 (a
    # failed request on the conversation's prefix falls back to it: test_prefix_summary.py).
    context = grown_context(groups=6, compaction=2)
    before = snapshot(context)

    prepared = context.prepare("action", call_model=scripted(reply).complete)

    assert prepared.compaction.outcome == "failed"
    assert prepared.compaction.reason == reason
    assert snapshot(context) == before
    entry = context.frame.state.compaction_log[-1]
    assert entry["revision"] is None
    assert (entry["outcome"], entry["reason"], entry["calls"]) == ("failed", reason, 1)
    assert entry["covered_seq"] == context.frame.records[-1].seq
    # A failed compaction does not stop the run: the request is still prepared.
    assert prepared.request is not None and prepared.request.messages == before["messages"]


def test_nothing_to_compact_is_a_skip_without_any_call(scripted):
    budget = ModelBudget(8_000, 1_000, 0)
    context = new_context(budget=budget, task="t" * 6_000)
    before = snapshot(context)
    gateway = scripted()

    prepared = context.prepare("action", call_model=gateway.complete)

    assert (prepared.compaction.outcome, prepared.compaction.reason) == (
        "skipped",
        "nothing_to_compact",
    )
    assert gateway.requests == []
    assert snapshot(context) == before
    assert prepared.request is not None


def test_a_turns_only_trigger_with_nothing_worth_summarising_is_skipped(scripted):
    context = new_context(policy=ContextPolicy(user_turns=1))
    context.add_assistant({"role": "assistant", "content": "hi"})
    before = snapshot(context)

    prepared = context.prepare("action", call_model=scripted().complete)

    assert prepared.compaction.triggers == ("user_turns",)
    assert (prepared.compaction.outcome, prepared.compaction.reason) == ("skipped", "no_gain")
    assert snapshot(context) == before


def test_when_even_the_compacted_request_is_too_big_the_hard_check_stops_it(scripted):
    budget = ModelBudget(8_000, 1_000, 0)
    context = new_context(budget=budget, task="t" * 7_100)

    prepared = context.prepare("action", call_model=scripted().complete)

    assert prepared.compaction.outcome == "skipped"
    assert prepared.request is None
    assert prepared.stop_reason.startswith("context_budget_exceeded")


def test_the_plan_is_pinned_into_the_handoff_summary(scripted):
    context = grown_context()
    context.set_plan("1. gather facts\n2. answer")

    context.prepare("action", call_model=summariser(scripted).complete)

    messages = context.frame.messages
    (summary,) = [m["content"] for m in messages if HANDOFF_HEADER in (m.get("content") or "")]
    assert f"{PLAN_HEADER}\n1. gather facts\n2. answer" in summary


def test_baselines_persist_and_the_next_trigger_counts_from_them(scripted):
    policy = ContextPolicy(model_steps=2)
    context = new_context(policy=policy)
    gateway = summariser(scripted)
    add_group(context, ["a" * 400])
    add_group(context, ["b" * 400])

    assert context.prepare("action", call_model=gateway.complete).compaction.outcome == "succeeded"
    counters = context.frame.counters
    assert (counters.model_steps, counters.baseline_model_steps) == (2, 2)

    add_group(context, ["c" * 400])
    assert context.prepare("action", call_model=gateway.complete).compaction is None

    restored = JournalContextManager(
        ContextBinding(policy, context.budget), ContextOptions(clock=FakeClock())
    )
    restored.restore(InstanceFrame.from_dict(context.frame.to_dict()))
    assert restored.frame.counters == counters
    assert restored.prepare("action", call_model=gateway.complete).compaction is None
    add_group(restored, ["d" * 400])
    outcome = restored.prepare("action", call_model=gateway.complete).compaction
    assert outcome.triggers == ("model_steps",)
    assert outcome.outcome == "succeeded"
    assert restored.frame.counters.baseline_model_steps == 4
    assert [c["revision"] for c in restored.frame.compactions] == [1, 2]


def test_legacy_policy_compacts_above_its_character_threshold(scripted):
    policy = LegacyCharPolicy(context_chars=3_000)
    context = grown_context(
        groups=6, chars=600, policy=policy, budget=ModelBudget(32_768, 4_096, 0)
    )
    assert context.triggers([])[1] == ("characters",)

    outcome = context.prepare("action", call_model=summariser(scripted).complete).compaction

    assert outcome.outcome == "succeeded"
    assert outcome.after <= 3_000 < outcome.before


def test_the_compaction_policy_is_replaceable(scripted):
    class Refuse(BudgetCompactionPolicy):
        def compact(self, request):
            outcome = super().compact(request)
            return type(outcome)(**{**outcome.__dict__, "outcome": "failed", "messages": None})

    context = new_context(budget=SMALL, compaction_policy=Refuse())
    for n in range(10):
        add_group(context, [f"{n} " + "z" * 800])
    before = snapshot(context)

    context.prepare("action", call_model=summariser(scripted).complete)

    assert snapshot(context) == before


def test_a_summary_updates_the_summary_before_it_and_is_never_nested(scripted):
    from agentloom.engine import HANDOFF_MARK

    context = grown_context()

    def echoing(request):
        # A summariser that repeats everything it is shown, header lines included.
        return text_response("\n".join(str(m["content"]) for m in request.messages[1:]))

    gateway = scripted(*[echoing] * 40)
    for round_number in range(4):
        outcome = context.compact_if_triggered([], gateway.complete)
        assert outcome.succeeded, outcome
        for n in range(8):
            add_group(context, [f"round {round_number} result {n} " + "w" * 800])

    summaries = [m for m in context.frame.messages if HANDOFF_MARK in str(m.get("content"))]
    assert len(summaries) == 1
    assert str(summaries[0]["content"]).count(HANDOFF_MARK) == 1, "the header is never nested"
    # The earlier summary was the input of the next one, as the summary so far.
    later = [r for r in gateway.requests if "Summary so far:\n(none yet)" not in str(r.messages)]
    assert later, "every compaction after the first starts from the summary before it"


def test_a_summary_longer_than_what_it_replaces_fails_as_no_reduction(scripted):
    # A turns trigger fires on a view far below the budget trigger: a summary that is longer
    # than the material it replaces leaves a view that is still below the trigger, but larger.
    context = grown_context(groups=4, chars=200, policy=ContextPolicy(user_turns=1))
    before = snapshot(context)
    gateway = summariser(scripted, "a long summary NONCE-S " * 150)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert outcome.triggers == ("user_turns",)
    assert gateway.purposes() == ["compaction"]
    assert (outcome.outcome, outcome.reason) == ("failed", "no_reduction")
    assert outcome.before < outcome.after < ContextPolicy().trigger_at(SMALL)
    assert outcome.target_reached is False
    assert snapshot(context) == before


def test_a_compaction_below_the_trigger_but_above_the_target_says_target_not_reached(scripted):
    # The summariser ignores its output limit: its reply is kept whole while the view stays
    # below the trigger (from compaction 7 too, whose limit is the target's room).
    context = grown_context()
    gateway = summariser(scripted, "a long summary NONCE-S " * 80)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert (outcome.outcome, outcome.reason) == ("succeeded", "compacted")
    policy = ContextPolicy()
    assert policy.target_at(SMALL) < outcome.after < policy.trigger_at(SMALL)
    assert outcome.target_reached is False
    assert context.frame.compactions[-1]["metrics"]["target_reached"] is False
    assert outcome.details["summary_cut"] is False
    assert outcome.details["summary_room"] < len("a long summary NONCE-S " * 80)
    assert ("a long summary NONCE-S " * 80).strip() in str(context.frame.messages)


def test_a_summary_cut_to_its_ceiling_says_so_before_its_citation(scripted):
    # A little over the room under the trigger: cut to it, with room left for the citation.
    context = grown_context()
    gateway = summariser(scripted, "a long summary NONCE-S " * 100)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert outcome.succeeded
    summary = next(m["content"] for m in context.frame.messages if HANDOFF_HEADER in str(m))
    assert SUMMARY_CUT + "\n\nSummarised records" in summary
    assert outcome.details["summary_cut"] is True


def _obedient(text: str):
    """Return a script step that answers a summary request with `text` cut to the length its
    instructions ask for (`under N tokens`)."""

    def answer(request):
        asked = re.search(r"under (\d+) tokens", str(request.messages))
        return text_response(text[: int(asked.group(1))])

    return answer


def test_from_compaction_7_the_summary_takes_the_room_under_the_target(scripted):
    # A summariser that fills the output limit it is given: from compaction 7 that is the room
    # under the target, so the view comes back at the target and the session has the policy's
    # gap before the next compaction; compaction 6 gave it the room under the trigger.
    long = "a long summary NONCE-S " * 300
    policy = ContextPolicy()
    outcomes = {}
    for version in (6, 7):
        context = grown_context(compaction=version)
        gateway = scripted(*[_obedient(long)] * 20)
        outcome = context.prepare("action", call_model=gateway.complete).compaction
        assert (outcome.outcome, outcome.reason) == ("succeeded", "compacted"), outcome
        assert outcome.details["summary_cut"] is False
        assert f"under {outcome.details['summary_room']} tokens" in str(gateway.requests[-1])
        outcomes[version] = outcome

    # Each summary fills its room: the rooms differ by the gap between trigger and target, and
    # compaction 7's view is at the target but for the citation after its summary (which
    # compaction 6's full room leaves no room for).
    gap = policy.trigger_at(SMALL) - policy.target_at(SMALL)
    assert outcomes[6].details["summary_room"] - outcomes[7].details["summary_room"] == gap
    summary = next(m["content"] for m in context.frame.messages if HANDOFF_HEADER in str(m))
    citation = summary[summary.index("\n\nSummarised records") :]
    cited = len(json.dumps(citation, ensure_ascii=False).encode()) - 2  # as the estimator counts
    assert outcomes[6].after - outcomes[7].after == gap - cited
    assert outcomes[7].after - cited < policy.target_at(SMALL) < outcomes[6].after


def test_a_head_too_large_for_the_target_still_leaves_the_summary_its_reserve(scripted):
    # The task nearly fills the target: what is left under it is less than the summary's
    # reserve (a fifth of the target), which the summary gets instead; the compaction succeeds
    # above the target and below the trigger.
    policy = ContextPolicy()
    target = policy.target_at(SMALL)
    task = "the task NONCE-TASK " + "t" * (target - 300)
    context = grown_context(groups=6, chars=400, task=task)
    gateway = summariser(scripted, "a long summary NONCE-S " * 100)

    outcome = context.prepare("action", call_model=gateway.complete).compaction

    assert (outcome.outcome, outcome.reason) == ("succeeded", "compacted"), outcome
    assert outcome.details["summary_room"] == int(target * SUMMARY_RESERVE_SHARE)
    assert outcome.target_reached is False
    assert target < outcome.after < policy.trigger_at(SMALL)


def test_a_compaction_is_judged_on_the_payload_the_gateway_sends(scripted):
    # The gateway sends a preamble of its own before the view: the trigger fires on that
    # payload although the view alone is below it, and the compaction must bring the payload,
    # not just the view, below the trigger.
    preamble = {"role": "system", "content": "p" * 1_500}

    def payload(request):
        return {"messages": [preamble, *request.messages], "tools": list(request.tools)}

    context = new_context(budget=SMALL, payload=payload)
    for n in range(5):
        add_group(context, [f"result {n} " + "z" * 700])
    size, fired = context.triggers([])
    policy = ContextPolicy()
    assert fired == ("budget",)
    assert policy.measure(context.frame.messages, [], context.estimator) < policy.trigger_at(SMALL)

    outcome = context.prepare("action", call_model=summariser(scripted).complete).compaction

    assert (outcome.outcome, outcome.before) == ("succeeded", size)
    assert outcome.after == context.triggers([])[0]
    assert context.triggers([])[1] == ()
