"""How a run ends: its terminal status and its Run row agree, and no accepted supplement is lost."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agentloom.engine import GatewayError
from agentloom.errors import Conflict
from sessions_app.models import MAIN_INSTANCE, Run, RunSupplement, SessionMessage
from sessions_app.services import journal
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import (
    run_ask,
    run_resume,
    supplement_add,
    sweep_expired_leases,
)

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """The worker process dies (kill -9): nothing after this point runs."""


def _kill_after_terminal_save(monkeypatch) -> None:
    """Kill the worker right after the save that journals the run's terminal status."""
    sync = journal.JournalWriter.sync

    def sync_then_die(self, checkpoint, **run_fields):
        result = sync(self, checkpoint, **run_fields)
        if any(
            instance == MAIN_INSTANCE and record.kind == "status"
            for instance, record in checkpoint.records
        ):
            raise WorkerKilled
        return result

    monkeypatch.setattr(journal.JournalWriter, "sync", sync_then_die)


def _statuses(run) -> list[dict]:
    return list(
        SessionMessage.objects.filter(run=run, kind="status")
        .order_by("seq")
        .values_list("message", flat=True)
    )


def _expire(run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_a_worker_killed_after_its_last_save_leaves_journal_and_run_in_agreement(
    alice, gateway, make_demo_session, monkeypatch
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="What is 2+2?")
    _kill_after_terminal_save(monkeypatch)
    with pytest.raises(WorkerKilled):
        run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.error, run.lease_owner, run.lease_expires_at) == (
        "succeeded",
        "",
        "",
        None,
    )
    assert run.finished_at is not None
    assert "You asked: What is 2+2?" in run.answer
    _expire(run)
    assert sweep_expired_leases() == []
    with pytest.raises(Conflict):
        run_resume(user=alice, run=run)
    assert _statuses(run) == [{"status": "succeeded", "error": None}]
    assert len(gateway.action_requests()) == 1


def test_a_failure_is_ended_by_the_save_that_journals_it(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="[boom] What is 2+2?")
    assert run_execute(run_id=run.pk) == "failed"
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "upstream: the model provider failed")
    assert run.answer is None
    assert _statuses(run) == [{"status": "failed", "error": "upstream: the model provider failed"}]


def test_a_sweep_never_contradicts_a_journaled_terminal_status(
    alice, gateway, make_demo_session, monkeypatch
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="What is 2+2?")
    _kill_after_terminal_save(monkeypatch)
    # A release that ended the row apart from that save also kept the whole checkpoint (slim
    # checkpoints, written only by the save that ends the row, came after).
    monkeypatch.setattr(journal, "finished_checkpoint", lambda stored, frame: stored)
    with pytest.raises(WorkerKilled):
        run_execute(run_id=run.pk)
    # As a worker of an older release left it: the status journaled, the row still running.
    Run.objects.filter(pk=run.pk).update(
        status="running", answer=None, finished_at=None, lease_owner="gone"
    )
    _expire(run)
    assert sweep_expired_leases() == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.error, run.lease_owner, run.lease_expires_at) == (
        "succeeded",
        "",
        "",
        None,
    )
    assert "You asked: What is 2+2?" in run.answer
    assert _statuses(run) == [{"status": "succeeded", "error": None}]


def _fail_after_a_supplement(alice, gateway, run_holder: list) -> None:
    """During the next model call, send a supplement; then the provider fails."""

    def supplement_then_fail():
        supplement_add(user=alice, run=run_holder[0], text="NONCE-SUPPLEMENT also say hi")
        raise GatewayError("upstream", "the model provider failed", status=503)

    gateway.during_call = [supplement_then_fail]


def _supplement_rows(session) -> list[SessionMessage]:
    return list(SessionMessage.objects.filter(session=session, kind="supplement").order_by("seq"))


def _shown(request) -> str:
    return json.dumps(request.messages)


def _failed_with_a_supplement(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="What is 2+2?")
    _fail_after_a_supplement(alice, gateway, [run])
    assert run_execute(run_id=run.pk) == "failed"
    run.refresh_from_db()
    return session, run


def test_a_supplement_accepted_before_a_failure_reaches_the_journal(
    alice, gateway, make_demo_session
):
    session, run = _failed_with_a_supplement(alice, gateway, make_demo_session)
    assert run.status == "failed"
    rows = _supplement_rows(session)
    assert [row.message["content"] for row in rows] == ["NONCE-SUPPLEMENT also say hi"]
    status = SessionMessage.objects.get(run=run, kind="status")
    assert rows[0].seq > status.seq  # journaled at the terminal save, after the status
    assert replay_run(run).ok
    # A later question sees it in its history.
    later = run_ask(user=alice, session=session, question="And now?")
    assert run_execute(run_id=later.pk) == "succeeded"
    assert "NONCE-SUPPLEMENT" in _shown(gateway.action_requests()[-1])
    assert len(_supplement_rows(session)) == 1


def test_a_resume_shows_a_journaled_supplement_at_its_first_safe_point_and_journals_it_once(
    alice, gateway, make_demo_session
):
    session, run = _failed_with_a_supplement(alice, gateway, make_demo_session)
    supplement = RunSupplement.objects.get(run=run)
    assert supplement.consumed_at is None  # journaled, not yet shown to the model
    before = len(gateway.action_requests())
    run_resume(user=alice, run=run)
    assert run_execute(run_id=run.pk) == "succeeded"
    first = gateway.action_requests()[before]
    users = [m["content"] for m in first.messages if m.get("role") == "user"]
    assert users[-1] == "NONCE-SUPPLEMENT also say hi"
    rows = _supplement_rows(session)
    assert len(rows) == 1
    assert rows[0].local_seq is not None  # the resumed frame's record is that row
    supplement.refresh_from_db()
    assert supplement.consumed_at is not None
    report = replay_run(Run.objects.get(pk=run.pk))
    assert report.ok, report.differences
    later = run_ask(user=alice, session=session, question="And now?")
    assert run_execute(run_id=later.pk) == "succeeded"
    asked = [m for m in gateway.action_requests()[-1].messages if m.get("role") == "user"]
    assert [m["content"] for m in asked].count("NONCE-SUPPLEMENT also say hi") == 1


def test_a_supplement_sent_to_a_failed_run_is_journaled_at_once(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="[boom] What is 2+2?")
    assert run_execute(run_id=run.pk) == "failed"
    run.refresh_from_db()
    supplement_add(user=alice, run=run, text="NONCE-LATE")
    assert [row.message["content"] for row in _supplement_rows(session)] == ["NONCE-LATE"]
    later = run_ask(user=alice, session=session, question="And now?")
    assert run_execute(run_id=later.pk) == "succeeded"
    assert "NONCE-LATE" in _shown(gateway.action_requests()[-1])


def test_a_supplement_of_a_run_swept_after_its_worker_died_reaches_the_journal(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="What is 2+2?")
    supplement_add(user=alice, run=run, text="NONCE-QUEUED")
    _expire(run)
    assert sweep_expired_leases() == [run.pk]
    assert [row.message["content"] for row in _supplement_rows(session)] == ["NONCE-QUEUED"]
