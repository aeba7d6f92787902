"""Capacity: runs in flight in one or more worker processes, and the web server under clients.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/capacity.py

For each database (`--backends sqlite,postgres`) it works in a scratch database that it creates
and drops (PostgreSQL: `<name>_bench` beside the one DATABASE_URL names; SQLite: a temporary
file), publishes an agent on an OpenAI-compatible model double that answers every request
after `--delay` seconds (3 by default) with a system prompt of a few thousand tokens measured
by the o200k estimator, and for each number of worker processes P of `--processes` (1, 2; one
on SQLite) and each N of `--runs` (10, 100, 500, 1000):

- starts the worker processes as a deployment does (`python -m agentloom.work --processes P
  --concurrency N/P`), warms each up, queues N runs of N sessions at once (each a tool call,
  then the answer: two model calls, so the ideal is twice the delay), and prints the wall time
  against the ideal, the runs that succeeded, the run latency p50 / p95, the workers' CPU and
  SQL statements per run (every statement the ORM sends, counted in each worker process; and
  the garbage collector's part of the CPU, timed in each worker process), their
  peak memory above their idle base (in all and per run) and the most database connections
  they held (PostgreSQL: pg_stat_activity; SQLite: open files);
- then (`--web`, on by default) starts the production server (`python -m agentloom.serve`, 2
  workers) and prints p50 / p95 of `POST /api/v1/sessions/{id}/runs` and of a journal page
  (`GET /api/v1/sessions/{id}/messages?limit=200`) under 20 concurrent clients.

It prints the commit, the machine's cores and load average first, so that a run on another
tree is the same command. Targets on PostgreSQL: 500 in flight on two processes with wall
≤ 1.5× the ideal and every run succeeded, ≤ 1 MB per run in flight above the base.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import free_port, percentile, print_machine, wait_for  # noqa: E402

MB = 1024 * 1024
SYSTEM_PROMPT_WORDS = 2_500  # about 3,000 o200k tokens of instructions
WEB_CLIENTS = 20
WEB_REQUESTS_PER_CLIENT = 15
GC_MICROSECONDS = "GC_MICROSECONDS"  # counted with the statements, reported apart


# --- the parent: one child per database ------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--runs", default="10,100,500,1000")
    parser.add_argument("--processes", default="1,2", help="worker processes (PostgreSQL)")
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
    print_machine()
    for backend in options.backends.split(","):
        with tempfile.TemporaryDirectory() as scratch:
            url = _scratch_url(backend, scratch)
            env = {**os.environ, **_bench_env(url, scratch, backend)}
            print(f"\n== {backend}: {url.rsplit('@', 1)[-1]}", flush=True)
            try:
                subprocess.run(
                    [sys.executable, __file__, "--child", backend, "--runs", options.runs]
                    + ["--delay", str(options.delay), "--processes", options.processes]
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
        header = (
            f"{'P':>2} | {'N':>5} | {'wall s':>6} | {'ratio':>5} | {'ok':>9} | "
            f"{'run p50/p95 s':>13} | {'CPU ms/run':>10} | {'stmts/run':>9} | "
            f"{'base MB':>7} | {'peak +MB':>8} | {'MB/run':>6} | {'DB conns':>8} | load"
        )
        processes = [int(n) for n in options.processes.split(",")]
        if backend == "sqlite":
            processes = [1]  # SQLite takes one writer at a time: one worker process
        print(f"ideal {2 * options.delay:.1f} s (two model calls of {options.delay} s)")
        print(header, flush=True)
        for count_of_processes in processes:
            for count in [int(n) for n in options.runs.split(",")]:
                row = _in_flight(world, count, options.delay, backend, count_of_processes)
                print(
                    f"{count_of_processes:>2} | {count:>5} | {row['wall']:>6.1f} | "
                    f"{row['wall'] / row['ideal']:>4.2f}x | {row['succeeded']:>4}/{count:<4} | "
                    f"{row['p50']:>5.1f} / {row['p95']:<5.1f} | {row['cpu_ms']:>10.1f} | "
                    f"{row['statements']:>9.1f} | {row['base_mb']:>7.0f} | "
                    f"{row['peak_mb']:>8.0f} | {row['peak_mb'] / count:>6.2f} | "
                    f"{row['connections']:>8} | {row['load']:.1f}",
                    flush=True,
                )
                print(
                    f"{'':>10}statements per run by kind: {row['kinds']}; garbage collector "
                    f"{row['collector_ms']:.2f} ms of CPU per run",
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


# Loaded by every worker process (a `sitecustomize` on its path): counts each SQL statement the
# ORM sends, by its first word, and the microseconds the garbage collector ran (`GC_MICROSECONDS`,
# each collection timed by the thread it stopped), and writes the counts to
# BENCH_STATEMENTS_DIR/<pid> as it goes.
_STATEMENT_COUNTER = """
import os
import threading

