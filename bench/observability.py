"""What observing costs: CPU per run with metrics and tracing on against off, and the usage page
on a year of a busy space.

    .venv/bin/python bench/observability.py                   # SQLite (a scratch file)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentloom AGENTLOOM_TEST_LEG=postgres \\
        .venv/bin/python bench/observability.py               # PostgreSQL (its test database)

`test_cpu_per_run`: `RUNS` two-call runs (a tool call, then the answer) of the offline demo model
with `run_execute` in this process, alternating off (no tracer; the metrics' in-process counters
count anyway, as they do in every process) and on (metrics, plus every span to an in-memory
exporter as it ends); prints the median CPU ms of each, after two warm-up runs each, and the
median of each pair's difference (an on run less the off run just before it: a shared machine's
load changes less between neighbours than over the whole bench).

`--instructions` counts instead of timing: the instructions our process executes per two-call
run, counted by `valgrind --tool=callgrind` (the same for the same inputs whatever the load), for
tracing off and on (spans to an in-memory exporter), `RUNS` of each alternating after one warm-up
run each. Only `run_execute` (and the task span around it) is counted: each measured run is
called through `sys.call_tracing`, the one function callgrind collects in and dumps after.
Valgrind instruments nothing until the warm-up runs are done (a client request of
`bench/_callgrind.py` starts it), so start-up runs at near native speed. The database is the
test database made natively first (`--create-db`) and reused under callgrind; only this process
runs under valgrind, and the demo model makes no connection.

    .venv/bin/python bench/observability.py --instructions [--runs 6]

`test_usage_page`: writes the spend record of `CALLS` model calls over a year (365 days, 5 agents,
20 members, 2 models, two currencies: one row per key and day) and times the usage page's
report over the whole year and over 30 days (median of 5), and the page itself (rendered).
"""

from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

import _callgrind
import _machine

RUNS = int(os.environ.get("OBS_BENCH_RUNS", "30"))
CALLS = int(os.environ.get("OBS_BENCH_CALLS", "1000000"))
TWO_CALLS = '/tool echo {"text": "NONCE-7"}'
if __name__ != "__main__":
    import pytest

    from tests.conftest import alice, queued_runs  # noqa: F401
    from tests.sessions_app.conftest import make_demo_session  # noqa: F401

    @pytest.fixture
    def demo_model():
        """The offline demo model itself (not the suite's validating double)."""
        from agentloom.engine import LocalDemoGateway
        from context_app import engine_adapter

        engine_adapter.set_gateway_factory(lambda version, connection: LocalDemoGateway())
        yield
        engine_adapter.set_gateway_factory(None)


def test_cpu_per_run(alice, demo_model, make_demo_session):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloom import tracing
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    exporter = InMemorySpanExporter()
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for number in range(2 * (RUNS + 2)):
        on = number % 2 == 1
        if on:
            tracing.configure(exporter=exporter)
        run = run_ask(user=alice, session=make_demo_session(), question=TWO_CALLS)
        started = time.process_time()
        with tracing.span_from("task", {}):
            assert run_execute(run_id=run.pk) == "succeeded"
        cpu[on].append((time.process_time() - started) * 1000)
        tracing.unconfigure()
    off, on = (statistics.median(cpu[key][2:]) for key in (False, True))
    paired = statistics.median(b - a for a, b in zip(cpu[False][2:], cpu[True][2:], strict=True))
    print(f"\nCPU ms per two-call run ({RUNS} runs each, median after 2 warm-up runs)")
    print(f"  off: {off:.2f}   on (metrics + spans to memory): {on:.2f}   +{(on / off - 1):.1%}")
    print(f"  paired (on less the off run before it): {paired:+.2f} ms, {paired / off:+.1%}")
    print(f"  spans exported: {len(exporter.get_finished_spans())}")


