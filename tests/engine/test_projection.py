import json
from dataclasses import replace

from agentloom.engine import (
    GatewayError,
    JournalRecord,
    ProjectedHistory,
    ReusableView,
    project_history,
)
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import SessionJournal, make_engine
from tests.support.openai_contract import assert_valid_request


def row(seq, run, kind, message, instance="main"):
    return JournalRecord(seq, run, instance, kind, message)


def user(seq, run, text):
    return row(seq, run, "user_input", {"role": "user", "content": text})


def calls(seq, run, *call_ids, name="echo"):
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        for call_id in call_ids
    ]
    return row(
        seq, run, "assistant", {"role": "assistant", "content": None, "tool_calls": tool_calls}
    )


def result(seq, run, call_id, content):
    return row(
        seq, run, "tool_result", {"role": "tool", "tool_call_id": call_id, "content": content}
    )


def answer(seq, run, text):
    return row(seq, run, "assistant", {"role": "assistant", "content": text})


def assert_usable(history: ProjectedHistory):
    """The history must be valid inside a request: system first, a new question last."""
    messages = [{"role": "system", "content": "s"}, *history.messages]
    messages.append({"role": "user", "content": "next question"})
    assert_valid_request({"model": "x", "messages": messages})


def test_history_call_ids_are_rewritten_consistently_and_cannot_collide():
    records = [
        user(1, 1, "first"),
        calls(2, 1, "call_1"),
        result(3, 1, "call_1", "one"),
        answer(4, 1, "done one"),
        user(5, 2, "second"),
        calls(6, 2, "call_1"),
        result(7, 2, "call_1", "two"),
        answer(8, 2, "done two"),
    ]

    history = project_history(records)

    assert_usable(history)
    ids = [m["tool_calls"][0]["id"] for m in history.messages if m.get("tool_calls")]
    assert ids == ["h2_1", "h6_1"]
    tool_messages = [
        (m["tool_call_id"], m["content"]) for m in history.messages if m["role"] == "tool"
    ]
    assert tool_messages == [("h2_1", "one"), ("h6_1", "two")]
    assert "call_1" not in json.dumps(history.messages)
    assert (history.user_turns, history.model_steps, history.watermark) == (2, 4, 8)
    assert (history.baseline_user_turns, history.baseline_model_steps) == (0, 0)
    assert history.view_revision is None


def test_history_keeps_the_session_unique_ids_a_run_gave_its_calls_from_rendering_3():
    records = [
        user(1, 1, "first"),
        calls(2, 1, "r1-1-1", "r1-1-2"),
        result(3, 1, "r1-1-1", "one"),
        result(4, 1, "r1-1-2", "two"),
        answer(5, 1, "done"),
        user(6, 2, "second"),
        calls(7, 2, "call_1"),  # a provider's id, not unique: rewritten as before
        result(8, 2, "call_1", "three"),
        calls(9, 2, "r1-1-1"),  # already shown: rewritten, never shown twice
        result(10, 2, "r1-1-1", "four"),
    ]

    def ids(history):
        return [c["id"] for m in history.messages for c in m.get("tool_calls") or []]

    current = project_history(records)
    assert_usable(current)
    assert ids(current) == ["r1-1-1", "r1-1-2", "h7_1", "h9_1"]
    answered = [m["tool_call_id"] for m in current.messages if m["role"] == "tool"]
    assert answered == ["r1-1-1", "r1-1-2", "h7_1", "h9_1"]
    # Rendering 2 (and every checkpoint made with it) keeps rewriting them all.
    assert ids(project_history(records, rendering=2)) == ["h2_1", "h2_2", "h7_1", "h9_1"]


