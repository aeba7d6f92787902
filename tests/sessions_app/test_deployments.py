"""Deployments that share a broker cannot take each other's work: own queue, own tasks."""

from __future__ import annotations

import base64
import json
import os
import signal
import time

import pytest
import redis
from celery import current_app
from django.conf import settings

from sessions_app import tasks
from sessions_app.models import Run
from sessions_app.services.runs import run_ask
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_version,
)
from tests.foundation.test_settings import _start_django
from tests.sessions_app.test_worker import QUEUE, _start_worker

PRINT_QUEUE = (
    "import django; django.setup(); from django.conf import settings;"
    "print(settings.CELERY_TASK_DEFAULT_QUEUE, settings.DEPLOYMENT_ID)"
)


def _queue_of(tmp_path, **env) -> list[str]:
    result = _start_django(tmp_path, PRINT_QUEUE, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_queue_is_named_after_the_deployments_database_unless_set(tmp_path):
    one = _queue_of(tmp_path, DATABASE_URL="postgres://u:secret-1@db-a:5432/agentloom")
    again = _queue_of(tmp_path, DATABASE_URL="postgres://other:secret-2@db-a:5432/agentloom")
    other = _queue_of(tmp_path, DATABASE_URL="postgres://u:secret-1@db-b:5432/agentloom")
    assert one == again, "the same database is the same deployment, whatever the credentials"
    assert one[0] == f"agentloom-{one[1]}" and one != other
    assert "secret" not in one[0]
    named = _queue_of(tmp_path, DATABASE_URL="sqlite:///x.sqlite3", CELERY_QUEUE="blue-runs")
    assert named[0] == "blue-runs"


@pytest.mark.django_db
def test_a_queued_run_names_its_deployment(alice, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(
        tasks.execute_run, "delay", lambda run_id, **options: sent.append((run_id, options))
    )
    from context_app.services.agents import agent_publish

    space = make_space(admin=alice)
    agent = make_agent(space, alice, connection=make_connection(space))
    session = make_session(agent_publish(user=alice, agent=agent), alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = run_ask(user=alice, session=session, question="hello")
    assert sent == [(run.pk, {"deployment": settings.DEPLOYMENT_ID})]


@pytest.mark.django_db
def test_a_task_of_another_deployment_is_handed_back_untouched(alice, monkeypatch):
    task = current_app.tasks["sessions_app.tasks.execute_run"]
    sent = []
    monkeypatch.setattr(task, "apply_async", lambda **message: sent.append(message))
    monkeypatch.setattr(tasks, "HAND_BACK_SECONDS", 0)
    space = make_space(admin=alice)
    run = make_run(make_session(make_version(make_agent(space, alice)), alice))
    # This database holds a run of that id, but the task was queued by another deployment.
    assert task.apply(args=[run.pk], kwargs={"deployment": "elsewhere"}).get() == "handed back"
    assert sent == [
        {
            "args": [run.pk],
            "kwargs": {"deployment": "elsewhere"},
            "queue": settings.CELERY_TASK_DEFAULT_QUEUE,
        }
    ]
    untouched = Run.objects.get(pk=run.pk)
    assert (untouched.status, untouched.lease_owner) == ("queued", "")


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_leaves_another_deployments_task_in_the_queue(redis_url, alice, tmp_path):
    client = redis.Redis.from_url(redis_url)
    client.delete(QUEUE)
    space = make_space(admin=alice)
    run = make_run(make_session(make_version(make_agent(space, alice)), alice))
    worker = _start_worker(redis_url, tmp_path)
    try:
        sender = current_app.__class__(broker=redis_url)
        sender.send_task(
            "sessions_app.tasks.execute_run",
            args=[run.pk],
            kwargs={"deployment": "elsewhere"},
            queue=QUEUE,
        )
        sender.close()
        time.sleep(6)  # received, handed back (after 1 s), received again...
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    untouched = Run.objects.get(pk=run.pk)
    assert (untouched.status, untouched.lease_owner) == ("queued", "")
    # The task is still there for its own deployment's workers, once.
    waiting = [json.loads(raw) for raw in client.lrange(QUEUE, 0, -1)]
    client.delete(QUEUE)
    bodies = [json.loads(base64.b64decode(message["body"])) for message in waiting]
    assert [(body[0], body[1]) for body in bodies] == [([run.pk], {"deployment": "elsewhere"})]
