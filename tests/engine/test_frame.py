import json

import pytest

from agentloom.engine import InstanceFrame, ModelBudget, ProjectedHistory, iter_frame_records
from agentloom.engine._errors import FrameError
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import keys, make_engine

RESEARCHER = {"name": "r", "description": "d", "system_prompt": "p", "tools": ["echo"]}


def rich_frame(scripted) -> dict:
    """Return the frame of a run with tools, feedback, a child, a compaction and a status."""
    history = ProjectedHistory(
        messages=[
            item
            for n in range(8)
            for item in (
                {"role": "user", "content": f"question {n} " + "f" * 600},
                {"role": "assistant", "content": f"answer {n}"},
            )
        ],
        watermark=16,
        user_turns=8,
        model_steps=8,
    )
    gateway = scripted(
        text_response("summary NONCE-1"),
        tool_call_response(("delegate_r", {"task": "t"}), ("nope", {})),
        text_response("child answer"),
        text_response("final"),
    )
    engine = make_engine(gateway, sub_agents=[RESEARCHER], budget=ModelBudget(8_000, 1_000, 0))
    outcome = engine.start(
        run_number=5, attempt=1, system_prompt="sys", question="q", history=history
    )
    assert outcome.status == "succeeded"
    assert outcome.frame["context"]["compactions"]
    return outcome.frame


def test_a_frame_round_trips_losslessly_through_json(scripted):
    frame = rich_frame(scripted)
    as_json = json.loads(json.dumps(frame))

    loaded = InstanceFrame.from_dict(as_json)

    assert loaded.to_dict() == as_json
    assert json.loads(json.dumps(loaded.to_dict())) == as_json
    assert set(frame) == {"format", "instance", "messages", "state", "context", "binding"}
    assert set(frame["context"]) == {
        "records",
        "compactions",
        "counters",
        "inherited",
        "raw_complete",
    }
    assert set(frame["context"]["counters"]) == {
        "user_turns",
        "model_steps",
        "baseline_user_turns",
        "baseline_model_steps",
    }
    assert frame["context"]["inherited"] == {"watermark": 16}
    assert frame["context"]["raw_complete"] is True
    record = frame["context"]["records"][0]
    assert set(record) == {"seq", "kind", "message", "entry_key", "at"}


def test_re_saving_a_frame_yields_the_same_entry_keys(scripted):
    frame = rich_frame(scripted)

    again = InstanceFrame.from_dict(json.loads(json.dumps(frame))).to_dict()

    assert keys(again) == keys(frame)
    assert len(set(keys(frame))) == len(keys(frame))
    pairs = [(instance, record["entry_key"]) for instance, record in iter_frame_records(frame)]
    assert len(set(pairs)) == len(pairs)
    assert {instance for instance, _ in pairs} == {"main", "5.1"}


def test_a_compaction_snapshot_keeps_what_it_observed_and_its_counters(scripted):
    frame = rich_frame(scripted)

    (snapshot,) = frame["context"]["compactions"]

    assert snapshot["messages"][0]["role"] == "system"
    assert snapshot["messages"][1]["content"].startswith("[handoff summary]")
    assert snapshot["covered_seq"] == 1  # observed only the run's question when it compacted
    counters = snapshot["counters"]
    assert (counters["user_turns"], counters["model_steps"]) == (9, 8)
    assert (counters["baseline_user_turns"], counters["baseline_model_steps"]) == (9, 8)
    assert snapshot["inherited_watermark"] == 16


def test_a_legacy_frame_without_records_loads_and_resumes(scripted):
    legacy = {
        "format": 1,
        "instance": "main",
        "messages": [
            {"role": "system", "content": "old system"},
            {"role": "user", "content": "old question"},
        ],
        "state": {"run_number": 2, "attempt": 1, "old_field": {"kept": True}},
    }

    frame = InstanceFrame.from_dict(legacy)

    assert frame.records == []
    assert frame.raw_complete is False
    assert frame.to_dict()["state"]["old_field"] == {"kept": True}
    gateway = scripted(text_response("answer"))
    outcome = make_engine(gateway).resume(legacy, attempt=2)
    assert outcome.status == "succeeded"
    assert outcome.frame["context"]["raw_complete"] is False
    assert keys(outcome.frame) == ["assistant:1", "status:2"]
    assert gateway.requests[0].messages[:2] == legacy["messages"]


@pytest.mark.parametrize(
    "broken",
    [
        {"format": 2, "instance": "main"},
        {"format": 1, "instance": ""},
        {"format": 1, "instance": "main", "messages": {}},
        {"format": 1, "instance": "main", "context": {"records": [{"seq": 1}]}},
        {
            "format": 1,
            "instance": "main",
            "context": {
                "records": [
                    {"seq": 1, "kind": "gossip", "message": {}, "entry_key": "k", "at": "t"}
                ]
            },
        },
    ],
)
def test_malformed_frames_are_refused(broken):
    with pytest.raises(FrameError):
        InstanceFrame.from_dict(broken)