def test_a_call_without_a_result_gets_an_unknown_result_that_forbids_assuming_success():
    records = [
        user(1, 1, "q"),
        calls(2, 1, "a", "b"),
        result(3, 1, "a", "fine"),
        row(4, 1, "status", {"status": "failed", "error": "worker_lost"}),
    ]

    history = project_history(records)

    assert_usable(history)
    unknown = history.messages[3]
    assert unknown["role"] == "tool"
    assert unknown["tool_call_id"] == "h2_2"
    assert json.loads(unknown["content"])["status"] == "unknown"
    assert "Do not assume it succeeded" in unknown["content"]
    # The run's state is a system note, never in the user's voice nor a second assistant turn.
    assert history.messages[4] == {
        "role": "system",
        "content": "[run note] run 1 failed: worker_lost",
    }
    # Rendering 1 showed it on the assistant side, and still does for checkpoints made with it.
    assert project_history(records, rendering=1).messages[4] == {
        "role": "assistant",
        "content": "[run note] run 1 failed: worker_lost",
    }


def test_a_late_result_is_kept_as_history_material_without_breaking_protocol():
    records = [
        user(1, "A", "question A"),
        calls(2, "A", "c1"),
        user(3, "B", "question B"),
        answer(4, "B", "answer B"),
        result(5, "A", "c1", "late value NONCE-77"),
        answer(6, "A", "answer A"),
    ]

    history = project_history(records)

    assert_usable(history)
    roles = [m["role"] for m in history.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "user", "assistant"]
    assert json.loads(history.messages[2]["content"])["status"] == "unknown"
    late = history.messages[5]["content"]
    assert late.startswith("[late tool result of call h2_1 (echo) from run A")
    assert "NONCE-77" in late


def test_notes_wait_until_the_open_tool_group_is_complete():
    records = [
        user(1, 1, "q"),
        calls(2, 1, "c1", "c2"),
        result(3, 1, "c1", "r1"),
        row(4, 1, "feedback", {"role": "user", "content": "[feedback] tool echo failed"}),
        row(5, 1, "supplement", {"role": "user", "content": "also this"}),
        result(6, 1, "c2", "r2"),
        row(7, 1, "feedback", {"role": "user", "content": "plain feedback"}),
    ]

    history = project_history(records)

    assert_usable(history)
    assert [m["role"] for m in history.messages] == ["user", "assistant", "tool", "tool"] + [
        "user"
    ] * 3
    assert [m["content"] for m in history.messages[4:]] == [
        "[feedback] tool echo failed",
        "also this",
        "[feedback] plain feedback",
    ]


def test_a_reusable_view_is_continued_with_the_records_after_its_watermark():
    view = ReusableView(
        watermark=4,
        messages=[{"role": "user", "content": "[handoff summary] earlier"}],
        user_turns=2,
        model_steps=3,
        baseline_user_turns=2,
        baseline_model_steps=3,
        revision=7,
    )
    records = [
        user(1, 1, "IGNORED"),
        answer(2, 1, "IGNORED"),
        user(3, 2, "IGNORED"),
        answer(4, 2, "IGNORED"),
        user(6, 3, "third"),
        answer(9, 3, "answer three"),
    ]

    history = project_history(records, view)

    assert "IGNORED" not in json.dumps(history.messages)
    assert history.messages[0]["content"] == "[handoff summary] earlier"
    assert [m["content"] for m in history.messages[1:]] == ["third", "answer three"]
    assert (history.user_turns, history.model_steps) == (3, 4)
    assert (history.baseline_user_turns, history.baseline_model_steps) == (2, 3)
    assert (history.watermark, history.view_revision) == (9, 7)
    as_mapping = project_history(records, {**view.__dict__})
    assert as_mapping == history


def test_child_instance_records_are_not_inherited():
    records = [
        user(1, 1, "q"),
        row(2, 1, "user_input", {"role": "user", "content": "CHILD TASK"}, instance="1.1"),
        row(3, 1, "assistant", {"role": "assistant", "content": "CHILD"}, instance="1.1"),
        answer(4, 1, "a"),
    ]

    history = project_history(records)

    assert "CHILD" not in json.dumps(history.messages)
    assert (history.user_turns, history.model_steps) == (1, 1)


def test_projected_tool_results_obey_the_view_cap():
    records = [user(1, 1, "q"), calls(2, 1, "c"), result(3, 1, "c", "x" * 30_000)]

    content = project_history(records).messages[2]["content"]

    assert content.startswith("x" * 24_000)
    assert "x" * 24_001 not in content
    assert "[truncated: 6000 characters cut" in content


