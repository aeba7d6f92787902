"""The worker processes of one machine: `WORKER_PROCESSES` Celery workers on the thread pool.

    .venv/bin/python -m agentloom.work [--processes N] [--concurrency N] [--beat --schedule PATH]

A worker process holds many runs in flight (Celery's thread pool, `WORKER_CONCURRENCY` of them),
but it runs one Python thread at a time: the CPU its runs need between their calls (measuring
the view, encrypting, journaling) is bound by one core. So a machine runs `WORKER_PROCESSES`
of them — one per core on PostgreSQL by default, always one on SQLite (one writer at a time) —
each with its own connection pool (`DATABASE_POOL_SIZE`), database slots (`RUN_DATABASE_SLOTS`)
and lease renewer; the broker hands each one tasks up to its own concurrency.

This launcher starts them, each named `worker<i>@<host>` so that they never clash, passes a
SIGTERM or SIGINT on to them as one SIGTERM (Celery's warm shutdown) and then exits 0; when one
of them ends on its own, it stops the others and exits with that one's status, so that a
supervisor (systemd, a container's restart policy) restarts the set. `--beat` runs the beat's
schedule in the first process (what `./dev run` does); a deployment runs exactly one beat of
its own (`celery -A agentloom.celery beat`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

# A worker still running this long after it was told to stop is killed (Celery's warm shutdown
# waits for the runs in flight; their leases let another worker resume them).
STOP_SECONDS = 30


def worker_command(
    index: int, *, concurrency: int, beat: bool = False, schedule: str | None = None
) -> list[str]:
    """Return the command line of worker process `index` (from 1)."""
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "agentloom.celery",
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        f"--hostname=worker{index}@%h",
        f"--loglevel={os.environ.get('LOG_LEVEL', 'INFO')}",
    ]
    if beat and index == 1:
        command.append("--beat")
        if schedule:
            command.append(f"--schedule={schedule}")
    return command


def _stop(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def run(commands: list[list[str]]) -> int:
    """Start one process per command and supervise them; return the exit status of the set."""
    # Each in a process group of its own: a Ctrl-C at a terminal reaches the launcher alone, which
    # passes one SIGTERM on (Celery's warm shutdown; a second signal would make it a cold one).
    workers = [subprocess.Popen(command, process_group=0) for command in commands]  # noqa: S603
    stopping: list[int] = []

    def forward(signum, frame) -> None:
        stopping.append(signum)

    previous = {how: signal.signal(how, forward) for how in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            if stopping:
                _stop(workers)
                return 0
            for worker in workers:
                status = worker.poll()
                if status is not None:
                    _stop(workers)
                    return status or 1  # a worker that ends unasked is a failure
            time.sleep(0.2)
    finally:
        for how, handler in previous.items():
            signal.signal(how, handler)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")
    from django.conf import settings

    parser = argparse.ArgumentParser(prog="python -m agentloom.work", description=__doc__)
    parser.add_argument("--processes", type=int, default=settings.WORKER_PROCESSES)
    parser.add_argument("--concurrency", type=int, default=settings.WORKER_CONCURRENCY)
    parser.add_argument("--beat", action="store_true", help="run the beat in the first process")
    parser.add_argument("--schedule", help="the beat's schedule file (with --beat)")
    options = parser.parse_args(argv)
    if options.processes < 1 or options.concurrency < 1:
        parser.error("--processes and --concurrency must be at least 1")
    if options.processes > 1 and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        parser.error("SQLite takes one writer at a time: one worker process (--processes 1)")
    commands = [
        worker_command(
            index,
            concurrency=options.concurrency,
            beat=options.beat,
            schedule=options.schedule,
        )
        for index in range(1, options.processes + 1)
    ]
    sys.exit(run(commands))


if __name__ == "__main__":
    main()
