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
from sessions_app.services.runs import run_ask, run_claim, run_resume, sweep_expired_leases
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_version,
)

ROOT = Path(__file__).resolve().parents[2]
# The queue the test workers consume and the tests send to.
QUEUE = f"agentloom-test-{os.getpid()}"


def _database_url() -> str:
    conf = connection.settings_dict
    if connection.vendor == "postgresql":
        user = conf.get("USER") or "postgres"
        return f"postgres://{user}@{conf['HOST']}:{conf['PORT'] or 5432}/{conf['NAME']}"
    name = str(conf["NAME"])
    if name == ":memory:" or "mode=memory" in name:
        pytest.skip("worker tests need a file database (set TEST_SQLITE_NAME)")
    return f"sqlite:///{name}"


def _start_worker(
    redis_url: str,
    tmp_path: Path,
    *,
    lease: int = 3,
    pool: str = "solo",
    launcher: bool = False,
    **extra,
) -> subprocess.Popen:
    """Start a worker process (`pool`: solo, or `threads:N` for N runs in flight); `launcher`:
    as a deployment does, one worker on the thread pool under `python -m agentloom.work` (stop
    it with a SIGTERM to the launcher, which passes it on)."""
    pool, _, concurrency = pool.partition(":")
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": redis_url,
        "AGENTLOOM_VAR_DIR": str(settings.VAR_DIR),
        # The heartbeat defaults to a quarter of the lease.
        "RUN_LEASE_SECONDS": str(lease),
        "PYTHONPATH": str(ROOT),
        "CELERY_QUEUE": QUEUE,
        **extra,
    }
    log = open(tmp_path / f"worker-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    launched = [sys.executable, "-m", "agentloom.work", "--processes", "1", "--concurrency", "4"]
    return subprocess.Popen(
        launched
        if launcher
        else [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentloom.celery",
            "worker",
            f"--pool={pool}",
            *([f"--concurrency={concurrency}"] if concurrency else []),
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
    sender.send_task("sessions_app.tasks.execute_run", args=[run_id], queue=QUEUE)
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
    from context_app.services.agents import agent_publish

    version = agent_publish(user=alice, agent=agent)
    return make_session(version, alice)


@pytest.mark.django_db
def test_a_run_is_claimed_once():
    from tests.factories import make_user

    owner = make_user()
    space = make_space(admin=owner)
    run = make_run(make_session(make_version(make_agent(space, owner)), owner))
    assert run_claim(run_id=run.pk, owner="worker-1") is True
    assert run_claim(run_id=run.pk, owner="worker-2") is False  # a second delivery
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

    # The heartbeat renewed the lease during the sleep; killed, it renews nothing more, so the
    # run is swept within one lease (3 s) of the kill.
    time.sleep(3.5)
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


# --- leases that survive calls of three leases and more, and cancel that stops tools -----------


def _sweep_while(run_id: int, until, timeout: float) -> Run:
    """Sweep expired leases every half second (as the beat would) until `until(run)` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert sweep_expired_leases() == [], "a healthy run was swept"
        run = Run.objects.get(pk=run_id)
        if until(run):
            return run
        time.sleep(0.5)
    raise AssertionError("timed out waiting for the run")


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_12_second_sleep_succeeds_under_a_4_second_lease(
    redis_url, alice, local_session, tmp_path
):
    worker = _start_worker(redis_url, tmp_path, lease=4)
    try:
        run = run_ask(user=alice, session=local_session, question='/tool sleep {"seconds": 12}')
        _send(redis_url, run.pk)
        done = _sweep_while(run.pk, lambda r: r.status not in Run.ACTIVE_STATUSES, 90)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    assert done.status == "succeeded", done.error
    result = SessionMessage.objects.get(run=run, kind="tool_result")
    assert result.message["content"] == "slept 12 seconds"


class _SlowModel:
    """An OpenAI-compatible endpoint on loopback that answers after `seconds`."""

    def __init__(self, seconds: float):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        delay = seconds
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                time.sleep(delay)
                body = json.dumps(
                    {
                        "id": "slow-1",
                        "model": "slow-model",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "NONCE-SLOW answer"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_14_second_model_answer_succeeds_under_a_4_second_lease(redis_url, alice, tmp_path):
    from context_app.services.agents import agent_publish
    from sessions_app.models import ModelCall

    model = _SlowModel(14)
    try:
        space = make_space(admin=alice)
        connection_row = make_connection(
            space,
            provider="openai_compatible",
            base_url=model.base_url,
            model_id="slow-model",
            api_key="test-key",
        )
        agent = make_agent(space, alice, connection=connection_row, tools=[])
        session = make_session(agent_publish(user=alice, agent=agent), alice)
        worker = _start_worker(redis_url, tmp_path, lease=4, ALLOW_PRIVATE_MODEL_HOSTS="true")
        try:
            run = run_ask(user=alice, session=session, question="take your time")
            _send(redis_url, run.pk)
            done = _sweep_while(run.pk, lambda r: r.status not in Run.ACTIVE_STATUSES, 120)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
    finally:
        model.close()
    assert done.status == "succeeded", done.error
    assert done.answer == "NONCE-SLOW answer"
    assert model.requests == 1, "paid for once, never asked again"
    calls = list(ModelCall.objects.filter(run=run))
    assert len(calls) == 1 and calls[0].discarded is False
    assert calls[0].latency_ms >= 14_000


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_20_second_sleep_ends_the_run_within_3_seconds(
    redis_url, alice, local_session, tmp_path
):
    from rest_framework.test import APIClient

    from agentloom.engine import INTERRUPTED_RESULT
    from sessions_app.services.runs import run_cancel

    api = APIClient()
    api.force_authenticate(alice)
    worker = _start_worker(redis_url, tmp_path, lease=10)
    try:
        run = run_ask(user=alice, session=local_session, question='/tool sleep {"seconds": 20}')
        _send(redis_url, run.pk)
        _wait(
            lambda: SessionMessage.objects.filter(run=run, kind="assistant").exists(),
            60,
            "the sleep call to be journaled",
        )
        time.sleep(1)
        cancelled_at = time.monotonic()
        run_cancel(user=alice, run=Run.objects.get(pk=run.pk))
        # Observable at once: still running, with the request recorded.
        body = api.get(f"/api/v1/runs/{run.pk}/").json()
        assert (body["status"], body["cancel_requested"]) == ("running", True)
        done = _wait(
            lambda: Run.objects.filter(pk=run.pk, status="cancelled").first(), 10, "cancelled"
        )
        elapsed = time.monotonic() - cancelled_at
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    assert elapsed < 3, f"the run ended {elapsed:.1f} s after the cancel"
    assert done.finished_at is not None
    result = SessionMessage.objects.get(run=run, kind="tool_result")
    assert result.message["content"] == INTERRUPTED_RESULT


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_started_worker_process_sends_its_spans_to_the_collector(
    redis_url, alice, local_session, tmp_path
):
    """The launcher spawns each worker (a new interpreter, not a fork of itself), and the worker
    switches tracing on as Django starts in it: its batch processor's export thread is its own.
    A run's spans reach a loopback OTLP/HTTP receiver while the worker goes on, and the trace
    goes from Celery's task span to the engine's."""
    from agentloom import tracing
    from tests.support.otlp import TraceReceiver

    assert tracing.tracer() is None, "every span the receiver gets is the worker's"
    receiver = TraceReceiver()
    worker = _start_worker(
        redis_url,
        tmp_path,
        launcher=True,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="200",
    )
    try:
        run = run_ask(user=alice, session=local_session, question='/tool echo {"text": "hi"}')
        _send(redis_url, run.pk)
        _wait(lambda: Run.objects.filter(pk=run.pk, status="succeeded").exists(), 60, "success")

        def run_spans():
            spans = receiver.spans()
            agents = [s for s in spans if s.attributes.get("agentloom.run.id") == run.pk]
            return agents and [s for s in spans if s.trace_id == agents[0].trace_id]

        # Before the worker stops: the export thread sends them, not the flush at exit.
        spans = _wait(run_spans, 20, "the run's spans at the collector")
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        stopped = worker.wait(timeout=60)
        receiver.close()
    assert stopped == 0
    named = {span.name: span for span in spans}
    task = named["run/sessions_app.tasks.execute_run"]
    agent = named["invoke_agent " + local_session.agent.name]
    assert agent.parent_span_id == task.span_id
    assert named["execute_tool echo"].parent_span_id == agent.span_id
    assert len([s for s in spans if s.name.startswith("chat ")]) == 2
    assert agent.resource["service.name"] == "agentloom"
    assert Run.objects.get(pk=run.pk).trace_id == agent.trace_id


_FORKED = """
import multiprocessing, sys, time
from agentloom import tracing

tracing.configure(endpoint=sys.argv[1] + "/v1/traces")

def child():
    with tracing.span_from("in the forked child", {}):
        pass
    time.sleep(1.5)  # the batch's delay (200 ms) and more; then os._exit, no flush at exit

with tracing.span_from("in the parent", {}):
    process = multiprocessing.Process(target=child)
    process.start()
    process.join()
sys.exit(process.exitcode)
"""


def test_a_span_ended_in_a_process_forked_after_tracing_started_reaches_the_collector():
    """The one fork of a worker: `--beat` runs Celery's embedded beat in a child forked by
    `multiprocessing` after Django (and tracing) started. The SDK's batch processor starts its
    export thread again in the child (`os.register_at_fork`): the child's span is sent while it
    lives, though it ends by `os._exit`, without the flush at exit."""
    from tests.support.otlp import TraceReceiver

    receiver = TraceReceiver()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _FORKED, receiver.endpoint],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OTEL_BSP_SCHEDULE_DELAY": "200"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        receiver.close()
    assert done.returncode == 0, done.stderr
    names = [span.name for span in receiver.spans()]
    assert sorted(names) == ["in the forked child", "in the parent"]
    child, parent = sorted(receiver.spans(), key=lambda span: span.name)
    assert child.parent_span_id == parent.span_id