def test_walk_a_b_c_resume_a_d(scripted):
    """A → B → C → resume A → D: resuming A sees neither B nor C; D sees everything once."""
    journal = SessionJournal()

    run_a = make_engine(
        scripted(
            tool_call_response(("echo", {"text": "A-tool"})),
            GatewayError("upstream", "The provider failed to answer."),
        )
    )
    outcome_a = run_a.start(
        run_number=1, attempt=1, system_prompt="s", question="question A", history=None
    )
    assert outcome_a.status == "failed"
    journal.sync("A", outcome_a.frame)

    for run_id, number, text in (("B", 2, "question B"), ("C", 3, "question C")):
        history = project_history(journal.rows)
        gateway = scripted(text_response(f"answer {run_id}"))
        outcome = make_engine(gateway).start(
            run_number=number, attempt=1, system_prompt="s", question=text, history=history
        )
        assert outcome.status == "succeeded"
        journal.sync(run_id, outcome.frame)

    resumed_gateway = scripted(text_response("answer A"))
    resumed = make_engine(resumed_gateway).resume(outcome_a.frame, attempt=2)
    assert resumed.status == "succeeded"
    seen_by_a = json.dumps([r.messages for r in resumed_gateway.requests])
    assert "question B" not in seen_by_a and "question C" not in seen_by_a
    new_rows = journal.sync("A", resumed.frame)
    assert [r.kind for r in new_rows] == ["assistant", "status"]

    history_d = project_history(journal.rows)
    assert_usable(history_d)
    texts = [m.get("content") for m in history_d.messages]
    for expected in ("question A", "question B", "question C", "answer B", "answer C", "answer A"):
        assert texts.count(expected) == 1, expected
    assert history_d.user_turns == 3
    assert history_d.model_steps == 4  # A: tool call + answer; B; C
    gateway_d = scripted(text_response("answer D"))
    outcome_d = make_engine(gateway_d).start(
        run_number=4, attempt=1, system_prompt="s", question="question D", history=history_d
    )
    assert outcome_d.frame["context"]["counters"]["user_turns"] == 4
    assert outcome_d.frame["context"]["inherited"]["watermark"] == journal.rows[-1].seq


def test_run_states_in_a_row_collapse_into_one_short_note_from_rendering_3():
    stop = "context_budget_exceeded: the action request is estimated at 5529, above 5376"
    records = [user(1, 1, "first"), answer(2, 1, "done")]
    records.append(row(3, 1, "status", {"status": "succeeded", "error": None}))
    seq = 4
    for run in (2, 3, 4):
        records.append(user(seq, run, f"question {run}"))
        records.append(
            row(
                seq + 1,
                run,
                "feedback",
                {"role": "system", "content": f"[run note] run stopped: {stop}"},
            )
        )
        records.append(row(seq + 2, run, "status", {"status": "failed", "error": stop}))
        seq += 3
    records.append(row(seq, 4, "status", {"status": "failed", "error": "upstream: 503"}))

    history = project_history(records, rendering=4)

    notes = [m["content"] for m in history.messages if "[run note]" in str(m["content"])]
    assert notes == [
        "[run note] run 1 succeeded",
        "[run note] run 2 failed: context_budget_exceeded (s:5)",
        "[run note] run 3 failed: context_budget_exceeded (s:8)",
        "[run note] run 4 failed: context_budget_exceeded (s:11); run 4 failed: upstream",
    ]
    # From rendering 5 a state never joins the note before it: notes are only appended.
    appended = project_history(records, rendering=5)
    notes = [m["content"] for m in appended.messages if "[run note]" in str(m["content"])]
    assert notes[-2:] == [
        "[run note] run 4 failed: context_budget_exceeded (s:11)",
        "[run note] run 4 failed: upstream",
    ]
    # The questions stay, each once; rendering 2 shows every stop note and state in full.
    assert [m["content"] for m in history.messages if m["role"] == "user"] == [
        "first",
        "question 2",
        "question 3",
        "question 4",
    ]
    old = project_history(records, rendering=2)
    assert sum(stop in str(m["content"]) for m in old.messages) == 6


