"""One lock order on PostgreSQL: the journal writers, supplements, resumes and the sweep.

Every transaction that locks both rows of a run locks its session row first, then the run row.
These tests drive real threads on their own connections against the real database: a worker
executing a run while supplements arrive, and a burst of resumes of one failed run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from django.db import connections

from agentloom.engine import GatewayError, LocalDemoGateway
from context_app import engine_adapter
from sessions_app import tasks
from sessions_app.models import Run
from sessions_app.services.execution import run_execute
from sessions_app.services.runs import run_ask

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUESTION = 'x /tool echo {"text": "x"}'


def _in_thread(target, *args) -> threading.Thread:
    def work():
        try:
            target(*args)
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


class _SlowGateway(LocalDemoGateway):
    """The demo model taking a moment to answer, so a run is still saving as supplements arrive."""

    failures = 0  # how many of the next action calls fail like an unavailable provider

    def complete(self, request):
        time.sleep(0.02)
        if request.purpose == "action" and self.failures:
            self.failures -= 1
            raise GatewayError("upstream", "the model provider failed", status=503)
        return super().complete(request)


@pytest.fixture
def slow_gateway():
    gateway = _SlowGateway()
    engine_adapter.set_gateway_factory(lambda version, connection: gateway)
    yield gateway
    engine_adapter.set_gateway_factory(None)


@pytest.fixture
def executed_at_once(monkeypatch):
    """Execute every queued run in a worker thread of its own as soon as it is committed."""
    workers: list[threading.Thread] = []
    results: list[str] = []

    def execute(run_id: int) -> None:
        results.append(run_execute(run_id=run_id))

    def delay(run_id: int, **_task_options) -> None:
        workers.append(_in_thread(execute, run_id))

    monkeypatch.setattr(tasks, "execute_run", SimpleNamespace(delay=delay))
    yield workers, results
    for worker in workers:
        worker.join(timeout=60)


def _token_header(user) -> dict[str, str]:
    from agentloom.spaces.services.tokens import token_create

    _, key = token_create(user=user)
    return {"HTTP_AUTHORIZATION": f"Token {key}"}


def _post(header: dict[str, str], path: str, body: dict | None = None) -> int:
    from rest_framework.test import APIClient

    client = APIClient(raise_request_exception=False)
    client.credentials(**header)
    return client.post(path, body or {}, "json").status_code


@pytest.mark.slow
def test_supplements_sent_while_a_run_saves_never_deadlock(
    make_demo_session, slow_gateway, alice, executed_at_once
):
    workers, results = executed_at_once
    header = _token_header(alice)
    codes: Counter[int] = Counter()
    for _ in range(5):
        session = make_demo_session(tools=["echo"])
        run = run_ask(user=alice, session=session, question=QUESTION)
        for _ in range(30):
            codes[_post(header, f"/api/v1/runs/{run.pk}/supplements/", {"text": "more"})] += 1
            time.sleep(0.03)
        for worker in workers:
            worker.join(timeout=60)
        run.refresh_from_db()
        assert (run.status, run.error) == ("succeeded", ""), run.error
    assert set(codes) <= {202, 409}, codes
    assert codes[202] > 0
    assert results == ["succeeded"] * 5


@pytest.mark.slow
def test_a_burst_of_resumes_of_one_failed_run_accepts_exactly_one(
    make_demo_session, slow_gateway, alice, executed_at_once
):
    workers, results = executed_at_once
    session = make_demo_session(tools=["echo"])
    slow_gateway.failures = 1
    run = run_ask(user=alice, session=session, question=QUESTION)
    workers[0].join(timeout=60)
    run.refresh_from_db()
    assert run.status == "failed"
    header = _token_header(alice)
    barrier = threading.Barrier(51)
    codes: list[int] = []
    supplements: Counter[int] = Counter()

    def resume(number: int) -> None:
        barrier.wait(timeout=30)
        time.sleep(number * 0.01)  # spread over half a second, while the resumed run saves
        codes.append(_post(header, f"/api/v1/runs/{run.pk}/resume/"))

    def supplement() -> None:
        barrier.wait(timeout=30)
        for _ in range(30):
            supplements[_post(header, f"/api/v1/runs/{run.pk}/supplements/", {"text": "more"})] += 1
            time.sleep(0.03)

    threads = [_in_thread(resume, number) for number in range(50)]
    threads.append(_in_thread(supplement))
    for thread in threads:
        thread.join(timeout=60)
    for worker in workers:
        worker.join(timeout=60)
    assert Counter(codes) == {202: 1, 409: 49}
    assert set(supplements) <= {202, 409}, supplements
    run.refresh_from_db()
    assert (run.status, run.attempt) == ("succeeded", 2)
    assert results == ["failed", "succeeded"]
    assert Run.objects.filter(session=session).count() == 1
