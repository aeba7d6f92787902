"""Projection points: resuming from the projector's saved state equals projecting every record.

The journals drawn here interleave runs that are resumed later (late and missing results),
results a run masked (known when a point was made, or only after it: rendering 7),
supplements and feedback inside open groups, run notes and states, adopted legacy feedback,
sub-agent records, engine call ids (kept from rendering 3) and provider ids, large records shown
as excerpts, `update_plan` calls whose results set a plan or not (answered twice, too), and a view
the projection starts after.
"""

from __future__ import annotations

import json
from itertools import count

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloom.engine import (
    ImportedHistory,
    JournalRecord,
    ProjectionPoint,
    ReusableView,
    inherited_plan,
    project_history,
)
from agentloom.engine._rendering import CURRENT_RENDERING

POINT_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
KINDS = ["feedback", "supplement", "legacy", "run_note", "child"]


@st.composite
def journals(draw):
    """Random journals of interleaved, resumed runs with everything projection treats apart."""
    runs = draw(st.integers(1, 4))
    streams = [_run_events(draw, run) for run in range(1, runs + 1)]
    merged = []
    while any(streams):
        stream = draw(st.sampled_from([s for s in streams if s]))
        take = draw(st.integers(1, len(stream)))
        merged.extend(stream[:take])
        del stream[:take]
    seq = count(draw(st.integers(1, 20)), draw(st.integers(1, 2)))
    return [_record(kind, run, detail, next(seq)) for kind, run, detail in merged]


def _run_events(draw, run):
    events = [("user_input", run, None)]
    # Provider ids, the engine's ids, or the engine's ids of run 1 again (shown once only).
    ids = draw(st.sampled_from(["call_{n}", "r{run}-{step}-{n}", "r1-{step}-{n}"]))
    for step in range(draw(st.integers(0, 3))):
        calls = [ids.format(run=run, step=step, n=n) for n in range(draw(st.integers(0, 3)))]
        names = {call: draw(st.sampled_from(["echo", "update_plan"])) for call in calls}
        events.append(("assistant", run, [(call, names[call]) for call in calls]))
        answered = draw(st.lists(st.sampled_from(calls), unique=True)) if calls else []
        # A result given twice (a resumed call), or a plan result of another call.
        answered += draw(st.lists(st.sampled_from(calls), max_size=1)) if calls else []
        for call_id in answered:
            result = draw(st.sampled_from([5, 60, "plan", "no plan"]))
            events.append(("tool_result", run, (call_id, result)))
            if draw(st.booleans()):
                events.append((draw(st.sampled_from(KINDS)), run, step))
    if draw(st.booleans()):
        events.append(("feedback", run, "stop"))
    for _ in range(draw(st.integers(0, 2))):
        # A run's state, said again when the run is resumed and ends once more.
        events.append(("status", run, draw(st.sampled_from(["failed", "succeeded"]))))
    return events


def _record(kind, run, detail, seq):
    instance, entry_key = "main", ""
    if kind == "assistant":
        message = {"role": "assistant", "content": None if detail else "answer"}
        if detail:
            message["tool_calls"] = [
                {"id": c, "type": "function", "function": {"name": name, "arguments": "{}"}}
                for c, name in detail
            ]
    elif kind == "tool_result":
        call_id, length = detail
        content = f"R{seq} " + "x" * length if isinstance(length, int) else "plan updated: 1 steps"
        if length == "plan":
            content += f"\n- [ ] PLAN-{seq}"
        message = {"role": "tool", "tool_call_id": call_id, "content": content}
    elif kind == "status":
        message = {"status": detail, "error": "boom: detail" if detail == "failed" else None}
    elif kind == "feedback" and detail == "stop":
        message = {"role": "assistant", "content": "[run note] run stopped: limit"}
    elif kind == "run_note":
        kind, message = "feedback", {"role": "user", "content": "[feedback] run stopped: x"}
    elif kind == "legacy":
        kind, entry_key = "supplement", f"legacy:{seq}"
        message = {"role": "user", "content": f"[feedback] adopted {seq}"}
    elif kind == "child":
        kind, instance = "assistant", "child-1"
        message = {"role": "assistant", "content": f"inner {seq}"}
    else:
        message = {"role": "user", "content": f"{kind} {detail}"}
    return JournalRecord(seq, run, instance, kind, message, entry_key)


