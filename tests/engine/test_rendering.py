"""Rendering versions: new runs record the current one, old checkpoints keep their own."""

from __future__ import annotations

import json

import pytest

from agentloom.engine import (
    IMPORTED_PREFIX,
    ConfigurationError,
    ContextBinding,
    ContextPolicy,
    GatewayError,
    ImportedHistory,
    JournalRecord,
    ModelBudget,
    ModelResponse,
    ProjectedHistory,
    project_history,
    rendering_of,
)
from agentloom.engine._rendering import CURRENT_RENDERING, RENDERINGS
from agentloom.engine.testing import text_response
from tests.engine.helpers import Recorder, make_engine


def _thinking(content: str) -> ModelResponse:
    return ModelResponse(
        message={"role": "assistant", "content": content, "reasoning_content": "I think NONCE-R"},
        finish_reason="stop",
    )


def _start(engine, **options):
    return engine.start(run_number=1, attempt=1, system_prompt="sys", question="q", **options)


def test_versions_are_numbered_in_order_and_name_what_they_change():
    assert [r.version for r in RENDERINGS] == list(range(1, len(RENDERINGS) + 1))
    assert RENDERINGS[-1].version == CURRENT_RENDERING
    assert all(r.changes for r in RENDERINGS)
    assert rendering_of({}).version == 1  # a binding saved before versions existed


def test_a_new_run_records_the_current_rendering_and_keeps_reasoning(scripted):
    outcome = _start(make_engine(scripted(_thinking("answer"))))
    assert outcome.checkpoint.frame["binding"]["rendering"] == CURRENT_RENDERING
    assistant = outcome.frame["context"]["records"][-2]["message"]
    assert assistant["reasoning_content"] == "I think NONCE-R"


def test_a_run_made_under_version_1_records_no_version_and_drops_reasoning(scripted):
    outcome = _start(make_engine(scripted(_thinking("answer")), rendering=1))
    assert "rendering" not in outcome.checkpoint.frame["binding"]
    assistant = outcome.frame["context"]["records"][-2]["message"]
    assert "reasoning_content" not in assistant


def test_a_resumed_checkpoint_keeps_the_version_it_was_made_with(scripted):
    recorder = Recorder()
    first = _start(
        make_engine(scripted(GatewayError("upstream", "down")), recorder=recorder, rendering=1)
    )
    assert first.status == "failed"
    # The engine renders with the current version by default; the checkpoint says 1.
    again = make_engine(
        scripted(_thinking("done")), recorder=recorder, record_store=recorder.store()
    )
    resumed = again.resume(recorder.stored[-1], attempt=2)
    assert resumed.status == "succeeded"
    assert "rendering" not in resumed.checkpoint.frame["binding"]
    assistant = [r for r in resumed.frame["context"]["records"] if r["kind"] == "assistant"]
    assert "reasoning_content" not in assistant[-1]["message"]


def test_an_unknown_version_is_refused():
    with pytest.raises(ConfigurationError, match="rendering"):
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 0), rendering=99)
    with pytest.raises(ConfigurationError, match="rendering"):
        rendering_of({"rendering": 99})


def test_history_projected_under_another_version_is_refused(scripted):
    history = ProjectedHistory(from_journal=True, rendering=1)
    engine = make_engine(scripted(text_response("x")))
    with pytest.raises(ConfigurationError, match="rendering"):
        _start(engine, history=history)


def _row(seq, run, kind, message):
    return JournalRecord(seq, run, "main", kind, message, f"k{seq}", seq)


def _call(seq, run, call):
    calls = [{"id": call, "type": "function", "function": {"name": "echo", "arguments": "{}"}}]
    return _row(seq, run, "assistant", {"role": "assistant", "content": None, "tool_calls": calls})


# An imported session: runs 1 and 2 came with the file (seqs 1-5, run 2's call left open), run 3
# is the first of its own.
IMPORTED_ROWS = [
    _row(1, 1, "user_input", {"role": "user", "content": "q 1"}),
    _row(2, 1, "assistant", {"role": "assistant", "content": "done 1"}),
    _row(3, 2, "user_input", {"role": "user", "content": "q 2"}),
    _call(4, 2, "r2-1-1"),
    _row(5, 2, "supplement", {"role": "user", "content": "meanwhile"}),
    _row(6, 3, "user_input", {"role": "user", "content": "q 3"}),
    _row(7, 3, "assistant", {"role": "assistant", "content": "done 3"}),
]
IMPORTED = ImportedHistory(upto=5, origin="session 12 (AgentLoom 1.4), exported 2026-11-30")


def _marks(messages):
    return [i for i, m in enumerate(messages) if str(m["content"]).startswith(IMPORTED_PREFIX)]


def test_rendering_6_follows_imported_history_with_one_note_that_never_moves():
    whole = project_history(IMPORTED_ROWS, imported=IMPORTED).messages
    [at] = _marks(whole)
    note = whole[at]
    assert note["role"] == "system" and "session 12 (AgentLoom 1.4)" in note["content"]
    # After the open group's placeholder and the supplement waiting for it, before run 3.
    assert [m["role"] for m in whole[at - 3 : at]] == ["assistant", "tool", "user"]
    assert whole[at + 1] == {"role": "user", "content": "q 3"}
    # While every record is imported, the note ends the history at the same place: a run's
    # first request is extended, byte for byte, by the next run's.
    for upto in range(5, len(IMPORTED_ROWS)):
        shorter = project_history(IMPORTED_ROWS[:upto], imported=IMPORTED).messages
        assert len(_marks(shorter)) == 1
        assert json.dumps(whole[: len(shorter)]) == json.dumps(shorter)


