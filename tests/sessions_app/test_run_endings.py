"""How a run ends: its terminal status and its Run row agree, and no accepted supplement is lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentloom.errors import Conflict
from sessions_app.models import MAIN_INSTANCE, Run, SessionMessage
from sessions_app.services import journal
from sessions_app.services.execution import run_execute
from sessions_app.services.runs import run_ask, run_resume, sweep_expired_leases

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