def test_run_states_text_names_each_run_and_bounds_a_long_stretch():
    from agentloom.engine._protocol import run_states_text

    states = [(n, "failed", "context_budget_exceeded", f"s:{n * 3}") for n in range(7, 27)]
    text = run_states_text([*states, (27, "succeeded", "", None)])
    assert text == "runs 7–26 failed: context_budget_exceeded (s:21 … s:78); run 27 succeeded"


def _adopted_legacy_run() -> list[JournalRecord]:
    """A run from before the journal as adoption stored it: its feedback as supplements."""

    def adopted(seq, index, kind, message):
        return JournalRecord(seq, 1, "main", kind, message, f"legacy:{index}")

    return [
        JournalRecord(1, 1, "main", "user_input", {"role": "user", "content": "NONCE-Q"}),
        adopted(2, 1, "assistant", {"role": "assistant", "content": "partial"}),
        adopted(3, 2, "supplement", {"role": "user", "content": "[feedback] tool echo failed"}),
        adopted(4, 3, "supplement", {"role": "user", "content": "[feedback] run stopped: crash"}),
        JournalRecord(5, 1, "main", "status", {"status": "failed", "error": "crash"}),
        # A supplement the user wrote, beginning the same way, stays the user's.
        JournalRecord(
            6, 2, "main", "supplement", {"role": "user", "content": "[feedback] mine"}, "s:1"
        ),
    ]


def test_adopted_legacy_feedback_is_shown_as_feedback_from_rendering_4():
    history = project_history(_adopted_legacy_run())
    assert history.messages[1:] == [
        {"role": "assistant", "content": "partial"},
        {"role": "user", "content": "[feedback] tool echo failed"},
        # The stop note is the run's state, never the user's latest words.
        {"role": "system", "content": "[run note] run 1 failed: crash (s:4)"},
        {"role": "user", "content": "[feedback] mine"},
    ]
    assert [origin.get("as") for origin in history.origins if origin] == [
        "user",
        "assistant_ids",
        "feedback",
        "user",
    ]


def test_under_rendering_3_adopted_legacy_feedback_projects_as_before():
    history = project_history(_adopted_legacy_run(), rendering=3)
    assert history.messages[1:] == [
        {"role": "assistant", "content": "partial"},
        {"role": "user", "content": "[feedback] tool echo failed"},
        {"role": "user", "content": "[feedback] run stopped: crash"},
        {"role": "system", "content": "[run note] run 1 failed: crash"},
        {"role": "user", "content": "[feedback] mine"},
    ]


def test_a_history_read_anew_is_measured_from_the_sizes_its_records_carry(monkeypatch):
    import agentloom.engine._sizecache as sizecache_module
    from agentloom.engine import JsonBytesEstimator

    def sized(record):
        return replace(record, size=len(json.dumps(record.message, separators=(",", ":"))))

    records = [
        sized(user(1, 1, "NONCE-sized first")),
        sized(calls(2, 1, "r1-1-1")),  # the run's own id: shown as recorded
        sized(result(3, 1, "r1-1-1", "NONCE-sized one")),
        sized(answer(4, 1, "NONCE-sized done")),
        sized(user(5, 2, "NONCE-sized second")),
        sized(calls(6, 2, "call_1")),  # rewritten to h6_1: measured anew
        sized(result(7, 2, "call_1", "NONCE-sized two")),
    ]
    history = project_history(records)
    expected = len(json.dumps(history.messages, separators=(",", ":")))
    serialised = []
    real = sizecache_module.canonical_json
    monkeypatch.setattr(
        sizecache_module, "canonical_json", lambda item: serialised.append(item) or real(item)
    )

    size = JsonBytesEstimator(per_request=0, per_message=0).estimate(history.messages, [])

    assert size == expected
    by_seq = {record.seq: record.message for record in records}
    changed = [
        message
        for message, origin in zip(history.messages, history.origins, strict=True)
        if not origin or message != by_seq[origin["s"]]
    ]
    assert changed[0]["tool_calls"][0]["id"] == "h6_1"
    assert serialised == changed