def test_instructions_per_run(alice, demo_model, make_demo_session):
    """The runs `--instructions` counts under callgrind (skipped unless it runs them)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloom import tracing
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    callgrind = _callgrind.Requests()
    if not callgrind.active:
        pytest.skip("counted by `bench/observability.py --instructions`, under callgrind")
    exporter = InMemorySpanExporter()
    for number in range(2 * (RUNS + 1)):
        on = number % 2 == 1
        if on:
            tracing.configure(exporter=exporter)
        run = run_ask(user=alice, session=make_demo_session(), question=TWO_CALLS)

        def execute(run_id=run.pk):
            with tracing.span_from("task", {}):
                assert run_execute(run_id=run_id) == "succeeded"

        if number == 2:
            callgrind.start()
        if number >= 2:
            sys.call_tracing(execute, ())  # collected, and dumped after: one file a run
        else:
            execute()
        tracing.unconfigure()


def count_instructions(runs: int) -> None:
    """Run `test_instructions_per_run` under callgrind; print instructions per run off and on."""
    import subprocess
    import tempfile

    pytest_args = [
        "-m",
        "pytest",
        *_machine.pytest_arguments(__file__, "test_instructions_per_run"),
    ]
    env = {**os.environ, "OBS_BENCH_RUNS": str(runs)}
    # The test database, made natively (its migrations would take long under valgrind).
    subprocess.run([sys.executable, *pytest_args, "--create-db"], env=env, check=True)
    out = Path(tempfile.mkdtemp(prefix="obs-callgrind-"))
    library = _callgrind.client_requests(out)
    valgrind = _callgrind.command(
        out / "run",
        "--toggle-collect=sys_call_tracing",
        "--dump-after=sys_call_tracing",
        "--log-file=" + str(out / "valgrind.log"),
    )
    started = time.monotonic()
    subprocess.run(
        [*valgrind, sys.executable, *pytest_args, "--reuse-db", "--timeout=0"],
        env={**env, _callgrind.LIBRARY: str(library)},
        check=True,
    )
    counts = _callgrind.totals(out / "run")
    if len(counts) != 2 * runs:
        raise SystemExit(f"expected {2 * runs} dumps of a run in {out}, found {len(counts)}")
    off, on = counts[0::2], counts[1::2]
    off_median, on_median = statistics.median(off), statistics.median(on)
    print(f"\ninstructions per two-call run (callgrind, {runs} runs each after 1 warm-up)")
    print(f"  off: {off_median:,.0f} (min {min(off):,}, max {max(off):,})")
    print(f"  on:  {on_median:,.0f} (min {min(on):,}, max {max(on):,})")
    print(f"  on / off: {on_median / off_median:.4f} ({on_median / off_median - 1:+.2%})")
    print(f"  ({time.monotonic() - started:.0f} s under valgrind; dumps in {out})")


def test_usage_page(alice, client):
    from agentloom.spaces.models import Space
    from sessions_app.models import UsageDay
    from sessions_app.selectors.usage import UsageRange, usage_report
    from tests.factories import make_space

    space = make_space(admin=alice)
    keys = [
        (agent, member, model, currency)
        for agent in range(1, 6)
        for member in range(1, 21)
        for model, currency in (("gpt-5.4", "USD"), ("deepseek-v4", "CNY"))
    ]
    end = datetime.date(2026, 12, 31)
    count = 365 * len(keys)
    per_row, extra = max(1, CALLS // count), CALLS % count
    rows = [
        UsageDay(
            space=space,
            day=end - datetime.timedelta(days=day),
            agent_id=agent,
            member_id=alice.pk if member == 1 else 10_000 + member,
            model=model,
            currency=currency,
            calls=per_row,
            input_tokens=per_row * 9_000,
            cached_tokens=per_row * 6_000,
            output_tokens=per_row * 800,
            cost=Decimal("0.0123") * per_row,
            runs_succeeded=per_row // 2,
        )
        for day in range(365)
        for agent, member, model, currency in keys
    ]
    for row in rows[:extra]:  # the calls that do not divide evenly
        row.calls += 1
    UsageDay.objects.bulk_create(rows, batch_size=5_000)
    Space.objects.filter(pk=space.pk).update(time_zone="Europe/Berlin")
    space.refresh_from_db()
    total = sum(row.calls for row in rows)
    year = UsageRange(end - datetime.timedelta(days=365), end)
    month = UsageRange(end - datetime.timedelta(days=29), end)
    timings = {}
    for name, span in (("year", year), ("30 days", month)):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            report = usage_report(user=alice, space=space, span=span)
            times.append((time.perf_counter() - started) * 1000)
        timings[name] = statistics.median(times)
        if name == "year":
            assert report["total"]["calls"] == total
    client.force_login(alice)
    query = {"space": space.pk, "start": year.start.isoformat(), "end": year.end.isoformat()}
    times = []
    for _ in range(5):
        started = time.perf_counter()
        assert client.get("/usage/", query).status_code == 200
        times.append((time.perf_counter() - started) * 1000)
    print(f"\nusage page: {total:,} model calls in {len(rows):,} record rows (a year)")
    for name, value in timings.items():
        print(f"  report over {name}: {value:.0f} ms (median of 5)")
    print(f"  the page over the year, rendered: {statistics.median(times):.0f} ms (median of 5)")


if __name__ == "__main__":
    import argparse

    import pytest

    root = Path(__file__).resolve().parents[1]
    os.chdir(root)
    sys.path.insert(0, str(root))
    os.environ.setdefault("TEST_SQLITE_NAME", "/tmp/agentloom-observability.sqlite3")
    parser = argparse.ArgumentParser(description="What observing costs.")
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--runs", type=int, default=6, help="runs of each mode (--instructions)")
    options = parser.parse_args()
    if options.instructions:
        if options.runs < 1:
            parser.error("--runs must be at least 1")
        count_instructions(options.runs)
        sys.exit(0)
    sys.exit(pytest.main(_machine.pytest_arguments(__file__)))