def _judge(text: str, ref: str) -> int | None:
    # Records longer than 40 characters are shown as 20-character excerpts.
    return 20 if len(text) > 40 else None


def _view(rows, cut):
    before = [row for row in rows[:cut] if row.instance == "main"]
    if not before:
        return None
    shown = project_history(before)
    return ReusableView(
        watermark=before[-1].seq,
        messages=[{"role": "user", "content": "[summary]"}, *shown.messages[-1:]],
        user_turns=shown.user_turns,
        model_steps=shown.model_steps,
        revision=3,
    )


def _stored(point: ProjectionPoint, rows) -> ProjectionPoint:
    """Return `point` as a store keeps and reads it: JSON, references materialised again."""
    body, inline = point.stored()
    body, inline = json.loads(json.dumps(body)), json.loads(json.dumps(inline))
    messages = {row.seq: row.message for row in rows}
    return ProjectionPoint.from_stored(body, inline, messages)


@POINT_SETTINGS
@given(
    rows=journals(),
    view_at=st.integers(0, 6),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    rendering=st.integers(1, CURRENT_RENDERING),
    judged=st.booleans(),
    imported_upto=st.integers(0, 40),
    masked=st.frozensets(st.integers(1, 80), max_size=8),
    masked_late=st.booleans(),
)
def test_resuming_from_points_equals_projecting_every_record(
    rows, view_at, cuts, rendering, judged, imported_upto, masked, masked_late
):
    view = _view(rows, view_at) if view_at else None
    after = [row for row in rows if view is None or row.seq > view.watermark]
    # An imported session's records up to `imported_upto` (rendering 6 follows them with a note).
    imported = ImportedHistory(imported_upto, "session 7") if imported_upto else None
    options = {"rendering": rendering, "judge": _judge if judged else None, "imported": imported}
    # Results runs masked (rendering 7), known when the points were made or only after them.
    masks = {seq: f"r9:{seq}" for seq in masked}
    whole = project_history(after, view, masks=masks, **options)

    point = None
    start = 0
    for cut in sorted({min(cut, len(after)) for cut in cuts}):
        part = project_history(
            after[start:cut],
            view,
            point=point,
            keep_point=True,
            masks=None if masked_late else masks,
            **options,
        )
        assert part.point is not None
        point = _stored(part.point, rows)
        start = cut
    resumed = project_history(after[start:], view, point=point, masks=masks, **options)
    # Where the point leaves the plan open, the loader reads the records after the view.
    plan = resumed.plan if resumed.plan_known else inherited_plan(reversed(after))

    assert plan == whole.plan
    assert json.dumps(resumed.messages) == json.dumps(whole.messages)
    assert resumed.origins == whole.origins
    assert resumed.excerpts == whole.excerpts
    assert resumed.block() == whole.block()
    assert (resumed.watermark, resumed.user_turns, resumed.model_steps) == (
        whole.watermark,
        whole.user_turns,
        whole.model_steps,
    )


def test_a_point_keeps_the_open_group_and_the_note_waiting_for_it():
    rows = [
        JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "q"}),
        JournalRecord(
            2,
            1,
            "main",
            "assistant",
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "echo", "arguments": ""}},
                    {"id": "b", "type": "function", "function": {"name": "echo", "arguments": ""}},
                ],
            },
        ),
        JournalRecord(
            3, 1, "main", "tool_result", {"role": "tool", "tool_call_id": "a", "content": "A"}
        ),
        JournalRecord(4, 1, "main", "supplement", {"role": "user", "content": "meanwhile"}),
        JournalRecord(
            5, 1, "main", "tool_result", {"role": "tool", "tool_call_id": "b", "content": "B"}
        ),
    ]
    part = project_history(rows[:4], keep_point=True)
    assert part.point is not None and part.point.group is not None
    body, inline = part.point.stored()
    assert inline == [] and [e["s"] for e in body["d"]] == [4]
    # A point keeps references, never the journal's text.
    assert "meanwhile" not in json.dumps(body)

    resumed = project_history(rows[4:], point=_stored(part.point, rows))

    assert resumed.messages == project_history(rows).messages
    assert [m["role"] for m in resumed.messages] == ["user", "assistant", "tool", "tool", "user"]


