"""Frames and views by reference (`format: 2`): saved small, rebuilt byte-identical.

Every save made through `Recorder` is rebuilt from its memory journal at once and compared with
the live frame (see `tests.engine.helpers`); these tests add sessions of several runs whose
history is projected from that same journal, resumes from by-reference frames, and size bounds.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloom.engine import (
    ContextPolicy,
    EngineConfig,
    InstanceFrame,
    ModelBudget,
    ModelGateway,
    as_ranges,
    materialize,
    union_ranges,
)
from agentloom.engine._errors import FrameError
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
from tests.engine.helpers import Recorder, assert_openai_valid, make_engine


class PlannedGateway(ModelGateway):
    """Answers each action by a plan: a tool call (`echo`, `fail`, a big result) or an answer."""

    def __init__(self, plan: list[str]):
        self.plan = list(plan)
        self.requests = []

    def complete(self, request):
        assert_openai_valid(request)
        self.requests.append(request)
        if request.purpose == "compaction":
            return text_response("summary NONCE-SUMMARY of the earlier work")
        last = request.messages[-1]
        if last.get("role") == "tool" or not self.plan:
            return text_response("done: " + "a" * 120)
        step = self.plan.pop(0)
        if step == "answer":
            return text_response("answer " + "b" * 200)
        if step == "boom":
            from agentloom.engine import GatewayError

            raise GatewayError("upstream", "the provider failed")
        text = "c" * (3_000 if step == "big" else 200)
        name = "fail" if step == "fail" else "echo"
        arguments = {"message": "no"} if name == "fail" else {"text": text}
        return tool_call_response((name, arguments))


def _run(journal: MemoryJournal, number: int, plan: list[str], budget: ModelBudget):
    recorder = Recorder(journal=journal, run_id=number)
    engine = make_engine(
        PlannedGateway(plan),
        tools=("echo", "fail"),
        budget=budget,
        recorder=recorder,
        config=EngineConfig(record_store=recorder.store()),
    )
    outcome = engine.start(
        run_number=number,
        attempt=1,
        system_prompt="sys",
        question=f"question {number} " + "q" * 150,
        history=journal.history(),
    )
    return engine, recorder, outcome


PLANS = st.lists(
    st.lists(st.sampled_from(["answer", "echo", "fail", "big", "boom"]), min_size=1, max_size=4),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=PLANS, window=st.sampled_from([9_000, 14_000, 200_000]))
def test_every_saved_frame_rebuilds_to_the_live_frame_across_runs_and_resumes(plans, window):
    journal = MemoryJournal()
    budget = ModelBudget(window, 1_000, 0)
    for number, plan in enumerate(plans, start=1):
        engine, recorder, outcome = _run(journal, number, plan, budget)
        if outcome.status == "failed" and recorder.stored:
            # Resume from the stored by-reference frame, as a worker would.
            resumed = engine.resume(recorder.stored[-1], attempt=2)
            assert resumed.status in ("succeeded", "failed")
            keys = [r["entry_key"] for r in resumed.frame["context"]["records"]]
            assert len(keys) == len(set(keys))


def test_a_checkpoint_does_not_grow_with_the_inherited_history():
    sizes = []
    for turns in (5, 60):
        journal = MemoryJournal()
        budget = ModelBudget(10_000_000, 1_000, 0)
        for number in range(1, turns + 1):
            _engine, recorder, _outcome = _run(journal, number, ["echo"], budget)
        sizes.append(len(json.dumps(recorder.stored[-1])))
        # The view still holds the whole history; only its reference is stored.
        assert len(recorder.saves[-1]["messages"]) > 4 * turns
    assert abs(sizes[1] - sizes[0]) < 64, sizes


def test_a_save_hands_over_only_the_records_added_since_the_last_one():
    journal = MemoryJournal()
    counts = []

    class Counting(Recorder):
        def save(self, checkpoint):
            counts.append(len(checkpoint.records))
            super().save(checkpoint)

    recorder = Counting(journal=journal, run_id=1)
    engine = make_engine(
        PlannedGateway(["echo"]),
        budget=ModelBudget(200_000, 1_000, 0),
        recorder=recorder,
        config=EngineConfig(record_store=recorder.store()),
    )
    engine.start(run_number=1, attempt=1, system_prompt="s", question="q", history=None)
    # The question; the call (saved before its tool runs); its result; the answer and status.
    assert counts == [1, 1, 1, 2]
    assert sum(counts) == len(journal.rows)


def test_compacted_views_are_stored_as_a_snapshot_reference_plus_what_follows():
    journal = MemoryJournal()
    budget = ModelBudget(9_000, 1_000, 0)
    for number in range(1, 6):
        _engine, recorder, _outcome = _run(journal, number, ["big"], budget)
    stored = recorder.stored[-1]
    assert stored["context"]["compactions"], "the small window compacts"
    assert stored["view"][0] == {"snap": stored["context"]["compactions"][-1]["revision"]}
    for snapshot in stored["context"]["compactions"]:
        assert all("hist" not in entry and "snap" not in entry for entry in snapshot["view"])


def test_a_reference_to_a_missing_record_is_an_error_not_a_gap():
    journal = MemoryJournal()
    _engine, recorder, _outcome = _run(journal, 1, ["echo"], ModelBudget(200_000, 1_000, 0))
    stored = recorder.stored[-1]
    journal.records[(1, "main")].pop(1)
    with pytest.raises(FrameError):
        InstanceFrame.from_dict(stored, store=journal.store(1))
    with pytest.raises(FrameError):
        InstanceFrame.from_dict(stored)  # a by-reference frame needs its store


def test_materialize_is_the_transform_projection_uses():
    record = {"role": "tool", "tool_call_id": "r1-1-1", "content": "x" * 30}
    shown = materialize({"s": 7, "as": "tool", "id": "h3_1", "cap": 10}, record)
    assert shown["tool_call_id"] == "h3_1"
    assert shown["content"].startswith("x" * 10 + "\n[truncated: 20 characters")
    assert materialize({"own": 2, "cap": 100}, record) == record


def test_format_1_frames_still_resume_without_a_store(scripted):
    recorder = Recorder()
    engine = make_engine(
        scripted(tool_call_response(("echo", {"text": "hi"})), text_response("ok")),
        policy=ContextPolicy(),
        recorder=recorder,
    )
    engine.start(run_number=1, attempt=1, system_prompt="s", question="q", history=None)
    format_1 = recorder.saves[2]
    assert format_1["format"] == 1 and format_1["context"]["records"]
    resumed = make_engine(scripted(text_response("again")), recorder=Recorder()).resume(
        format_1, attempt=2
    )
    assert resumed.status == "succeeded"


def test_a_clock_stepping_back_never_reorders_an_instances_records():
    from datetime import UTC, datetime, timedelta

    moments = iter(
        datetime(2026, 10, 9, 12, 0, tzinfo=UTC) + timedelta(seconds=offset)
        for offset in [0, 10, 20, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6] * 4
    )
    journal = MemoryJournal()
    recorder = Recorder(journal=journal, run_id=1)
    engine = make_engine(
        PlannedGateway(["echo", "fail", "answer"]),
        tools=("echo", "fail"),
        recorder=recorder,
        clock=lambda: next(moments),
        config=EngineConfig(record_store=recorder.store()),
    )
    outcome = engine.start(run_number=1, attempt=1, system_prompt="s", question="q", history=None)
    local = [record["entry_key"] for record in outcome.frame["context"]["records"]]
    journaled = [row for row in journal.rows if row.instance == "main"]
    stamps = [record["at"] for record in outcome.frame["context"]["records"]]
    assert stamps != sorted(stamps), "the clock did step back"
    # The journal keeps the instance's own order (local seq), whatever the timestamps say.
    keys = [record.entry_key for record in journal.records[(1, "main")]]
    assert keys == local
    assert len(journaled) == len(local)


def test_an_earlier_checkpoint_loads_while_the_journal_has_grown():
    """A reader racing a save sees the checkpoint's moment, not the records journaled after it."""
    journal = MemoryJournal()
    _, recorder, _ = _run(journal, 1, ["echo", "echo", "answer"], ModelBudget(32_768, 4_096, 1_024))
    assert len(recorder.stored) > 2
    for stored, full in zip(recorder.stored, recorder.saves, strict=True):
        frame = InstanceFrame.from_dict(stored, store=recorder.store())
        assert json.dumps(frame.to_dict()) == json.dumps(full)


def test_a_union_joins_adjacent_and_held_ranges_and_keeps_gaps():
    ranges = [[5, 9], [1, 3], [4, 4], [6, 7], [20, 21], [11, 11]]
    assert union_ranges(ranges) == [[1, 9], [11, 11], [20, 21]]
    assert ranges[0] == [5, 9] and union_ranges([]) == []


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=12))
def test_a_union_of_ranges_is_the_ranges_of_every_seq_they_hold(pairs):
    ranges = [[first, first + length] for first, length in pairs]
    seqs = {seq for first, last in ranges for seq in range(first, last + 1)}
    union = union_ranges(ranges)
    assert union == as_ranges(seqs)
    # New lists: growing the union never changes the ranges it was made of.
    assert all(r is not u for r in ranges for u in union)