_where = os.environ.get("BENCH_STATEMENTS_DIR")
if _where:
    import collections
    import json
    import time

    from django.db.backends.signals import connection_created

    _counts = collections.Counter()
    _lock = threading.Lock()

    def _count(execute, sql, params, many, context):
        word = (sql.lstrip().split(None, 1) or ["?"])[0].upper()
        with _lock:
            _counts[word] += 1
        return execute(sql, params, many, context)

    def _install(sender, connection, **kwargs):
        if _count not in connection.execute_wrappers:
            connection.execute_wrappers.append(_count)

    connection_created.connect(_install, weak=False)

    import gc

    _collecting = [0.0]

    def _time_collection(phase, info):
        if phase == "start":
            _collecting[0] = time.thread_time()
        else:
            with _lock:
                _counts["GC_MICROSECONDS"] += int(1e6 * (time.thread_time() - _collecting[0]))

    gc.callbacks.append(_time_collection)

    def _write():
        path = os.path.join(_where, str(os.getpid()))
        while True:
            time.sleep(0.2)
            with _lock:
                counts = dict(_counts)
            with open(path + ".tmp", "w") as out:
                json.dump(counts, out)
            os.replace(path + ".tmp", path)

    threading.Thread(target=_write, daemon=True).start()
"""


def _start_workers(count: int, processes: int, scratch: Path) -> subprocess.Popen:
    """Start the worker processes as a deployment does (`python -m agentloom.work`)."""
    hook = scratch / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_STATEMENT_COUNTER)
    counts = scratch / "statements"
    counts.mkdir(exist_ok=True)
    log_path = scratch / "worker.log"
    log = open(log_path, "w")  # noqa: SIM115
    env = {
        **os.environ,
        "PYTHONPATH": f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "BENCH_STATEMENTS_DIR": str(counts),
        "LOG_LEVEL": "INFO",  # the workers say `ready.` at INFO
    }
    concurrency = math.ceil(count / processes)
    command = [
        *(sys.executable, "-m", "agentloom.work"),
        *("--processes", str(processes), "--concurrency", str(concurrency)),
    ]
    launcher = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while log_path.read_text().count(" ready.") < processes:
        if time.monotonic() > deadline or launcher.poll() is not None:
            raise SystemExit(f"the workers did not start:\n{log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    return launcher


def _counts_by_process(scratch: Path) -> list[dict[str, int]]:
    """Return what each worker process has counted so far (statements by kind, GC time)."""
    found = []
    for path in (scratch / "statements").glob("[0-9]*"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def _statements(scratch: Path) -> dict[str, int]:
    """Return the statements every worker process has sent so far, by kind."""
    total: dict[str, int] = {}
    for counts in _counts_by_process(scratch):
        for word, number in counts.items():
            total[word] = total.get(word, 0) + number
    return total


def _warm_up(world: dict, processes: int, scratch: Path, label: str) -> None:
    """Run warm-up runs until every worker process has run one.

    A process's first run loads its code and the tokenizer (about 0.8 s of CPU for o200k), which
    is not what a run costs; the broker hands a burst to whichever process asks first, so a
    round may leave a process cold: rounds go on until each has inserted rows (journaled a run).
    """
    for round_number in range(10):
        runs = _queue_runs(world, 2 * processes, f"{label}-{round_number}")
        _send_all(runs)
        _wait_done(runs)
        time.sleep(0.5)  # the counts are written every 0.2 s
        warm = [counts for counts in _counts_by_process(scratch) if counts.get("INSERT")]
        if len(warm) >= processes:
            return
    raise SystemExit(f"only {len(warm)} of {processes} worker processes ran a warm-up run")


class _Sampler:
    """Samples the worker processes' memory and database connections every 0.1 s."""

    def __init__(self, launcher_pid: int, backend: str):
        import psutil

        self.workers = psutil.Process(launcher_pid).children()
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
            return lambda: sum(
                1 for worker in self.workers for f in worker.open_files() if f.path == name
            )
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
        return sum(worker.memory_info().rss for worker in self.workers)

    def cpu(self) -> float:
        """Return the CPU seconds (user and system) the worker processes have used."""
        return sum(sum(worker.cpu_times()[:2]) for worker in self.workers)

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