def _status(seq, run):
    return JournalRecord(seq, run, "main", "status", {"status": "failed", "error": "x: y"})


def _calls(seq, run, *ids):
    calls = [
        {"id": i, "type": "function", "function": {"name": "echo", "arguments": ""}} for i in ids
    ]
    return JournalRecord(seq, run, "main", "assistant", {"role": "assistant", "tool_calls": calls})


def _resumed_at(rows, cut, rendering=CURRENT_RENDERING):
    part = project_history(rows[:cut], keep_point=True, rendering=rendering)
    assert part.point is not None
    return project_history(rows[cut:], point=_stored(part.point, rows), rendering=rendering)


def test_run_states_in_a_row_are_joined_across_a_point():
    rows = [
        JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "q"}),
        _status(2, 1),
        _status(3, 2),
        _status(4, 3),
    ]
    whole = project_history(rows, rendering=4)
    assert len(whole.messages) == 2
    for cut in (2, 3):
        assert _resumed_at(rows, cut, rendering=4).messages == whole.messages
    # From rendering 5 each state is a note of its own, across a point too.
    whole = project_history(rows, rendering=5)
    assert len(whole.messages) == 4
    for cut in (2, 3):
        assert _resumed_at(rows, cut, rendering=5).messages == whole.messages


def test_run_states_waiting_for_an_open_group_are_joined_across_a_point():
    rows = [
        _calls(1, 1, "a"),
        _status(2, 2),
        _status(3, 3),
        JournalRecord(
            4, 1, "main", "tool_result", {"role": "tool", "tool_call_id": "a", "content": "A"}
        ),
    ]
    assert _resumed_at(rows, 2).messages == project_history(rows).messages


def test_engine_call_ids_shown_before_a_point_are_not_shown_twice():
    rows = [_calls(1, 1, "r1-0-0"), _calls(2, 2, "r1-0-0")]
    whole = project_history(rows)
    assert whole.messages[-2]["tool_calls"][0]["id"] != "r1-0-0"
    assert _resumed_at(rows, 1).messages == whole.messages


def test_a_late_result_names_its_call_from_before_a_point():
    rows = [
        _calls(1, 1, "a"),
        JournalRecord(2, 2, "main", "user_input", {"role": "user", "content": "q"}),
        JournalRecord(
            3, 1, "main", "tool_result", {"role": "tool", "tool_call_id": "a", "content": "A"}
        ),
    ]
    whole = project_history(rows)
    assert "late tool result of call" in whole.messages[-1]["content"]
    assert _resumed_at(rows, 2).messages == whole.messages


def test_a_stop_note_before_a_point_is_said_by_the_state_after_it():
    rows = [
        JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "q"}),
        JournalRecord(2, 1, "main", "feedback", {"role": "assistant", "content": "[run note] x"}),
        _status(3, 1),
    ]
    assert _resumed_at(rows, 2).messages == project_history(rows).messages


def _plan_rows(*results):
    """A run calling `update_plan` once per result, each answered by it."""
    rows = [JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "q"})]
    for n, content in enumerate(results):
        call = {"id": f"p{n}", "type": "function", "function": {"name": "update_plan"}}
        rows.append(
            JournalRecord(
                len(rows) + 1, 1, "main", "assistant", {"role": "assistant", "tool_calls": [call]}
            )
        )
        result = {"role": "tool", "tool_call_id": f"p{n}", "content": content}
        rows.append(JournalRecord(len(rows) + 1, 1, "main", "tool_result", result))
    return rows


