"""Runs on a real Celery worker process over Redis: delivery, leases, a killed worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from sessions_app.models import Run, SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import claim_run, run_ask, run_resume, sweep_expired_leases
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_version,
)

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    conf = connection.settings_dict
    if connection.vendor == "postgresql":
        user = conf.get("USER") or "postgres"
        return f"postgres://{user}@{conf['HOST']}:{conf['PORT'] or 5432}/{conf['NAME']}"
    name = str(conf["NAME"])
    if name == ":memory:" or "mode=memory" in name:
        pytest.skip("worker tests need a file database (set TEST_SQLITE_NAME)")
    return f"sqlite:///{name}"


def _start_worker(redis_url: str, tmp_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": redis_url,
        "AGENTLOOM_VAR_DIR": str(settings.VAR_DIR),
        "RUN_LEASE_SECONDS": "3",
        "PYTHONPATH": str(ROOT),
    }
    log = open(tmp_path / f"worker-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentloom.celery",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _send(redis_url: str, run_id: int) -> None:
    sender = Celery(broker=redis_url)
    sender.send_task("sessions_app.tasks.execute_run", args=[run_id])
    sender.close()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def local_session(alice):
    space = make_space(admin=alice)
    connection_row = make_connection(space)
    agent = make_agent(space, alice, connection=connection_row, tools=["sleep", "echo"])
    from context_app.services import agent_publish

    version = agent_publish(user=alice, agent=agent)
    return make_session(version, alice)


@pytest.mark.django_db
def test_a_run_is_claimed_once():
    from tests.factories import make_user

    owner = make_user()
    space = make_space(admin=owner)
    run = make_run(make_session(make_version(make_agent(space, owner)), owner))
    assert claim_run(run_id=run.pk, owner="worker-1") is True
    assert claim_run(run_id=run.pk, owner="worker-2") is False  # a second delivery
    assert run_execute(run_id=run.pk) == "not claimed"
    assert Run.objects.get(pk=run.pk).lease_owner == "worker-1"


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_real_worker_runs_a_question_over_redis(redis_url, alice, local_session, tmp_path):
    worker = _start_worker(redis_url, tmp_path)
    try:
        run = run_ask(user=alice, session=local_session, question='/tool echo {"text": "hi"}')
        _send(redis_url, run.pk)
        _send(redis_url, run.pk)  # delivered twice: still one execution
        done = _wait(
            lambda: Run.objects.filter(pk=run.pk, status="succeeded").first(), 60, "success"
        )
        assert "hi" in done.answer
        keys = list(SessionMessage.objects.filter(run=run).values_list("entry_key", flat=True))
        assert len(keys) == len(set(keys))
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_killed_worker_loses_its_lease_and_resume_completes(
    redis_url, alice, local_session, tmp_path
):
    worker = _start_worker(redis_url, tmp_path)
    run = run_ask(user=alice, session=local_session, question='/tool sleep {"seconds": 15}')
    try:
        _send(redis_url, run.pk)
        _wait(
            lambda: SessionMessage.objects.filter(run=run, kind="assistant").exists(),
            60,
            "the sleep call to be journaled",
        )
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    assert Run.objects.get(pk=run.pk).status == "running"

    time.sleep(3.5)  # the lease (3 s) runs out
    assert sweep_expired_leases() == [run.pk]
    failed = Run.objects.get(pk=run.pk)
    assert (failed.status, failed.error) == ("failed", "worker_lost")

    run_resume(user=alice, run=failed)
    worker = _start_worker(redis_url, tmp_path)
    try:
        _send(redis_url, run.pk)
        done = _wait(
            lambda: Run.objects.filter(pk=run.pk, status__in=["succeeded", "failed"]).first(),
            60,
            "the resumed run to finish",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    assert done.status == "succeeded", done.error
    rows = list(SessionMessage.objects.filter(run=run).order_by("seq"))
    keys = [(r.instance, r.entry_key) for r in rows]
    assert len(keys) == len(set(keys)), "every record once"
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    kinds = [r.kind for r in rows]
    assert kinds[0] == "user_input"
    # The interrupted sleep was not run again: its result is an explicit "unknown".
    tool_results = [r.message for r in rows if r.kind == "tool_result"]
    assert len(tool_results) == 1 and "unknown" in str(tool_results[0]["content"])
    statuses = [r.message for r in rows if r.kind == "status"]
    assert statuses[0] == {"status": "failed", "error": "worker_lost"}
    assert statuses[-1]["status"] == "succeeded"
    # The replay stops the first attempt where the worker died and resumes like the original.
    report = replay_run(Run.objects.get(pk=run.pk))
    assert report.ok, report.differences