def _in_flight(world: dict, count: int, delay: float, backend: str, processes: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    from sessions_app.models import Run

    ids = _queue_runs(world, count, f"P{processes}N{count}")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        launcher = _start_workers(count, processes, scratch)
        try:
            # The base is the workers after their warm-up, idle.
            _warm_up(world, processes, scratch, f"warm{processes}x{count}")
            time.sleep(0.5)
            sampler = _Sampler(launcher.pid, backend)
            base, cpu_before = sampler.rss(), sampler.cpu()
            statements_before = _statements(scratch)
            connection.close()
            with sampler:
                started, sent_at = time.monotonic(), timezone.now()
                _send_all(ids)
                active = Run.ACTIVE_STATUSES
                while Run.objects.filter(pk__in=ids, status__in=active).exists():
                    connection.close()  # the bench process holds no connection between polls
                    if time.monotonic() - started > 900:
                        break
                    time.sleep(0.25)
                connection.close()
            load = os.getloadavg()[0]
            cpu = sampler.cpu() - cpu_before
            time.sleep(0.5)  # the counters are written every 0.2 s
            statements_after = _statements(scratch)
        finally:
            os.killpg(launcher.pid, signal.SIGTERM)
            launcher.wait(timeout=90)
    runs = list(Run.objects.filter(pk__in=ids).values_list("status", "finished_at"))
    # From the moment the runs were sent to each one's end, as the database recorded it (the
    # polling above only waits: on SQLite its reads may queue behind the worker's writes).
    latencies = sorted(
        (finished - sent_at).total_seconds() for _, finished in runs if finished is not None
    )
    kinds = {
        word: (number - statements_before.get(word, 0)) / count
        for word, number in sorted(statements_after.items())
    }
    collector_ms = kinds.pop(GC_MICROSECONDS, 0) / 1000
    return {
        "wall": latencies[-1] if latencies else float("nan"),
        "ideal": 2 * delay,
        "succeeded": sum(1 for status, _ in runs if status == "succeeded"),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p95": percentile(latencies, 95),
        "cpu_ms": 1000 * cpu / count,
        "statements": sum(kinds.values()),
        "kinds": ", ".join(f"{word} {number:.1f}" for word, number in kinds.items() if number),
        "collector_ms": collector_ms,
        "base_mb": base / MB,
        "peak_mb": max(0, sampler.peak_rss - base) / MB,
        "connections": sampler.peak_connections,
        "load": load,
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
    port = free_port()
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
        wait_for(base)
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
                f"{base}/api/v1/sessions/{journal_session}/messages?limit=200"
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
            f"{percentile(latencies, 95):>7.0f} | {errors:>6}"
        )


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
