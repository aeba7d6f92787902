"""What one run costs its worker: SQL statements and CPU per two-call run, in process.

    .venv/bin/python bench/run_writes.py                      # SQLite (a scratch file)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom AGENTLOOM_TEST_LEG=postgres \\
        .venv/bin/python bench/run_writes.py                  # PostgreSQL (its test database)
    .venv/bin/python bench/run_writes.py --callgrind          # + instructions per run
    .venv/bin/python bench/run_writes.py --profile 30         # + where a warm run's CPU goes

It runs `RUNS` runs of fresh sessions of the offline demo model, each a tool call and then the
answer (two model calls), with `run_execute` in this process, and prints per run the mean SQL
statements (savepoints of the test transaction left out; the database live channel's delta rows
counted apart) by table and kind, the database slots it checked out, and the CPU time of
`run_execute` (mean and median of the runs after the first two, which warm the process up;
after them it freezes what is loaded, as a ready worker does), with the load average before
and after. Statements are counted by an execute wrapper, which
adds a function call per statement to the CPU and nothing else.

CPU time on a shared machine moves with its load; `--callgrind` runs the same bench under
`valgrind --tool=callgrind` and counts the instructions of `run_execute` in each run (the
calling thread's: callgrind's client requests start the count before the call and stop it
after; it needs a C compiler and valgrind's headers), which another process's load does not
change. `--profile N` prints the N functions of the warm runs with the most own time and the N
with the most time inside them (cProfile, timed by the
calling thread's CPU clock; the profiler slows what it measures two to three times).
The test database and its fixtures are the suite's (pytest-django), so nothing else is needed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import _callgrind
import _machine

RUNS = int(os.environ.get("RUN_WRITES_RUNS", "12"))
WARM_UP = 2
TWO_CALLS = '/tool echo {"text": "NONCE-7"}'
# Set by the command line for the collected test: the profile size.
PROFILE_LINES = int(os.environ.get("RUN_WRITES_PROFILE", "0"))
if __name__ != "__main__":
    # Collected by pytest (Django set up by pytest-django): the suite's fixtures.
    import pytest

    from tests.conftest import alice, queued_runs  # noqa: F401
    from tests.sessions_app.conftest import make_demo_session  # noqa: F401

    @pytest.fixture
    def demo_model():
        """The offline demo model itself (the suite's recording double validates every request,
        which would count as the run's CPU)."""
        from agentloom.engine import LocalDemoGateway
        from context_app import engine_adapter

        engine_adapter.set_gateway_factory(lambda version, connection: LocalDemoGateway())
        yield
        engine_adapter.set_gateway_factory(None)


SAVEPOINT = re.compile(r"\s*(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT)")
TABLE = re.compile(r'^\s*(\w+)\s+(?:OR IGNORE\s+)?(?:.*?\b(?:FROM|INTO)\s+)?"?(\w+)"?', re.S)


def _load() -> str:
    return "/".join(f"{figure:.2f}" for figure in os.getloadavg())


def test_run_writes(alice, demo_model, make_demo_session, monkeypatch):
    import cProfile
    import pstats

    from django.db import connection

    from agentloom.startup import freeze_loaded_objects
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask
    from sessions_app.services.slots import DatabaseSlots

    checkouts = []
    give_back = DatabaseSlots._give_back
    monkeypatch.setattr(
        DatabaseSlots, "_give_back", lambda slots: (checkouts.append(1), give_back(slots))[1]
    )
    statements: list[str] = []

    def counted(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    load_before = _load()
    callgrind = _callgrind.Requests()
    callgrind.start()  # every run is collected; the warm ones are reported
    # The calling thread's CPU time, not the wall clock: what other processes run does not count.
    profile = cProfile.Profile(time.thread_time) if PROFILE_LINES else None
    cpu, counts, deltas, kinds = [], [], [], Counter()
    for run_number in range(RUNS):
        if run_number == WARM_UP:
            # As a worker does once it is ready (agentloom.startup): what is loaded by now is
            # out of the collector's full collections, which would otherwise land in one run.
            freeze_loaded_objects()
        run = run_ask(user=alice, session=make_demo_session(), question=TWO_CALLS)
        statements.clear()
        profiled = profile is not None and run_number >= WARM_UP
        with connection.execute_wrapper(counted), callgrind.collected("run_execute"):
            started = time.process_time()
            if profiled:
                profile.enable()
            assert run_execute(run_id=run.pk) == "succeeded"
            if profiled:
                profile.disable()
            cpu.append((time.process_time() - started) * 1000)
        own = [sql for sql in statements if not SAVEPOINT.match(sql)]
        live = [sql for sql in own if "sessions_app_rundelta" in sql]
        counts.append(len(own) - len(live))
        deltas.append(len(live))
        for sql in own:
            match = TABLE.match(sql)
            kinds[(match.group(1), match.group(2)) if match else (sql.split()[0], "?")] += 1
    warm = cpu[WARM_UP:] or cpu
    print(f"\n{connection.vendor}: {RUNS} two-call runs (load average {load_before} → {_load()})")
    print(
        f"  statements per run: {statistics.mean(counts):.1f} (+ {statistics.mean(deltas):.1f} "
        "of the database live channel)"
    )
    print(f"  database slot checkouts per run: {len(checkouts) / RUNS:.1f}")
    print(
        f"  CPU ms per run: mean {statistics.mean(warm):.1f}, median {statistics.median(warm):.1f}"
        + (" (under callgrind)" if callgrind.active else "")
        + (" (profiled)" if profile is not None else "")
    )
    for (kind, table), number in kinds.most_common():
        print(f"  {number / RUNS:5.1f}  {kind:<7} {table}")
    if profile is not None:
        for order in ("tottime", "cumulative"):
            print(f"\nwarm runs, by {order}:")
            pstats.Stats(profile, stream=sys.stdout).sort_stats(order).print_stats(PROFILE_LINES)


def _count_instructions(pytest_arguments: list[str]) -> int:
    """Run the bench under callgrind and print the instructions of each warm run."""
    with tempfile.TemporaryDirectory(prefix="run-writes-") as scratch:
        directory = Path(scratch)
        output = directory / "callgrind.out"
        command = _callgrind.command(output, sys.executable, "-m", "pytest")
        # Under callgrind the suite's database setup alone outlasts the per-test timeout.
        command += ["--timeout=0", *pytest_arguments]
        library = _callgrind.client_requests(directory)
        environment = {**os.environ, _callgrind.LIBRARY: str(library)}
        status = subprocess.run(command, env=environment, check=False).returncode
        runs = _callgrind.totals(output)
        warm = runs[WARM_UP:] or runs
        if warm:
            mean, median = statistics.mean(warm) / 1e6, statistics.median(warm) / 1e6
            print(
                f"instructions of run_execute per run ({len(warm)} warm of {len(runs)}): mean "
                f"{mean:.2f} M, median {median:.2f} M, min {min(warm) / 1e6:.2f} M, "
                f"max {max(warm) / 1e6:.2f} M"
            )
        return status or (0 if warm else 1)


if __name__ == "__main__":
    import pytest

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callgrind", action="store_true", help="count instructions per run")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print a profile")
    arguments = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    os.chdir(root)
    sys.path.insert(0, str(root))
    os.environ.setdefault("TEST_SQLITE_NAME", "/tmp/agentloom-run-writes.sqlite3")
    os.environ["RUN_WRITES_PROFILE"] = str(arguments.profile)
    pytest_arguments = _machine.pytest_arguments(__file__)
    if arguments.callgrind:
        sys.exit(_count_instructions(pytest_arguments))
    sys.exit(pytest.main(pytest_arguments))