def test_a_session_not_imported_and_older_renderings_show_no_note():
    plain = project_history(IMPORTED_ROWS).messages
    assert plain == project_history(IMPORTED_ROWS, rendering=5).messages
    assert _marks(plain) == []
    for version in range(1, 6):
        old = project_history(IMPORTED_ROWS, rendering=version).messages
        assert project_history(IMPORTED_ROWS, rendering=version, imported=IMPORTED).messages == old
    marked = project_history(IMPORTED_ROWS, imported=IMPORTED).messages
    assert [m for m in marked if not _marks([m])] == plain


def test_a_projection_that_starts_past_the_imported_records_adds_no_note():
    # The view (or point) it starts from holds the note already.
    view = {"watermark": 6, "messages": [{"role": "user", "content": "held"}]}
    after = project_history(IMPORTED_ROWS[6:], view, imported=IMPORTED).messages
    assert _marks(after) == [] and len(after) == 2
    at_the_end = {"watermark": 5, "messages": []}
    assert (
        len(_marks(project_history(IMPORTED_ROWS[5:], at_the_end, imported=IMPORTED).messages)) == 1
    )


def _result(seq, run, call, text):
    return _row(seq, run, "tool_result", {"role": "tool", "tool_call_id": call, "content": text})


# Run 2 masked run 1's result (seq 3, named as run 1 had shown it, `s:3`) and its own (seq 7,
# `r2:3`); seq 10's result was never masked.
WHOLE_RESULT = "A" * 400
MASKED_ROWS = [
    _row(1, 1, "user_input", {"role": "user", "content": "q 1"}),
    _call(2, 1, "r1-1-1"),
    _result(3, 1, "r1-1-1", WHOLE_RESULT),
    _row(4, 1, "assistant", {"role": "assistant", "content": "done 1"}),
    _row(5, 2, "user_input", {"role": "user", "content": "q 2"}),
    _call(6, 2, "r2-1-1"),
    _result(7, 2, "r2-1-1", WHOLE_RESULT),
    _row(8, 2, "status", {"status": "failed", "error": "upstream: down"}),
    _call(9, 2, "r2-2-1"),
    _result(10, 2, "r2-2-1", WHOLE_RESULT),
]
MASKS = {3: "s:3", 7: "r2:3"}


def _tool_contents(messages):
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_rendering_7_shows_each_result_a_run_masked_as_that_runs_stub():
    history = project_history(MASKED_ROWS, masks=MASKS)
    assert _tool_contents(history.messages) == [
        '[tool result hidden to save room; read_record(ref="s:3") shows it again]',
        '[tool result hidden to save room; read_record(ref="r2:3") shows it again]',
        WHOLE_RESULT,
    ]
    # The stub is a tool message answering its call, as the masking run sent it.
    assert history.messages[2] == {
        "role": "tool",
        "tool_call_id": "r1-1-1",
        "content": '[tool result hidden to save room; read_record(ref="s:3") shows it again]',
    }
    # The decision is kept with the history, so the block rebuilds the same stubs.
    assert history.block()["mk"] == {"3": "s:3", "7": "r2:3"}
    assert history.origins[2] == {"s": 3, "as": "tool", "id": "r1-1-1", "mask": 1, "ref": "s:3"}
    # The journal's records are left whole.
    assert MASKED_ROWS[2].message["content"] == WHOLE_RESULT


def test_renderings_1_to_6_show_masked_results_whole():
    for version in range(1, 7):
        old = project_history(MASKED_ROWS, rendering=version)
        given = project_history(MASKED_ROWS, rendering=version, masks=MASKS)
        assert json.dumps(given.messages) == json.dumps(old.messages)
        assert _tool_contents(given.messages) == [WHOLE_RESULT] * 3
        assert "mk" not in given.block()


def test_a_masked_result_shown_as_a_late_note_stays_a_note():
    # A result recorded after its group was closed is a note, not the tool message a run masked.
    rows = [*MASKED_ROWS, _result(11, 2, "r2-1-1", WHOLE_RESULT)]
    history = project_history(rows, masks={11: "r2:9"})
    assert history.masks == {}
    assert WHOLE_RESULT in history.messages[-1]["content"]


def test_rendering_7_shows_a_result_masked_after_the_view_was_saved_as_its_stub():
    # The view a new run starts from is older than run 2's masking of the result it shows.
    saved = project_history(MASKED_ROWS[:4])
    view = {"watermark": 4, "messages": saved.messages, "origins": saved.origins}
    history = project_history(MASKED_ROWS[4:], view, masks=MASKS)
    assert _tool_contents(history.messages)[0] == (
        '[tool result hidden to save room; read_record(ref="s:3") shows it again]'
    )
    assert history.block()["mk"] == {"3": "s:3", "7": "r2:3"}
    # The view's own messages are left as they were; an older rendering shows the result whole.
    assert view["messages"][2]["content"] == WHOLE_RESULT
    old = project_history(MASKED_ROWS[4:], view, masks=MASKS, rendering=6)
    assert _tool_contents(old.messages)[0] == WHOLE_RESULT
