"""Large records in sessions: excerpts on the demo window, read-back, recovery, masked ranges."""

from __future__ import annotations

import json

import pytest

from context_app.engine_adapter import run_measures, snapshot_question_room, version_binding
from context_app.models import AgentVersion
from sessions_app.demo import ensure_demo
from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.selectors.context import run_context
from sessions_app.selectors.history import history_for_new_run
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import session_create
from tests.factories import ask, make_run

pytestmark = pytest.mark.django_db


def _demo_session(alice):
    space = ensure_demo(owner=alice)
    version = space.agents.get().versions.get()
    return session_create(user=alice, agent_version=version)


def _within_budget(run: Run) -> bool:
    effective = run.session.agent_version.snapshot["budget"]
    budget = effective["context_window"] - effective["max_output_tokens"]
    budget -= effective["safety_margin_tokens"]
    return all(call.request_estimate <= budget for call in ModelCall.objects.filter(run=run))


def test_a_30000_character_tool_result_succeeds_on_the_demo_window(alice):
    session = _demo_session(alice)
    run = ask(session, alice, '/tool big_output {"chars": 30000}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert _within_budget(run)
    record = SessionMessage.objects.get(run=run, kind="tool_result")
    assert len(record.message["content"]) == 30_000, "the journal keeps the whole result"
    shown = [m for m in frame_of(run).messages if m.get("role") == "tool"]
    assert f'read_record(ref="r{run.number}:3"' in shown[0]["content"]
    assert replay_run(run).ok
    # The next question inherits the record as an excerpt of the journal row, not whole.
    after = ask(session, alice, "what did the tool return?")
    assert after.status == Run.Status.SUCCEEDED, after.error
    assert _within_budget(after)


def test_a_session_holding_a_huge_record_recovers_without_a_failed_compaction(alice):
    session = _demo_session(alice)
    first = ask(session, alice, "NONCE-FIRST")
    # A 200,000-character question journaled before questions were measured at the door.
    huge = "NONCE-HUGE-HEAD " + "h" * 200_000 + " NONCE-HUGE-TAIL"
    # It is adopted into the journal (as runs from before the journal are) by the next question.
    legacy = make_run(
        session,
        number=first.number + 1,
        question=huge,
        status=Run.Status.FAILED,
        error="context_budget_exceeded",
    )
    run = ask(session, alice, "NONCE-NEXT and what came before?")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert _within_budget(run)
    log = run.checkpoint["state"]["compaction_log"]
    assert not [row for row in log if row["outcome"] == "failed"]
    # What the run inherited shows the record's head and tail and names it.
    inherited = history_for_new_run(session, version_binding(session.agent_version), as_of=run)
    seen = json.dumps(inherited.messages)
    assert "NONCE-HUGE-HEAD" in seen and "NONCE-HUGE-TAIL" in seen and len(seen) < 20_000
    # By the reference its run gave it (rendering 5): the adopted record keeps its frame's seq.
    huge = SessionMessage.objects.get(run=legacy, kind="user_input")
    assert huge.local_seq is not None
    assert f'ref=\\"r{legacy.number}:{huge.local_seq}\\"' in seen
    # And the model can read it back by that name.
    ref = f"r{legacy.number}:{huge.local_seq}"
    read = ask(session, alice, f'/tool read_record {{"ref": "{ref}", "offset": 200000}}')
    assert read.status == Run.Status.SUCCEEDED, read.error
    result = SessionMessage.objects.get(run=read, kind="tool_result").message["content"]
    assert "NONCE-HUGE-TAIL" in result and not result.startswith("ERROR"), result[:200]


def test_the_next_run_reads_an_earlier_record_back(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=6_144)
    first = ask(session, alice, '/tool big_output {"chars": 30000}')
    seq = SessionMessage.objects.get(run=first, kind="tool_result").seq
    run = ask(session, alice, f'/tool read_record {{"ref": "s:{seq}", "offset": 100}}')
    assert run.status == Run.Status.SUCCEEDED, run.error
    result = SessionMessage.objects.get(run=run, kind="tool_result").message["content"]
    assert result.startswith(f"[s:{seq}: characters 100 to ")
    # A run reads only what it inherited: a record after its watermark is refused.
    later = ask(session, alice, f'/tool read_record {{"ref": "s:{seq + 10_000}"}}')
    refused = SessionMessage.objects.get(run=later, kind="tool_result").message["content"]
    assert refused.startswith("ERROR: ")


def test_versions_published_before_keep_the_truncation(alice, gateway, make_demo_session):
    session = make_demo_session()
    version = session.agent_version
    snapshot = {k: v for k, v in version.snapshot.items() if k != "large_records"}
    # Versions are immutable; a version published before has no large-record policy.
    old = AgentVersion.objects.create(
        agent=version.agent, number=version.number + 1, snapshot=snapshot
    )
    old_session = session_create(user=alice, agent_version=old)
    run = ask(old_session, alice, '/tool big_output {"chars": 30000}')
    shown = [m for m in frame_of(run).messages if m.get("role") == "tool"]
    assert "[truncated: 6000 characters cut" in shown[0]["content"]
    tools = {t["function"]["name"] for r in gateway.action_requests() for t in r.tools}
    assert "read_record" not in tools


def test_the_context_api_lists_masked_ranges(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=6_144)
    question = '/tool big_output {"chars": 1200}'
    runs = [ask(session, alice, question) for _ in range(6)]
    items = [item for run in runs for item in run_context(run)["compactions"]]
    masked = [item for item in items if item["stage"] == "masking"]
    assert masked, items
    journal = dict(SessionMessage.objects.filter(session=session).values_list("seq", "kind"))
    for item in masked:
        if item["outcome"] == "succeeded":
            assert item["masked_ranges"] and item["calls"] == 0
        seqs = [s for a, b in item["masked_ranges"] for s in range(a, b + 1)]
        assert all(journal[seq] == "tool_result" for seq in seqs)


def test_the_room_for_a_question_counts_the_tools_the_first_request_carries(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    snapshot = session.agent_version.snapshot
    ask(session, alice, "NONCE-FIRST")
    first = gateway.action_requests()[0]
    assert [t["function"]["name"] for t in first.tools][-1] == "read_record"
    room = snapshot_question_room(snapshot)
    policy, _, estimator = run_measures(snapshot)
    system = [{"role": "system", "content": snapshot["system_prompt"]}]
    assert room.pinned == policy.measure(system, first.tools, estimator)