def test_a_point_carries_the_plan_set_before_it_by_reference():
    rows = _plan_rows("plan updated: 1 steps\n- [ ] NONCE-PLAN", "ERROR: too long")
    rows.append(JournalRecord(6, 1, "main", "user_input", {"role": "user", "content": "next"}))
    part = project_history(rows[:5], keep_point=True)
    body, _ = part.point.stored()
    assert body["pl"] == [3, 1, "p0"] and "NONCE-PLAN" not in json.dumps(body)

    resumed = project_history(rows[5:], point=_stored(part.point, rows))

    assert resumed.plan_known and resumed.plan == "- [ ] NONCE-PLAN"
    assert resumed.plan == project_history(rows).plan


def test_a_point_with_no_plan_set_knows_there_is_none():
    rows = _plan_rows("ERROR: refused")
    part = project_history(rows[:2], keep_point=True)
    resumed = project_history(rows[2:], point=_stored(part.point, rows))
    assert resumed.plan_known and resumed.plan is None


def test_a_plan_result_answered_again_without_a_plan_leaves_the_plan_to_the_records():
    rows = _plan_rows("plan updated: 1 steps\n- [ ] A")
    again = {"role": "tool", "tool_call_id": "p0", "content": "plan updated: 0 steps"}
    rows.append(JournalRecord(4, 1, "main", "tool_result", again))
    part = project_history(rows[:3], keep_point=True)
    resumed = project_history(rows[3:], point=_stored(part.point, rows))
    assert not resumed.plan_known
    assert inherited_plan(reversed(rows)) is None


def test_a_point_stored_before_it_carried_the_plan_still_reads():
    rows = _plan_rows("plan updated: 1 steps\n- [ ] A")
    rows.append(JournalRecord(4, 1, "main", "user_input", {"role": "user", "content": "next"}))
    part = project_history(rows[:2], keep_point=True)
    body, inline = part.point.stored()
    old = {key: value for key, value in body.items() if key not in ("pl", "pc", "pv")}
    point = ProjectionPoint.from_stored(old, inline, {row.seq: row.message for row in rows})

    resumed = project_history(rows[2:], point=point)

    assert resumed.messages == project_history(rows).messages
    # Its `update_plan` calls are those it shows, so a result after it still sets the plan.
    assert resumed.plan_known and resumed.plan == "- [ ] A"


def test_a_result_masked_after_a_point_was_made_is_masked_when_it_is_resumed():
    rows = [
        JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "q"}),
        _calls(2, 1, "r1-1-1"),
        JournalRecord(
            3,
            1,
            "main",
            "tool_result",
            {"role": "tool", "tool_call_id": "r1-1-1", "content": "A" * 300},
        ),
        JournalRecord(4, 2, "main", "user_input", {"role": "user", "content": "q 2"}),
        _calls(5, 2, "r2-1-1"),
        JournalRecord(
            6,
            2,
            "main",
            "tool_result",
            {"role": "tool", "tool_call_id": "r2-1-1", "content": "B" * 300},
        ),
    ]
    # The point was made before run 2 masked run 1's result; a later run resumes from it.
    part = project_history(rows[:4], keep_point=True)
    assert part.point is not None and part.masks == {}
    masks = {3: "s:3", 6: "r2:2"}
    resumed = project_history(rows[4:], point=_stored(part.point, rows), masks=masks)
    whole = project_history(rows, masks=masks)
    assert json.dumps(resumed.messages) == json.dumps(whole.messages)
    assert resumed.origins == whole.origins
    assert resumed.block() == whole.block()
    assert [m["content"] for m in whole.messages if m["role"] == "tool"] == [
        '[tool result hidden to save room; read_record(ref="s:3") shows it again]',
        '[tool result hidden to save room; read_record(ref="r2:2") shows it again]',
    ]
    # A point made with the mask keeps it (stored by reference, rebuilt as the stub).
    again = project_history(rows[:4], keep_point=True, masks=masks)
    assert again.point is not None
    body, _ = again.point.stored()
    assert body["e"][2] == {"s": 3, "as": "tool", "id": "r1-1-1", "mask": 1, "ref": "s:3"}
    resumed = project_history(rows[4:], point=_stored(again.point, rows), masks=masks)
    assert json.dumps(resumed.messages) == json.dumps(whole.messages)
