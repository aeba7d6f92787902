"""Many runs in flight in one worker process: one lease renewer, database slots, a real worker."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time

import pytest
from celery import Celery
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from agentloom.config import database_from_url, database_slots
from agentloom.engine import WatchedCall, Watcher
from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.selectors.checkpoints import full_checkpoint
from sessions_app.selectors.runs import call_responses
from sessions_app.services.renewer import RunLease, lease_renewer
from sessions_app.services.runs import run_ask, run_claim, run_resume, sweep_expired_leases
from sessions_app.services.slots import DatabaseSlots
from tests.factories import make_agent, make_connection, make_run, make_session, make_space
from tests.sessions_app.test_worker import QUEUE, _start_worker, _wait
from tests.support.delayed_model import DelayedModel


def _claimed_runs(owner_user, count: int) -> list[Run]:
    space = make_space(admin=owner_user)
    from tests.factories import make_version

    version = make_version(make_agent(space, owner_user))
    runs = []
    for index in range(count):
        run = make_run(make_session(version, owner_user))
        assert run_claim(run_id=run.pk, owner=f"owner-{index}")
        runs.append(Run.objects.get(pk=run.pk))
    return runs


def _watch(renewer: Watcher, run: Run, *, deadline=None, relay_cancel=False):
    lost, cancelled = threading.Event(), threading.Event()
    watch = renewer.run(RunLease(run_id=run.pk, owner=run.lease_owner))
    call = WatchedCall(
        deadline_seconds=deadline, lost=lost, cancelled=cancelled, relay_cancel=relay_cancel
    )
    return watch.watching(call), lost, cancelled


@pytest.fixture
def fast_heartbeat(settings):
    settings.RUN_LEASE_SECONDS = 30
    settings.RUN_HEARTBEAT_SECONDS = 0.2
    return settings


# --- the lease renewer -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_one_renewer_thread_renews_every_call_in_flight(alice, fast_heartbeat):
    runs = _claimed_runs(alice, 30)
    before = {run.pk: run.lease_expires_at for run in runs}
    renewer = lease_renewer()
    threads = threading.active_count()
    with contextlib.ExitStack() as stack:
        signals = [stack.enter_context(_watch(renewer, run)[0]) for run in runs]
        assert renewer.in_flight() == 30
        time.sleep(0.9)
        # One thread for all thirty calls, not one each.
        assert threading.active_count() == threads + 1
    assert len(signals) == 30 and renewer.in_flight() == 0
    after = dict(Run.objects.filter(pk__in=before).values_list("pk", "lease_expires_at"))
    assert all(after[pk] > before[pk] for pk in before), "every lease renewed"
    assert renewer.beats >= 30


@pytest.mark.django_db(transaction=True)
def test_a_lost_lease_signals_its_own_call_only(alice, fast_heartbeat):
    kept, taken = _claimed_runs(alice, 2)
    renewer = lease_renewer()
    watch_kept, lost_kept, _ = _watch(renewer, kept)
    watch_taken, lost_taken, cancelled_taken = _watch(renewer, taken)
    Run.objects.filter(pk=taken.pk).update(lease_owner="another-worker")
    with watch_kept, watch_taken:
        assert lost_taken.wait(2), "the lost lease is noticed at the next beat"
    assert cancelled_taken.is_set()
    assert not lost_kept.is_set()
    # The renewer never wrote over the lease another worker holds.
    assert Run.objects.get(pk=taken.pk).lease_owner == "another-worker"


@pytest.mark.django_db(transaction=True)
def test_no_renewal_past_the_calls_deadline(alice, fast_heartbeat):
    (run,) = _claimed_runs(alice, 1)
    renewer = lease_renewer()
    watch, lost, _ = _watch(renewer, run, deadline=0.3)
    with watch:
        time.sleep(0.6)
        frozen = Run.objects.get(pk=run.pk).lease_expires_at
        time.sleep(0.6)
        assert Run.objects.get(pk=run.pk).lease_expires_at == frozen
    assert not lost.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_request_reaches_that_runs_tool_only(alice, fast_heartbeat):
    asked, other = _claimed_runs(alice, 2)
    renewer = lease_renewer(cancel_poll_seconds=0.1)
    watch_asked, _, cancel_asked = _watch(renewer, asked, relay_cancel=True)
    watch_other, _, cancel_other = _watch(renewer, other, relay_cancel=True)
    with watch_asked, watch_other:
        time.sleep(0.3)
        assert not cancel_asked.is_set()
        Run.objects.filter(pk=asked.pk).update(cancel_requested=True)
        assert cancel_asked.wait(2)
        time.sleep(0.3)
    assert not cancel_other.is_set()


# --- database slots --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_database_slots_bound_the_threads_at_the_database(alice):
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        # An in-memory test database is one connection that Django never closes.
        pytest.skip("needs a file database (TEST_SQLITE_NAME) or PostgreSQL")
    slots = DatabaseSlots(3)
    inside = []
    lock = threading.Lock()

    def work():
        with slots.held():
            with lock:
                inside.append(1)
            Run.objects.count()
            time.sleep(0.05)
            with lock:
                inside.pop()
        # The slot's connection went back with it.
        assert connection.connection is None

    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert slots.peak == 3


def test_database_slots_are_re_entrant_within_a_thread():
    slots = DatabaseSlots(1)
    done = threading.Event()

    def nested():
        with slots.held(), slots.held():  # a sub-agent's hook inside its parent's tool
            done.set()

    thread = threading.Thread(target=nested)
    thread.start()
    thread.join(2)
    assert done.is_set(), "a thread never waits for the slot it holds"


def _check_own_records_after_resume(run: Run, rows: list[SessionMessage]) -> None:
    own = {str(run.session_id)}
    for row in rows:
        if row.kind != "status":
            assert _nonces(row.message) in (own, set()), f"run {run.pk}: another run's record"
    assert _nonces(full_checkpoint(run)) == own
    assert _nonces(run.answer) == own
    statuses = [row.message for row in rows if row.kind == "status"]
    assert statuses[0] == {"status": "failed", "error": "worker_lost"}
    assert statuses[-1]["status"] == "succeeded"


def test_a_pool_per_process_on_postgresql_and_the_slots_below_it():
    pooled = database_from_url("postgres://u:p@db:5432/name", pool_size=10)
    assert pooled["OPTIONS"]["pool"]["max_size"] == 10 and pooled["CONN_MAX_AGE"] == 0
    assert "pool" not in database_from_url("postgres://u@db/name").get("OPTIONS", {})
    assert database_slots(False, 10, 0) == 9, "the renewer keeps the last connection"
    assert database_slots(True, 10, 0) == 1, "SQLite's runs take turns"
    assert database_slots(False, 0, 0) == 9 and database_slots(False, 10, 4) == 4
    for pool, asked in ((10, 10), (1, 0)):
        with pytest.raises(ImproperlyConfigured):
            database_slots(False, pool, asked)


# --- a real worker process: 50 runs in flight ------------------------------------------------


def _send_all(redis_url: str, run_ids: list[int]) -> None:
    sender = Celery(broker=redis_url)
    with sender.connection_for_write() as broker:
        for run_id in run_ids:
            sender.send_task(
                "sessions_app.tasks.execute_run", args=[run_id], queue=QUEUE, connection=broker
            )
    sender.close()


def _delayed_sessions(alice, model: DelayedModel, count: int):
    from context_app.services.agents import agent_publish

    space = make_space(admin=alice)
    connection_row = make_connection(
        space,
        provider="openai_compatible",
        base_url=model.base_url,
        model_id="delayed-model",
        api_key="test-key",
    )
    agent = make_agent(space, alice, connection=connection_row, tools=["echo"])
    version = agent_publish(user=alice, agent=agent)
    return [make_session(version, alice) for _ in range(count)]


def _nonces(value) -> set[str]:
    return set(re.findall(r"NONCE-(\d+)-", str(value)))


def _check_own_records(run: Run) -> None:
    """The run's journal, checkpoint, answer and model calls name its own session only."""
    own = {str(run.session_id)}
    rows = list(SessionMessage.objects.filter(run=run).order_by("seq"))
    keys = [(row.instance, row.entry_key) for row in rows]
    assert len(keys) == len(set(keys)), "every record once"
    for row in rows:
        if row.kind != "status":
            assert _nonces(row.message) == own, f"run {run.pk} journaled another run's record"
    assert _nonces(full_checkpoint(run)) == own
    assert _nonces(run.answer) == own
    calls = ModelCall.objects.filter(run=run, purpose="action")
    assert calls.count() == 2 and not calls.filter(discarded=True).exists()
    assert all(_nonces(response) == own for response in call_responses(list(calls)))


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_runs_in_flight_in_one_worker_keep_their_own_records(redis_url, alice, tmp_path):
    model = DelayedModel(1.5)
    sessions = _delayed_sessions(alice, model, 50)
    worker = _start_worker(
        redis_url, tmp_path, lease=10, pool="threads:50", ALLOW_PRIVATE_MODEL_HOSTS="true"
    )
    try:
        runs = [
            run_ask(user=alice, session=session, question=f"NONCE-{session.pk}- what is it?")
            for session in sessions
        ]
        _send_all(redis_url, [run.pk for run in runs])
        _wait(
            lambda: model.peak_in_flight >= 40 or None, 60, "the runs to wait on the model at once"
        )
        _wait(
            lambda: (
                not Run.objects.filter(
                    pk__in=[r.pk for r in runs], status__in=Run.ACTIVE_STATUSES
                ).exists()
            ),
            120,
            "every run to finish",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        model.close()
    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.status == "succeeded", run.error
        _check_own_records(run)
        assert (run.counters["user_turns"], run.counters["model_steps"]) == (1, 2)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_kill_9_of_a_worker_with_fifty_runs_in_flight_leaves_every_run_resumable(
    redis_url, alice, tmp_path
):
    model = DelayedModel(4)
    sessions = _delayed_sessions(alice, model, 50)
    worker = _start_worker(
        redis_url, tmp_path, lease=4, pool="threads:50", ALLOW_PRIVATE_MODEL_HOSTS="true"
    )
    ids = []
    try:
        for session in sessions:
            run = run_ask(user=alice, session=session, question=f"NONCE-{session.pk}- tell me")
            ids.append(run.pk)
        _send_all(redis_url, ids)
        _wait(lambda: model.in_flight >= 45 or None, 60, "the runs to wait on the model at once")
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    assert Run.objects.filter(pk__in=ids, status="running").count() >= 45
    time.sleep(4.5)
    swept = set(sweep_expired_leases())
    failed = Run.objects.filter(pk__in=ids, status="failed", error="worker_lost")
    assert set(failed.values_list("pk", flat=True)) == swept
    assert Run.objects.filter(pk__in=ids, status__in=Run.ACTIVE_STATUSES).count() == 0

    for run in failed:
        run_resume(user=alice, run=run)
    worker = _start_worker(
        redis_url, tmp_path, lease=10, pool="threads:50", ALLOW_PRIVATE_MODEL_HOSTS="true"
    )
    model.delay = 0.5
    try:
        _send_all(redis_url, sorted(swept))
        _wait(
            lambda: not Run.objects.filter(pk__in=ids, status__in=Run.ACTIVE_STATUSES).exists(),
            120,
            "every resumed run to finish",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
        model.close()
    for run in Run.objects.filter(pk__in=ids):
        assert run.status == "succeeded", run.error
        rows = list(SessionMessage.objects.filter(run=run).order_by("seq"))
        keys = [(row.instance, row.entry_key) for row in rows]
        assert len(keys) == len(set(keys)), "every record once"
        _check_own_records_after_resume(run, rows)
