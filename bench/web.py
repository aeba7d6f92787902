"""The journal page under load: CPU and queries per request, and latency at an open-loop rate.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom .venv/bin/python bench/web.py

In a scratch PostgreSQL database (`<name>_web` beside the one DATABASE_URL names, created and
dropped) it journals a session of `--turns` turns (1,000 by default) of the peer workload — a
question, a tool call, a 2,000-character tool result, a 300-character answer and the run's
status, five records a turn — and reads a page of `--limit` records (200) from the middle of it,
as JSON (`GET /api/v1/sessions/{id}/messages`) and as the console's journal page
(`/console/sessions/{id}/journal`):

1. in this process, through Django's test client: the CPU per request (the primary figure), the
   SQL queries per request, and where the CPU goes (a profile: decrypting the records,
   rendering templates, serialising, the queries, the rest);
2. on the production server (`python -m agentloom.serve`, `--server-workers` Granian workers,
   pinned to CPU 0 with `taskset`) with this process as the load generator pinned to CPU 1: an
   open-loop rate of `--rate` requests a second (100) for `--seconds` (10), `--repeat` times (3),
   each request's latency counted from the moment it was due (so a server that falls behind
   shows it), and the server's CPU per request.

On a server with autovacuum off, the tables are analyzed once the session is journaled, as
autovacuum would have (`_scratch.analyze_as_autovacuum_would`).

Targets: ≤ 5 ms of CPU for a 200-record page; p95 at 100 requests/s. On a machine shared with
other work, CPU figures hold, latencies move with the load average (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import free_port, percentile, print_machine, wait_for  # noqa: E402
from _scratch import analyze_as_autovacuum_would, autovacuum_on, scratch_environment  # noqa: E402

# Where a profile's time goes, by the module of the function that spent it (first match wins).
CATEGORIES = (
    ("decryption", ("cryptography/", "agentloom/encryption.py", "agentloom/fields.py", "fernet")),
    ("templates", ("django/template/",)),
    ("serialising", ("rest_framework/serializers.py", "rest_framework/fields.py", "json/")),
    (
        "queries",
        ("psycopg/", "psycopg_pool/", "django/db/models/sql/", "django/db/backends/", "sqlite3"),
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200, help="in-process, per page")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server-workers", type=int, default=1)
    parser.add_argument("--no-server", dest="server", action="store_false")
    parser.add_argument("--pages", default="api,console", help="which pages: api, console")
    parser.add_argument(
        "--profile", help="print the 30 costliest functions of this page (api, console)"
    )
    options = parser.parse_args()
    admin = os.environ.get("DATABASE_URL", "")
    if not admin.startswith(("postgres://", "postgresql://")):
        sys.exit("bench/web.py needs DATABASE_URL=postgres://… (its scratch database is beside)")
    name = admin.rsplit("/", 1)[1].split("?")[0] + "_web"
    url = admin.rsplit("/", 1)[0] + "/" + name
    _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    print_machine()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            _run(options, url, Path(scratch))
    finally:
        _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as c:
        for statement in statements:
            c.execute(statement)


def _run(options, url: str, scratch: Path) -> None:
    scratch_environment(url)
    os.environ.update(
        {
            "AGENTLOOM_VAR_DIR": str(scratch),
            "STATIC_ROOT": str(scratch / "static"),
            "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "LOG_LEVEL": "WARNING",
        }
    )
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.DEBUG = False
    call_command("migrate", verbosity=0)
    world = _journaled_session(options.turns)
    if not autovacuum_on():
        # What autovacuum does after the session's inserts, on a server that has it off.
        analyze_as_autovacuum_would()
    after = (options.turns * 5) // 2  # a page from the middle of the journal
    every = {
        "api": ("API (JSON)", f"/api/v1/sessions/{world['session']}/messages"),
        "console": ("console journal (HTML)", f"/sessions/{world['session']}/journal/"),
    }
    pages = {
        every[name][0]: f"{every[name][1]}?after={after}&limit={options.limit}"
        for name in options.pages.split(",")
    }
    print(
        f"\na session of {options.turns:,} turns ({options.turns * 5:,} records), "
        f"a page of {options.limit} records after #{after}\n"
    )
    print(f"{'page':>24} | {'CPU ms/req':>10} | {'queries':>7} | where the CPU goes (profile)")
    profiles = {}
    for (label, path), name in zip(pages.items(), options.pages.split(","), strict=True):
        cpu, queries, profile = _in_process(world, path, options.requests)
        spread = ", ".join(f"{name} {share:.0%}" for name, share in _shares(profile))
        print(f"{label:>24} | {cpu:>10.2f} | {queries:>7} | {spread}", flush=True)
        profiles[name] = profile
    if options.profile in profiles:
        print(f"\nthe 30 costliest functions of the {options.profile} page, by own time:")
        pstats.Stats(profiles[options.profile]).sort_stats("tottime").print_stats(30)
    if options.server:
        _served(world, pages, options, scratch)


# --- the data --------------------------------------------------------------------------------


def _journaled_session(turns: int) -> dict:
    from agentloom.spaces.services.tokens import token_create
    from tests.factories import make_user
    from tests.support.journaled import journaled_session

    user = make_user("web")
    session = journaled_session(user, turns)
    _, key = token_create(user=user, name="bench")
    return {"user": user, "session": session.pk, "key": key}


# --- in this process -------------------------------------------------------------------------


def _client(world: dict, path: str):
    from django.test import Client

    client = Client()
    if path.startswith("/api/"):
        client.defaults["HTTP_AUTHORIZATION"] = f"Token {world['key']}"
    else:
        client.force_login(world["user"])
    return client


def _in_process(world: dict, path: str, requests: int) -> tuple[float, int, cProfile.Profile]:
    """Return the CPU ms per request, the queries of one request and a profile of requests."""
    from django.db import connection

    client = _client(world, path)
    for _ in range(20):  # warm: code loaded, templates compiled, connection open
        assert client.get(path).status_code == 200
    queries = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get(path)
    began = time.process_time()
    for _ in range(requests):
        client.get(path)
    cpu = (time.process_time() - began) * 1000 / requests
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(max(20, requests // 5)):
        client.get(path)
    profile.disable()
    return cpu, len(queries), profile


def _shares(profile: cProfile.Profile) -> list[tuple[str, float]]:
    """Return each category's share of the profile's own (not cumulative) time."""
    stats = pstats.Stats(profile).stats
    totals = dict.fromkeys([name for name, _ in CATEGORIES] + ["rest"], 0.0)
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        where = f"{filename} {function}"
        category = next(
            (name for name, marks in CATEGORIES if any(mark in where for mark in marks)), "rest"
        )
        totals[category] += own
    everything = sum(totals.values()) or 1.0
    return [(name, value / everything) for name, value in totals.items()]


# --- on the production server --------------------------------------------------------------------


def _served(world: dict, pages: dict, options, scratch: Path) -> None:
    import psutil
    from django.core.management import call_command

    call_command("collectstatic", "--no-input", verbosity=0)
    port = free_port()
    taskset = shutil.which("taskset")
    pinned = (os.cpu_count() or 1) > 1 and taskset is not None
    server_command = [sys.executable, "-m", "agentloom.serve", "--port", str(port)]
    server_command += ["--workers", str(options.server_workers)]
    server = subprocess.Popen(
        ([taskset, "-c", "0"] if pinned else []) + server_command,
        cwd=ROOT,
        env=os.environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if pinned:
        os.sched_setaffinity(0, {1})  # the load generator: the other core
    base = f"http://127.0.0.1:{port}"
    print(
        f"\nopen loop, {options.rate:.0f} requests/s for {options.seconds:.0f} s, "
        f"{options.repeat} repetitions; Granian with {options.server_workers} worker(s)"
        + (", server on CPU 0, load generator on CPU 1" if pinned else ", not pinned")
    )
    print(
        f"{'page':>24} | {'rep':>3} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} | "
        f"{'errors':>6} | {'server CPU ms/req':>17} | load"
    )
    try:
        wait_for(base)
        workers = psutil.Process(server.pid).children(recursive=True)
        for label, path in pages.items():
            headers, cookies = _credentials(world, path)
            asyncio.run(_open_loop(base + path, headers, cookies, rate=20, seconds=2))  # warm
            for repetition in range(1, options.repeat + 1):
                cpu_before = sum(sum(p.cpu_times()[:2]) for p in workers)
                latencies, errors = asyncio.run(
                    _open_loop(
                        base + path, headers, cookies, rate=options.rate, seconds=options.seconds
                    )
                )
                cpu = sum(sum(p.cpu_times()[:2]) for p in workers) - cpu_before
                print(
                    f"{label:>24} | {repetition:>3} | {percentile(latencies, 50):>7.1f} | "
                    f"{percentile(latencies, 95):>7.1f} | {percentile(latencies, 99):>7.1f} | "
                    f"{errors:>6} | {1000 * cpu / max(1, len(latencies)):>17.2f} | "
                    f"{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def _credentials(world: dict, path: str) -> tuple[dict, dict]:
    if path.startswith("/api/"):
        return {"Authorization": f"Token {world['key']}"}, {}
    from django.conf import settings

    client = _client(world, path)
    return {}, {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


async def _open_loop(
    url: str, headers: dict, cookies: dict, *, rate: float, seconds: float
) -> tuple[list[float], int]:
    """Send `rate` requests a second for `seconds` whatever the answers; return the latencies
    (ms, from when each request was due) and the errors."""
    import httpx

    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=1_000, max_keepalive_connections=200)
    async with httpx.AsyncClient(
        headers=headers, cookies=cookies, timeout=60, limits=limits
    ) as client:

        async def one(due: float) -> None:
            nonlocal errors
            try:
                answer = await client.get(url)
                errors += answer.status_code != 200
            except httpx.HTTPError:
                errors += 1
            latencies.append((time.perf_counter() - due) * 1000)

        loop_start = time.perf_counter()
        tasks = []
        for index in range(int(rate * seconds)):
            due = loop_start + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(due)))
        await asyncio.gather(*tasks)
    return latencies, errors


if __name__ == "__main__":
    main()
