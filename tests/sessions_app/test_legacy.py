"""Legacy runs (checkpoints without records, or no checkpoint at all) join the journal."""

import json

import pytest
from django.core.management import call_command

from sessions_app.models import Run, SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.legacy import adopt_legacy_runs
from sessions_app.services.runs import run_resume
from tests.factories import ask, make_run

pytestmark = pytest.mark.django_db

LEGACY_FRAME = {
    "format": 1,
    "instance": "main",
    "messages": [
        {"role": "system", "content": "You are the demo agent."},
        {"role": "user", "content": "[summary of older runs]"},
        {"role": "user", "content": "NONCE-LEGACY question"},
        {"role": "assistant", "content": "partial NONCE-LEGACY answer"},
    ],
    "state": {},
    "context": {"compactions": [], "counters": {"user_turns": 1, "model_steps": 1}},
}


def test_legacy_runs_adopt_their_surviving_suffix_once(alice, gateway, make_demo_session):
    session = make_demo_session()
    old = make_run(session, status="succeeded", question="NONCE-OLD question")
    Run.objects.filter(pk=old.pk).update(answer="NONCE-OLD answer")
    legacy = make_run(session, status="failed", question="NONCE-LEGACY question")
    Run.objects.filter(pk=legacy.pk).update(checkpoint=LEGACY_FRAME, error="crashed")

    added = adopt_legacy_runs(session=session)
    assert adopt_legacy_runs(session=session) == 0  # idempotent
    rows = list(SessionMessage.objects.filter(session=session).order_by("seq"))
    assert added == len(rows) == 6
    assert [(r.run_id, r.kind) for r in rows] == [
        (old.pk, "user_input"),
        (old.pk, "assistant"),
        (old.pk, "status"),
        (legacy.pk, "user_input"),
        (legacy.pk, "assistant"),
        (legacy.pk, "status"),
    ]
    # The inherited summary before the run's own question is not adopted as this run's record.
    assert all("summary of older runs" not in str(r.message) for r in rows)
    frame = Run.objects.get(pk=legacy.pk).checkpoint
    assert frame["context"]["raw_complete"] is False
    assert len(frame["context"]["records"]) == 3

    # A new run inherits the adopted records; the legacy run can be resumed.
    gateway.requests.clear()
    ask(session, alice, "what came before?")
    history = str(gateway.action_requests()[0].messages)
    assert "NONCE-OLD answer" in history and "partial NONCE-LEGACY answer" in history


def test_resuming_a_legacy_checkpoint_adopts_it_first(alice, gateway, make_demo_session):
    session = make_demo_session()
    legacy = make_run(session, status="failed", question="NONCE-LEGACY question")
    Run.objects.filter(pk=legacy.pk).update(checkpoint=LEGACY_FRAME, error="crashed")
    run_resume(user=alice, run=Run.objects.get(pk=legacy.pk))
    assert run_execute(run_id=legacy.pk) == "succeeded"
    rows = list(SessionMessage.objects.filter(run=legacy).order_by("seq"))
    keys = [r.entry_key for r in rows]
    assert keys[:2] == ["user_input", "legacy:1"] and len(keys) == len(set(keys))
    assert Run.objects.get(pk=legacy.pk).checkpoint["context"]["raw_complete"] is False


def test_adopt_command(alice, make_demo_session, capsys):
    session = make_demo_session()
    make_run(session, status="succeeded", question="q")
    call_command("adopt_legacy_journal")
    assert "adopted 2 record(s)" in capsys.readouterr().out


def test_a_new_question_adopts_unjournaled_runs_first(alice, gateway, make_demo_session):
    from sessions_app.models import SessionMessage
    from tests.factories import make_run

    session = make_demo_session()
    ask(session, alice, "NONCE-JOURNALED first")
    top = SessionMessage.objects.filter(session=session).order_by("-seq").first().seq
    # A run recorded before the journal existed: finished, with no journal rows.
    legacy = make_run(session, status="succeeded", number=5, question="NONCE-OLD question")
    Run.objects.filter(pk=legacy.pk).update(answer="NONCE-OLD answer")
    later = make_run(session, status="succeeded", number=6, question="NONCE-LATER question")
    gateway.requests.clear()
    ask(session, alice, "NONCE-NEW question")
    seen = json.dumps(gateway.action_requests()[0].messages)
    assert "NONCE-OLD question" in seen and "NONCE-OLD answer" in seen
    adopted = SessionMessage.objects.filter(run=legacy).order_by("seq")
    # Adopted after what the journal already held, in run order, marked incomplete.
    assert adopted.first().seq == top + 1
    assert [row.kind for row in adopted] == ["user_input", "assistant", "status"]
    assert SessionMessage.objects.filter(run=later).order_by("seq").first().seq == top + 4
    assert seen.index("NONCE-OLD question") < seen.index("NONCE-LATER question")


def test_resuming_a_legacy_run_adopts_older_runs_first_and_keeps_its_failure(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    old = make_run(session, status="succeeded", question="NONCE-OLD question")
    Run.objects.filter(pk=old.pk).update(answer="NONCE-OLD answer")
    legacy = make_run(session, status="failed", question="NONCE-LEGACY question")
    Run.objects.filter(pk=legacy.pk).update(checkpoint=LEGACY_FRAME, error="crashed")

    run_resume(user=alice, run=Run.objects.get(pk=legacy.pk))
    # Adopted before the claim, in run order, with the failed attempt's status.
    assert run_execute(run_id=legacy.pk) == "succeeded"
    ask(session, alice, "NONCE-NEW question")
    rows = list(SessionMessage.objects.filter(session=session).order_by("seq"))
    numbers = [row.run.number for row in rows]
    assert numbers == sorted(numbers) == [1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3]
    statuses = [(row.entry_key, row.message) for row in rows if row.run_id == legacy.pk]
    assert [item for item in statuses if item[0].startswith("status:")] == [
        ("status:1", {"status": "failed", "error": "crashed"}),
        ("status:2", {"status": "succeeded", "error": None}),
    ]


def test_legacy_feedback_and_run_notes_are_adopted_as_feedback(alice, gateway, make_demo_session):
    session = make_demo_session()
    legacy = make_run(session, status="failed", question="NONCE-LEGACY question")
    frame = {
        **LEGACY_FRAME,
        "messages": [
            *LEGACY_FRAME["messages"],
            {"role": "user", "content": "[feedback] tool echo (c1) failed: NONCE-FEEDBACK"},
            {"role": "user", "content": "NONCE-SUPPLEMENT from the user"},
            {"role": "user", "content": "[feedback] run stopped: upstream: NONCE-STOP"},
        ],
    }
    Run.objects.filter(pk=legacy.pk).update(checkpoint=frame, error="upstream: NONCE-STOP")
    adopt_legacy_runs(session=session)
    rows = SessionMessage.objects.filter(run=legacy).order_by("seq")
    assert [row.kind for row in rows] == [
        "user_input",
        "assistant",
        "feedback",
        "supplement",
        "feedback",
        "status",
    ]
    # The next question reads the stop as the run's state, not as the user's latest words.
    gateway.requests.clear()
    ask(session, alice, "NONCE-NEXT")
    seen = gateway.action_requests()[0].messages
    users = [m["content"] for m in seen if m["role"] == "user"]
    assert not any("NONCE-STOP" in text for text in users)
    assert "[feedback] tool echo (c1) failed: NONCE-FEEDBACK" in users
    assert "[run note] run 1 failed: upstream (s:" in json.dumps(seen)
