"""Capacity: runs in flight in one worker process, and the web server under concurrent clients.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/capacity.py

For each database (`--backends sqlite,postgres`) it works in a scratch database that it creates
and drops (PostgreSQL: `<name>_bench` beside the one DATABASE_URL names; SQLite: a temporary
file), publishes an agent on an OpenAI-compatible model double that answers every request
after `--delay` seconds (3 by default) with a system prompt of a few thousand tokens measured
by the o200k estimator, and for each N of `--runs` (10, 100, 500):

- starts one worker process (`celery worker --pool=threads --concurrency=N`), queues N runs of
  N sessions at once (each a tool call, then the answer: two model calls, so the ideal is twice
  the delay), and prints the wall time against the ideal, the runs that succeeded, the run
  latency p50 / p95, the worker's peak memory above its idle base (in all and per run) and the
  most database connections it held (PostgreSQL: pg_stat_activity; SQLite: open files);
- then (`--web`, on by default) starts the production server (`python -m agentloom.serve`, 2
  workers) and prints p50 / p95 of `POST /api/v1/sessions/{id}/runs` and of a journal page
  (`GET /api/v1/sessions/{id}/messages`) under 20 concurrent clients.

Targets on PostgreSQL: 500 in flight with wall ≤ 1.5× the ideal and every run succeeded, ≤ 1 MB
per run in flight above the base, ≤ 20 connections; a journal page ≤ 100 ms at p95.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MB = 1024 * 1024
SYSTEM_PROMPT_WORDS = 2_500  # about 3,000 o200k tokens of instructions
WEB_CLIENTS = 20
WEB_REQUESTS_PER_CLIENT = 15


# --- the parent: one child per database ------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--runs", default="10,100,500")
    parser.add_argument("--delay", type=float, default=3.0)
    parser.add_argument("--no-web", dest="web", action="store_false")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options)
        return
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        sys.exit("bench/capacity.py needs a Redis broker: set CELERY_BROKER_URL=redis://…")
    for backend in options.backends.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            url = _scratch_url(backend, scratch)
            env = {**os.environ, **_bench_env(url, scratch, backend)}
            print(f"\n== {backend}: {url.rsplit('@', 1)[-1]}", flush=True)
            try:
                subprocess.run(
                    [sys.executable, __file__, "--child", backend, "--runs", options.runs]
                    + ["--delay", str(options.delay)]
                    + ([] if options.web else ["--no-web"]),
                    env=env,
                    check=True,
                )
            finally:
                _drop_queue(broker, env["CELERY_QUEUE"])
                if backend == "postgres":
                    _admin(f'DROP DATABASE IF EXISTS "{_bench_name()}" WITH (FORCE)')


def _drop_queue(broker: str, queue: str) -> None:
    import redis

    client = redis.Redis.from_url(broker)
    client.delete(queue)
    client.close()


def _postgres_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("the PostgreSQL leg needs DATABASE_URL=postgres://… (or --backends sqlite)")
    return url


def _bench_name() -> str:
    return _postgres_url().rsplit("/", 1)[1].split("?")[0] + "_bench"


def _admin(statement: str) -> None:
    import psycopg

    url = _postgres_url().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(statement)


def _scratch_url(backend: str, scratch: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{scratch}/bench.sqlite3"
    if backend != "postgres":
        sys.exit(f"unknown backend {backend!r} (sqlite or postgres)")
    _admin(f'DROP DATABASE IF EXISTS "{_bench_name()}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{_bench_name()}"')
    return _postgres_url().rsplit("/", 1)[0] + "/" + _bench_name()


def _bench_env(url: str, scratch: str, backend: str) -> dict[str, str]:
    limits = ("DISCOVERY", "RUNS_PER_USER", "RUNS_PER_SESSION", "SUPPLEMENTS_PER_USER")
    return {
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "agentloom.settings",
        "AGENTLOOM_VAR_DIR": scratch,
        "STATIC_ROOT": f"{scratch}/static",
        "SECRET_KEY": "bench-capacity-secret-key-not-for-production-0123456789",
        "FIELD_ENCRYPTION_KEY": "bench-capacity-field-key-not-for-production-0123456789",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "ALLOW_PRIVATE_MODEL_HOSTS": "true",
        # A queue of each leg's own: the runs the web leg leaves queued stay with it.
        "CELERY_QUEUE": f"bench-capacity-{os.getpid()}-{backend}",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **{f"RATE_LIMIT_{name}": "off" for name in limits},
        "RATE_LIMIT_SUPPLEMENTS_PER_SESSION": "off",
    }


# --- the child: one database -----------------------------------------------------------------


def _child(options) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from tests.support.delayed_model import DelayedModel

    call_command("migrate", verbosity=0)
    model = DelayedModel(options.delay)
    backend = options.child
    try:
        world = _world(model)
        print(
            f"{'N':>5} | {'wall s':>7} | {'ideal s':>7} | {'ratio':>5} | {'ok':>9} | "
            f"{'run p50/p95 s':>13} | {'base MB':>7} | {'peak +MB':>8} | {'MB/run':>6} | "
            f"{'DB conns':>8}",
            flush=True,
        )
        for count in [int(n) for n in options.runs.split(",")]:
            row = _in_flight(world, count, options.delay, backend)
            print(
                f"{count:>5} | {row['wall']:>7.1f} | {row['ideal']:>7.1f} | "
                f"{row['wall'] / row['ideal']:>4.2f}x | {row['succeeded']:>4}/{count:<4} | "
                f"{row['p50']:>5.1f} / {row['p95']:<5.1f} | {row['base_mb']:>7.0f} | "
                f"{row['peak_mb']:>8.0f} | {row['peak_mb'] / count:>6.2f} | "
                f"{row['connections']:>8}",
                flush=True,
            )
        if options.web:
            _web(world)
    finally:
        model.close()


def _system_prompt() -> str:
    words = ["Answer", "carefully,", "cite", "the", "tool", "result", "and", "keep", "it", "short."]
    return " ".join(words[i % len(words)] for i in range(SYSTEM_PROMPT_WORDS))


def _world(model) -> dict:
    from context_app.services.agents import agent_create, agent_publish
    from tests.factories import make_connection, make_space, make_user

    user = make_user("bench")
    space = make_space(admin=user)
    connection = make_connection(
        space,
        provider="openai_compatible",
        base_url=model.base_url,
        model_id="delayed-model",
        api_key="bench-key",
        context_window=128_000,
        estimator="o200k",
        estimator_source="manual",
    )
    agent = agent_create(
        user=user,
        space=space,
        name="capacity",
        system_prompt=_system_prompt(),
        model_connection=connection,
        tools=["echo"],
    )
    return {"user": user, "version": agent_publish(user=user, agent=agent), "model": model}


def _queue_runs(world: dict, count: int, label: str) -> list[int]:
    """Create `count` sessions with one queued run each; nothing is sent to the broker yet."""
    from sessions_app import tasks
    from sessions_app.services.runs import run_ask, session_create

    held, tasks.execute_run.delay = tasks.execute_run.delay, lambda run_id, **_: None
    try:
        ids = []
        for index in range(count):
            session = session_create(user=world["user"], agent_version=world["version"])
            run = run_ask(
                user=world["user"],
                session=session,
                question=f"{label}-{index}: look this up with the echo tool, then answer.",
            )
            ids.append(run.pk)
        return ids
    finally:
        tasks.execute_run.delay = held


def _send_all(run_ids: list[int]) -> None:
    from django.conf import settings

    from agentloom.celery import app

    with app.connection_for_write() as broker:
        for run_id in run_ids:
            app.send_task(
                "sessions_app.tasks.execute_run",
                args=[run_id],
                kwargs={"deployment": settings.DEPLOYMENT_ID},
                queue=settings.CELERY_TASK_DEFAULT_QUEUE,
                connection=broker,
            )


def _start_worker(count: int, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentloom.celery",
            "worker",
            "--pool=threads",
            f"--concurrency={count}",
            "--loglevel=INFO",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=os.environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if time.monotonic() > deadline or worker.poll() is not None:
            raise SystemExit(f"the worker did not start:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return worker


class _Sampler:
    """Samples the worker's memory and database connections every 0.1 s."""

    def __init__(self, pid: int, backend: str):
        import psutil

        self.process = psutil.Process(pid)
        self.backend = backend
        self.peak_rss = 0
        self.peak_connections = 0
        self._stop = threading.Event()
        self._count = self._connection_counter()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _connection_counter(self):
        from django.db import connection

        settings = connection.settings_dict
        if self.backend == "sqlite":
            name = str(Path(settings["NAME"]).resolve())
            return lambda: sum(1 for f in self.process.open_files() if f.path == name)
        import psycopg

        url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
        sampler = psycopg.connect(url, autocommit=True)
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        # The bench process itself holds no connection while it samples (closed before).
        return lambda: sampler.execute(query, [settings["NAME"]]).fetchone()[0]

    def rss(self) -> int:
        return self.process.memory_info().rss

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.rss())
            self.peak_connections = max(self.peak_connections, self._count())
            time.sleep(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self.thread.join()


def _in_flight(world: dict, count: int, delay: float, backend: str) -> dict:
    from django.db import connection
    from django.utils import timezone

    from sessions_app.models import Run

    warm_up = _queue_runs(world, 1, f"warm{count}")
    ids = _queue_runs(world, count, f"N{count}")
    with tempfile.NamedTemporaryFile(suffix=".log", delete=False) as handle:
        log_path = Path(handle.name)
    worker = _start_worker(count, log_path)
    try:
        # The base is a worker that has run once (its code and the tokenizer loaded), idle.
        _send_all(warm_up)
        _wait_done(warm_up)
        time.sleep(0.5)
        sampler = _Sampler(worker.pid, backend)
        base = sampler.rss()
        connection.close()
        with sampler:
            started, sent_at = time.monotonic(), timezone.now()
            _send_all(ids)
            active = Run.ACTIVE_STATUSES
            while Run.objects.filter(pk__in=ids, status__in=active).exists():
                connection.close()  # the bench process holds no connection between polls
                if time.monotonic() - started > 600:
                    break
                time.sleep(0.25)
            connection.close()
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    runs = list(Run.objects.filter(pk__in=ids).values_list("status", "finished_at"))
    # From the moment the runs were sent to each one's end, as the database recorded it (the
    # polling above only waits: on SQLite its reads may queue behind the worker's writes).
    latencies = sorted(
        (finished - sent_at).total_seconds() for _, finished in runs if finished is not None
    )
    return {
        "wall": latencies[-1] if latencies else float("nan"),
        "ideal": 2 * delay,
        "succeeded": sum(1 for status, _ in runs if status == "succeeded"),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p95": _percentile(latencies, 95),
        "base_mb": base / MB,
        "peak_mb": max(0, sampler.peak_rss - base) / MB,
        "connections": sampler.peak_connections,
    }


def _wait_done(run_ids: list[int]) -> None:
    from django.db import connection

    from sessions_app.models import Run

    deadline = time.monotonic() + 120
    while Run.objects.filter(pk__in=run_ids, status__in=Run.ACTIVE_STATUSES).exists():
        connection.close()
        if time.monotonic() > deadline:
            raise SystemExit("the warm-up run did not finish")
        time.sleep(0.2)
    connection.close()


def _percentile(values: list[float], percent: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


# --- the web server ----------------------------------------------------------------------------


def _web(world: dict) -> None:
    from django.core.management import call_command

    from agentloom.spaces.services.tokens import token_create
    from sessions_app.models import Session, SessionMessage
    from sessions_app.services.runs import session_create

    call_command("collectstatic", "--no-input", verbosity=0)
    _, key = token_create(user=world["user"], name="bench")
    total = WEB_CLIENTS * WEB_REQUESTS_PER_CLIENT
    # One round more than measured: the first requests of each server process load its code.
    # Twice as many: a warm-up round first (each server process loads its code on first use).
    fresh = [
        session_create(user=world["user"], agent_version=world["version"]).pk
        for _ in range(2 * total)
    ]
    journaled = (
        Session.objects.filter(messages__isnull=False).order_by("-pk").values_list("pk", flat=True)
    )
    journal_session = journaled.first()
    page = SessionMessage.objects.filter(session_id=journal_session).count()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agentloom.serve", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=os.environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Token {key}"}
    try:
        _wait_for(base)
        for first in (total, 0):  # a warm-up round, then the measured one
            asks = _hammer(
                lambda client, i, first=first: client.post(
                    f"{base}/api/v1/sessions/{fresh[first + i]}/runs",
                    json={"question": f"web {i}"},
                ),
                headers,
                expect=202,
            )
        journal = _hammer(
            lambda client, i: client.get(
                f"{base}/api/v1/sessions/{journal_session}/messages?limit=50"
            ),
            headers,
            expect=200,
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    print(
        f"\nweb, {WEB_CLIENTS} concurrent clients, Granian with 2 workers ({total} requests each)"
    )
    print(f"{'request':>34} | {'p50 ms':>7} | {'p95 ms':>7} | {'errors':>6}")
    for name, (latencies, errors) in (
        ("POST /api/v1/sessions/{id}/runs", asks),
        (f"GET …/messages ({page} records)", journal),
    ):
        print(
            f"{name:>34} | {statistics.median(latencies):>7.0f} | "
            f"{_percentile(latencies, 95):>7.0f} | {errors:>6}"
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(base: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{base}/accounts/login/", timeout=5)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _hammer(request, headers: dict, *, expect: int) -> tuple[list[float], int]:
    """Run WEB_CLIENTS clients of WEB_REQUESTS_PER_CLIENT requests each; return ms and errors."""
    import httpx

    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    start = threading.Barrier(WEB_CLIENTS)

    def client_loop(number: int) -> None:
        nonlocal errors
        with httpx.Client(headers=headers, timeout=60) as client:
            start.wait()
            for step in range(WEB_REQUESTS_PER_CLIENT):
                began = time.perf_counter()
                answer = request(client, number * WEB_REQUESTS_PER_CLIENT + step)
                took = (time.perf_counter() - began) * 1000
                with lock:
                    latencies.append(took)
                    errors += answer.status_code != expect

    threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(WEB_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors


if __name__ == "__main__":
    main()
