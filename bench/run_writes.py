"""What one run costs its worker: SQL statements and CPU per two-call run, in process.

    .venv/bin/python bench/run_writes.py                      # SQLite (a scratch file)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom AGENTLOOM_TEST_LEG=postgres \\
        .venv/bin/python bench/run_writes.py                  # PostgreSQL (its test database)

It runs `RUNS` runs of fresh sessions of the offline demo model, each a tool call and then the
answer (two model calls), with `run_execute` in this process, and prints per run the mean SQL
statements (savepoints of the test transaction left out; the database live channel's delta rows
counted apart) by table and kind, the database slots it checked out, and the CPU time of
`run_execute` (mean and median of the runs after the first two, which warm the process up).
The test database and its fixtures are the suite's (pytest-django), so nothing else is needed.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

RUNS = int(os.environ.get("RUN_WRITES_RUNS", "12"))
TWO_CALLS = '/tool echo {"text": "NONCE-7"}'
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


def test_run_writes(alice, demo_model, make_demo_session, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask
    from sessions_app.services.slots import DatabaseSlots

    checkouts = []
    give_back = DatabaseSlots._give_back
    monkeypatch.setattr(
        DatabaseSlots, "_give_back", lambda slots: (checkouts.append(1), give_back(slots))[1]
    )
    cpu, counts, deltas, kinds = [], [], [], Counter()
    for _run in range(RUNS):
        run = run_ask(user=alice, session=make_demo_session(), question=TWO_CALLS)
        with CaptureQueriesContext(connection) as queries:
            started = time.process_time()
            assert run_execute(run_id=run.pk) == "succeeded"
            cpu.append((time.process_time() - started) * 1000)
        statements = [q["sql"] for q in queries.captured_queries if not SAVEPOINT.match(q["sql"])]
        live = [s for s in statements if "sessions_app_rundelta" in s]
        counts.append(len(statements) - len(live))
        deltas.append(len(live))
        for sql in statements:
            match = TABLE.match(sql)
            kinds[(match.group(1), match.group(2)) if match else (sql.split()[0], "?")] += 1
    warm = cpu[2:] or cpu
    print(f"\n{connection.vendor}: {RUNS} two-call runs")
    print(
        f"  statements per run: {statistics.mean(counts):.1f} (+ {statistics.mean(deltas):.1f} "
        "of the database live channel)"
    )
    print(f"  database slot checkouts per run: {len(checkouts) / RUNS:.1f}")
    print(
        f"  CPU ms per run: mean {statistics.mean(warm):.1f}, median {statistics.median(warm):.1f}"
    )
    for (kind, table), number in kinds.most_common():
        print(f"  {number / RUNS:5.1f}  {kind:<7} {table}")


if __name__ == "__main__":
    import pytest

    root = Path(__file__).resolve().parents[1]
    os.chdir(root)
    sys.path.insert(0, str(root))
    os.environ.setdefault("TEST_SQLITE_NAME", "/tmp/agentloom-run-writes.sqlite3")
    sys.exit(
        pytest.main(
            [
                "-q",
                "-s",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(root),
                "-c",
                str(root / "pyproject.toml"),
                __file__,
            ]
        )
    )
