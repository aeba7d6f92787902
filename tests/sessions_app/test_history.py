"""The session history service: what new runs inherit, resume, views and the journal."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentloom.engine import Checkpoint
from context_app.engine_adapter import version_binding
from sessions_app.models import MAIN_INSTANCE, ModelCall, Run, SessionMessage, SessionView
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.selectors.history import history_for_new_run
from sessions_app.selectors.runs import call_responses
from sessions_app.selectors.views import view_content
from sessions_app.services.execution import run_execute
from sessions_app.services.journal import JournalWriter
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    supplement_add,
)
from tests.factories import ask
from tests.sessions_app.conftest import SECRET, long_question

pytestmark = pytest.mark.django_db


def _journal(session, instance=MAIN_INSTANCE):
    return list(SessionMessage.objects.filter(session=session, instance=instance).order_by("seq"))


def _texts(request) -> str:
    return json.dumps(request.messages, ensure_ascii=False)


def test_eighth_question_sees_every_earlier_tool_interaction(alice, gateway, make_demo_session):
    session = make_demo_session()
    for n in range(1, 8):
        run = ask(session, alice, f'/tool echo {{"text": "NONCE-{n:03d}"}}')
        assert run.status == "succeeded", run.error
    gateway.requests.clear()
    eighth = ask(session, alice, "What did the echoes say?")
    assert eighth.status == "succeeded"
    first_request = _texts(gateway.action_requests()[0])
    for n in range(1, 8):
        assert f"NONCE-{n:03d}" in first_request  # tool-call arguments and results of runs 1–7
    first = gateway.action_requests()[0].messages
    calls = [m for m in first if m.get("role") == "assistant" and m.get("tool_calls")]
    results = [m for m in first if m.get("role") == "tool"]
    assert len(calls) == 7 and len(results) == 7


def test_a_history_load_reads_only_what_can_hold_its_records(alice, gateway, make_demo_session):
    session = make_demo_session()
    binding = version_binding(session.agent_version)
    first = run_ask(user=alice, session=session, question="NONCE-FIRST")
    # Asked before anything was journaled: no view, point or record can precede it.
    with CaptureQueriesContext(connection) as queries:
        history = history_for_new_run(session, binding, as_of=first)
    assert [q["sql"] for q in queries.captured_queries] == []
    assert history.messages == [] and history.watermark == 0
    assert run_execute(run_id=first.pk) == "succeeded"
    second = run_ask(user=alice, session=session, question="NONCE-SECOND")
    # A session without views: their derivations are read once, and no view.
    with CaptureQueriesContext(connection) as queries:
        history = history_for_new_run(session, binding, as_of=second)
    statements = [q["sql"] for q in queries.captured_queries]
    assert sum("sessions_app_sessionview" in sql for sql in statements) == 1, statements
    assert sum("sessions_app_projectionpoint" in sql for sql in statements) == 1, statements
    assert "NONCE-FIRST" in json.dumps(history.messages)
    assert history.view_revision is None


def test_failed_cancelled_runs_and_supplements_stay_in_history(alice, gateway, make_demo_session):
    session = make_demo_session()
    failed = ask(session, alice, "NONCE-FAILED question [boom]")
    assert failed.status == "failed"
    cancelled = run_ask(user=alice, session=session, question="NONCE-CANCELLED question")
    run_cancel(user=alice, run=cancelled)
    with_supplement = run_ask(user=alice, session=session, question="NONCE-MAIN question")
    supplement_add(user=alice, run=with_supplement, text="NONCE-SUPPLEMENT detail")
    run_execute(run_id=with_supplement.pk)
    gateway.requests.clear()
    ask(session, alice, "and now?")
    history = _texts(gateway.action_requests()[0])
    for marker in ("NONCE-FAILED", "NONCE-CANCELLED", "NONCE-MAIN", "NONCE-SUPPLEMENT"):
        assert marker in history
    statuses = [r.message for r in _journal(session) if r.kind == "status"]
    assert {"status": "failed", "error": "upstream: the model provider failed"} in statuses or any(
        s["status"] == "failed" for s in statuses
    )
    assert any(s["status"] == "cancelled" for s in statuses)


def test_redelivered_checkpoint_saves_change_nothing(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = ask(session, alice, '/tool echo {"text": "hello"}')
    before = [(m.seq, m.entry_key, m.message) for m in _journal(session)]
    next_seq = type(session).objects.get(pk=session.pk).next_seq
    frame = frame_of(run)
    # Every record handed over again, as a save redelivered after a crash would.
    redelivered = Checkpoint(run.checkpoint, [("main", record) for record in frame.records])
    for _ in range(100):
        JournalWriter(run, lease_owner=None).sync(redelivered)
    after = [(m.seq, m.entry_key, m.message) for m in _journal(session)]
    assert after == before
    assert type(session).objects.get(pk=session.pk).next_seq == next_seq


INTERLEAVED = "other runs' records lie inside the covered range (not an observed prefix)"


def test_resume_continues_the_original_run_without_later_questions(
    alice, gateway, make_demo_session, view_refusals
):
    """A → B → C → resume A → D: resumed A sees neither B nor C, D sees all; A compacts too."""
    # Triggers that fire inside runs: every run compacts, A's resume included.
    session = make_demo_session(policy={"user_turns": 2, "model_steps": 1})
    a = ask(session, alice, "NONCE-A first question [boom]")
    assert a.status == "failed"
    assert not a.checkpoint["context"]["compactions"], "A's first attempt did not compact"
    b = ask(session, alice, '/tool echo {"text": "NONCE-B"}')
    c = ask(session, alice, '/tool echo {"text": "NONCE-C"}')
    assert (b.status, c.status) == ("succeeded", "succeeded"), (b.error, c.error)
    c_views = list(SessionView.objects.filter(run=c).order_by("revision"))
    assert c_views, "C saved a reusable view"
    # B's snapshot was saved at once; C's first waited for the results of its tool call.
    assert (view_refusals[b.pk], view_refusals[c.pk]) == ([], ["pending tool calls"])

    # Resume A: it must see neither B nor C.
    gateway.requests.clear()
    run_resume(user=alice, run=a)
    a_supplement = supplement_add(
        user=alice, run=Run.objects.get(pk=a.pk), text='/tool echo {"text": "NONCE-A2"} retry'
    )
    assert a_supplement.position == 1
    run_execute(run_id=a.pk)
    a.refresh_from_db()
    seen_by_a = " ".join(_texts(r) for r in gateway.requests)
    assert "NONCE-B" not in seen_by_a and "NONCE-C" not in seen_by_a
    assert a.status == "succeeded", a.error
    assert a.attempt == 2
    # A compacted after its resume (its model step is the trigger), from its own view only.
    assert a.checkpoint["context"]["compactions"], "A compacted on resume"
    assert "compaction" in [r.purpose for r in gateway.requests]

    # A's resumed records come after C's in the journal: no reusable view spans B and C, so
    # none of A's compactions was saved as a view.
    assert not SessionView.objects.filter(run=a).exists()
    assert view_refusals[a.pk] == [INTERLEAVED]
    journal = _journal(session)
    a_new = [
        m
        for m in journal
        if m.run_id == a.pk and m.seq > max(x.seq for x in journal if x.run_id == c.pk)
    ]
    assert a_new, "A's resumed records follow C's"

    # D starts from C's latest view, then sees A's new records exactly once.
    binding = version_binding(session.agent_version)
    assert history_for_new_run(session, binding).view_revision == c_views[-1].revision
    gateway.requests.clear()
    d = ask(session, alice, "NONCE-D what happened?")
    assert d.status == "succeeded"
    d_request = gateway.action_requests()[0]
    d_first = _texts(d_request)
    for marker in ("NONCE-B", "NONCE-C", "NONCE-A2"):
        assert marker in d_first
    contents = [str(m.get("content")) for m in d_request.messages]
    assert contents.count('/tool echo {"text": "NONCE-A2"} retry') == 1
    assert (
        sum(1 for m in d_request.messages if m["role"] == "tool" and m["content"] == "NONCE-A2")
        == 1
    )
    # D's counters come from the journal: four user_input records before D, plus D's own.
    counters = d.checkpoint["context"]["counters"]
    assert d.counters == counters  # the clear copy the API lists
    user_inputs = sum(1 for m in _journal(session) if m.kind == "user_input")
    assert counters["user_turns"] == user_inputs == 4
    assistant_steps = sum(1 for m in _journal(session) if m.kind == "assistant")
    assert counters["model_steps"] == assistant_steps


def test_a_supplement_journaled_inside_a_compacting_run_is_seen_by_the_next_question(
    alice, gateway, make_demo_session, view_refusals
):
    """A fails; B runs; a supplement to A is journaled between B's records; B compacts.

    B never saw the supplement, so its snapshot is not a prefix it observed: no view is saved
    over the supplement, and the next question still sees it.
    """
    session = make_demo_session(policy={"model_steps": 1})
    a = ask(session, alice, "NONCE-A first question [boom]")
    assert a.status == "failed"
    b = run_ask(user=alice, session=session, question='/tool echo {"text": "NONCE-B"}')
    gateway.during_call.append(
        lambda: supplement_add(user=alice, run=a, text="NONCE-SUPPLEMENT for A")
    )
    run_execute(run_id=b.pk)
    b.refresh_from_db()
    assert b.status == "succeeded", b.error
    journal = _journal(session)
    (supplement,) = [m for m in journal if m.kind == "supplement"]
    b_seqs = [m.seq for m in journal if m.run_id == b.pk]
    assert min(b_seqs) < supplement.seq < max(b_seqs)
    assert b.checkpoint["context"]["compactions"], "B compacted after the supplement"
    assert "NONCE-SUPPLEMENT" not in " ".join(_texts(r) for r in gateway.requests)
    assert view_refusals[b.pk] == [INTERLEAVED]
    assert not SessionView.objects.filter(run=b).exists()

    gateway.requests.clear()
    d = ask(session, alice, "NONCE-D what happened?")
    assert d.status == "succeeded"
    assert "NONCE-SUPPLEMENT for A" in _texts(gateway.action_requests()[0])


def test_a_run_resumed_after_failing_saves_no_view_over_its_own_failure(
    alice, gateway, make_demo_session, view_refusals
):
    session = make_demo_session(policy={"model_steps": 1})
    a = ask(session, alice, '/tool echo {"text": "NONCE-A"} [boom]')
    assert a.status == "failed"
    run_resume(user=alice, run=a)
    run_execute(run_id=a.pk)
    a.refresh_from_db()
    assert a.status == "succeeded", a.error
    assert a.checkpoint["context"]["compactions"], "A compacted on resume"
    # The failed attempt's status lies inside what the snapshot covers, and in no view.
    assert view_refusals[a.pk] == ["terminal records inside the covered range are not in the view"]
    assert not SessionView.objects.filter(run=a).exists()


def test_a_snapshot_waits_for_a_supplement_that_arrived_during_its_compaction(
    alice, gateway, make_demo_session, view_refusals
):
    session = make_demo_session(policy={"model_steps": 1})
    ask(session, alice, long_question(1))  # material a summary shortens
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "NONCE-E"}')

    gateway.requests.clear()
    gateway.during_call.append(
        lambda: supplement_add(user=alice, run=run, text="NONCE-SUPPLEMENT late")
    )
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    # The run's first call is its compaction (the inherited step fires the trigger).
    assert gateway.requests[0].purpose == "compaction"
    assert run.checkpoint["context"]["compactions"], "the run compacted"
    # Saved once its tool call had a result and the supplement was journaled, not before.
    assert view_refusals[run.pk] == ["pending tool calls", "supplements are still queued"]
    # The first snapshot was never saved; the next one observed the supplement, and was.
    (view,) = SessionView.objects.filter(run=run)
    assert view.snapshot_revision == 2
    assert view.watermark == SessionMessage.objects.get(run=run, kind="supplement").seq


def test_model_calls_are_recorded_with_estimates(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = ask(session, alice, '/tool calculator {"expression": "6*7"}')
    calls = list(ModelCall.objects.filter(run=run).order_by("id"))
    assert [c.purpose for c in calls] == ["action", "action"]
    assert all(c.request_estimate > 0 for c in calls)
    assert call_responses(calls)[0]["message"]["tool_calls"]


def test_no_plaintext_key_in_journal_checkpoint_or_model_calls(
    alice, gateway, make_demo_session, caplog
):
    session = make_demo_session()
    run = ask(session, alice, "please [leak-key]")
    assert run.status == "succeeded"
    stored = [json.dumps(m.message) for m in _journal(session)]
    stored.append(json.dumps(Run.objects.get(pk=run.pk).checkpoint))
    stored += [json.dumps(c.response) for c in ModelCall.objects.filter(run=run)]
    stored.append(Run.objects.get(pk=run.pk).answer or "")
    stored += [record.getMessage() for record in caplog.records]
    assert all(SECRET not in text for text in stored)
    assert any("[redacted]" in text for text in stored)


def test_a_compacted_view_is_saved_and_reused_by_the_next_run(alice, gateway, make_demo_session):
    session = make_demo_session(policy={"model_steps": 1})
    ask(session, alice, '/tool echo {"text": "NONCE-ONE"}')
    ask(session, alice, '/tool echo {"text": "NONCE-TWO"}')
    views = list(SessionView.objects.filter(session=session).order_by("revision"))
    assert views, "a compaction inside a run that observed the whole prefix saves a view"
    best = max(views, key=lambda v: v.watermark)
    history = history_for_new_run(session, version_binding(session.agent_version))
    # The next run starts from the best view, then the records after its watermark.
    assert history.view_revision == best.revision
    view_messages, _ = view_content(best)
    assert history.messages[: len(view_messages)] == view_messages
    after = SessionMessage.objects.filter(session=session, instance="main", seq__gt=best.watermark)
    assert history.user_turns == best.user_turns + after.filter(kind="user_input").count()
    assert (history.baseline_user_turns, history.baseline_model_steps) == (
        best.baseline_user_turns,
        best.baseline_model_steps,
    )
    # A view is reused only under the binding it was made with.
    assert best.binding == Run.objects.filter(session=session).first().checkpoint["binding"]
    budget = best.binding["budget"]
    other_binding = {
        **best.binding,
        "budget": {**budget, "context_window": budget["context_window"] + 1},
    }
    assert history_for_new_run(session, other_binding).view_revision is None


def test_views_are_refused_with_queued_supplements_or_terminal_records(alice, make_demo_session):
    from sessions_app.services.reusable_views import view_refusal_reason
    from tests.factories import make_run

    session = make_demo_session()
    run = make_run(session, status="running")
    frame = {
        "state": {},
        "context": {
            "records": [
                {
                    "seq": 1,
                    "kind": "user_input",
                    "entry_key": "user_input",
                    "message": {},
                    "at": "",
                },
            ]
        },
    }
    snapshot = {"covered_seq": 1}
    row = SessionMessage.objects.create(
        session=session,
        seq=1,
        run=run,
        instance="main",
        kind="user_input",
        entry_key="user_input",
        local_seq=1,
        message={"role": "user", "content": "q"},
        created_at=run.created_at,
    )

    def reason(frame=frame, snapshot=snapshot):
        return view_refusal_reason(
            run_id=run.pk,
            session_id=session.pk,
            inherited_watermark=0,
            frame=frame,
            snapshot=snapshot,
        )[0]

    assert reason() is None
    # A snapshot that covers a record not journaled yet.
    assert reason(snapshot={"covered_seq": 2}) == "covered records are not all journaled"
    assert reason(frame={**frame, "state": {"pending_tool_calls": [{"id": "x"}]}}) == (
        "pending tool calls"
    )
    queued_in_frame = {**frame, "state": {"queued_supplements": [{"source_key": "1"}]}}
    assert reason(frame=queued_in_frame) == "supplements are still queued"
    supplement = run.supplements.create(position=1, text="later")
    assert reason() == "supplements are still queued"
    supplement.delete()
    # Another run's record inside the covered range: not a prefix this run observed.
    other = make_run(session, status="failed", number=9)
    SessionMessage.objects.create(
        session=session,
        seq=2,
        run=other,
        instance="main",
        kind="status",
        entry_key="status:1",
        message={"status": "failed", "error": "x"},
        created_at=run.created_at,
    )
    row.seq = 3
    row.save()
    assert "prefix" in reason()
    # A terminal record of the run itself, inside the range but not in any view.
    SessionMessage.objects.filter(run=other).delete()
    SessionMessage.objects.create(
        session=session,
        seq=2,
        run=run,
        instance="main",
        kind="status",
        entry_key="status:1",
        message={"status": "failed", "error": "x"},
        created_at=run.created_at,
    )
    assert "terminal" in reason()


def test_supplement_sent_during_the_last_model_step_is_journaled(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="just answer")
    gateway.during_call.append(
        lambda: supplement_add(user=alice, run=run, text="NONCE-LATE supplement")
    )
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded"
    kinds = [(m.kind, m.message.get("content")) for m in _journal(session)]
    position = kinds.index(("supplement", "NONCE-LATE supplement"))
    assert kinds[-1][0] == "status" and position < len(kinds) - 1
    assert not run.supplements.filter(consumed_at__isnull=True).exists()
    # The model was shown the late supplement before the run ended.
    assert "NONCE-LATE" in _texts(gateway.action_requests()[-1])
    # Once succeeded, further supplements are refused.
    with pytest.raises(Exception) as refused:
        supplement_add(user=alice, run=run, text="too late")
    assert getattr(refused.value, "status", None) == 409


def test_a_running_run_stops_at_its_next_safe_point_when_cancelled(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question='/tool echo {"text": "x"}')
    gateway.during_call.append(lambda: run_cancel(user=alice, run=Run.objects.get(pk=run.pk)))
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "cancelled"
    journal = _journal(session)
    assert [m.kind for m in journal][:2] == ["user_input", "assistant"]  # partial journal kept
    assert journal[-1].message["status"] == "cancelled"


def test_child_instances_are_journaled_apart_from_the_main_instance(
    alice, gateway, make_demo_session
):
    session = make_demo_session(
        sub_agents=[
            {"name": "helper", "description": "echoes", "system_prompt": "Echo.", "tools": ["echo"]}
        ]
    )
    run = ask(
        session,
        alice,
        '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"NONCE-CHILD\\"}"}',
    )
    assert run.status == "succeeded", run.error
    child = _journal(session, instance=f"{run.number}.1")
    assert child and child[0].kind == "user_input"
    assert any(m.kind == "tool_result" and "NONCE-CHILD" in str(m.message) for m in child)
    main = _journal(session)
    delegation = [m for m in main if m.kind == "tool_result"]
    assert len(delegation) == 1  # the parent received only the delegation result
    main_calls = [
        call["function"]["name"]
        for m in main
        if m.kind == "assistant"
        for call in m.message.get("tool_calls") or []
    ]
    assert main_calls == ["delegate_helper"]  # the child's echo stayed in the child
    counters = run.checkpoint["context"]["counters"]
    assert counters["model_steps"] == sum(1 for m in main if m.kind == "assistant")


def test_a_connection_that_changed_model_fails_the_run_clearly(alice, gateway, make_demo_session):
    session = make_demo_session()
    connection = session.agent_version.model_connection
    connection.model_id = "another-model"
    connection.save()
    run = ask(session, alice, "hello")
    assert run.status == "failed"
    assert "another-model" in run.error and "Publish a new version" in run.error
    assert [m.kind for m in _journal(session)] == ["user_input", "status"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_asks_yield_one_run_and_one_conflict(alice, make_demo_session):
    import threading

    from django.db import connections

    from agentloom.errors import Conflict

    session = make_demo_session()
    barrier = threading.Barrier(2)
    outcomes = []

    def ask_once(n):
        try:
            barrier.wait(timeout=10)
            run_ask(user=alice, session=session, question=f"q{n}")
            outcomes.append("run")
        except Conflict:
            outcomes.append("conflict")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ask_once, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["conflict", "run"]
    assert Run.objects.filter(session=session).count() == 1


def test_the_demo_agent_compacts_and_keeps_answering(alice):
    """The shipped demo: a small window, big tool outputs, several questions in a row."""
    from sessions_app.demo import ensure_demo
    from sessions_app.services.runs import session_create

    space = ensure_demo(owner=alice)
    version = space.agents.get().versions.get()
    session = session_create(user=alice, agent_version=version)
    for n in range(5):
        run = ask(session, alice, f'/tool big_output {{"chars": 1500}} round {n}')
        assert run.status == "succeeded", run.error
        assert ModelCall.objects.filter(run=run).count() <= 6, "no compaction loop"
    logs = [
        entry
        for run in Run.objects.filter(session=session)
        for entry in run.checkpoint["state"]["compaction_log"]
    ]
    assert any(entry["outcome"] == "succeeded" for entry in logs)


def test_a_supplement_to_a_failed_run_is_journaled_at_once_and_shown_by_its_resume(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = ask(session, alice, "NONCE-Q [boom]")
    assert run.status == "failed"
    waiting = supplement_add(user=alice, run=run, text="NONCE-WAITING detail")
    assert waiting.consumed_at is None  # journaled, not shown to the model yet
    assert SessionMessage.objects.filter(run=run, kind="supplement").count() == 1
    run_resume(user=alice, run=run)
    run_execute(run_id=run.pk)
    waiting.refresh_from_db()
    assert waiting.consumed_at is not None
    assert SessionMessage.objects.filter(run=run, kind="supplement").get().message == {
        "role": "user",
        "content": "NONCE-WAITING detail",
    }


def test_an_expired_lease_is_swept_before_a_new_question_is_refused(
    alice, gateway, make_demo_session
):
    from datetime import timedelta

    from django.utils import timezone

    session = make_demo_session()
    stale = run_ask(user=alice, session=session, question="left behind")
    Run.objects.filter(pk=stale.pk).update(
        status="running", lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(1)
    )
    fresh = run_ask(user=alice, session=session, question="next")  # no 409
    stale.refresh_from_db()
    assert (stale.status, stale.error) == ("failed", "worker_lost")
    assert fresh.status == "queued"
    assert SessionMessage.objects.filter(run=stale, kind="status").get().message == {
        "status": "failed",
        "error": "worker_lost",
    }


def test_a_version_published_without_a_policy_runs_on_the_character_threshold(
    alice, gateway, make_demo_session, settings
):
    from context_app.models import AgentVersion

    settings.LEGACY_CONTEXT_CHARS = 1_000
    session = make_demo_session()
    legacy_snapshot = {**session.agent_version.snapshot, "context_policy": None}
    legacy = AgentVersion.objects.create(
        agent=session.agent,
        number=99,
        snapshot=legacy_snapshot,
        model_connection=session.agent_version.model_connection,
    )
    from sessions_app.services.runs import session_create

    legacy_session = session_create(user=alice, agent_version=legacy)
    run = ask(legacy_session, alice, '/tool big_output {"chars": 3000}')
    assert run.status == "succeeded"
    assert run.checkpoint["binding"]["policy"] == {"legacy_context_chars": 1_000}
    log = run.checkpoint["state"]["compaction_log"]
    # Only the character threshold fires: no budget, turn or step trigger exists for it.
    assert log and {tuple(entry["trigger"]) for entry in log} == {("characters",)}


def test_a_question_cancelled_in_the_queue_and_resumed_never_sees_later_runs(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, "NONCE-BEFORE")
    early = run_ask(user=alice, session=session, question="NONCE-EARLY question")
    run_cancel(user=alice, run=early)  # cancelled before any worker started it
    ask(session, alice, "NONCE-LATER question")
    gateway.requests.clear()
    run_resume(user=alice, run=Run.objects.get(pk=early.pk))
    run_execute(run_id=early.pk)
    seen = _texts(gateway.action_requests()[0])
    assert "NONCE-BEFORE" in seen
    assert "NONCE-LATER" not in seen
    assert seen.count("NONCE-EARLY question") == 1
    assert replay_run(Run.objects.get(pk=early.pk)).ok
