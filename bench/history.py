"""Benchmark the session history service on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/history.py

Creates (and drops afterwards) a scratch database `agentloom_bench` next to the one named by
DATABASE_URL, and prints:
- new-run history load time for sessions of 1k / 10k / 100k main records, with and without a
  reusable view near the end (and their ratio);
- journal sync throughput (records/s) and bytes per journal record on disk;
- engine steps per second end to end (scripted model, persistence and encryption included) with
  one and with two worker processes.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scratch import scratch_environment

from agentloom.engine import ModelGateway, ModelResponse

ROOT = Path(__file__).resolve().parents[1]
BENCH_DB = "agentloom_bench"


def _admin_url() -> str:
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("bench/history.py measures PostgreSQL: set DATABASE_URL=postgres://…")
    return url


def _bench_url(admin_url: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + BENCH_DB


def _recreate_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://", 1), autocommit=True
    ) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{BENCH_DB}"')


def _drop_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://", 1), autocommit=True
    ) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')


def _setup_django(url: str) -> None:
    scratch_environment(url)
    import django

    django.setup()


# --- fixtures --------------------------------------------------------------------------------


def _published_session(tag: str):
    from django.contrib.auth import get_user_model

    from context_app.services.agents import agent_create, agent_publish
    from models_app.models import ModelConnection
    from sessions_app.services.runs import session_create
    from tests.factories import make_space

    user, _ = get_user_model().objects.get_or_create(username=f"bench-{tag}")
    space = make_space(name=f"bench {tag}", admin=user)
    connection = ModelConnection.objects.create(
        space=space,
        name="local",
        provider="local",
        model_id="local-demo",
        context_window=1_000_000,
        max_output_tokens=4_096,
        safety_margin_tokens=1_024,
    )
    agent = agent_create(
        user=user,
        space=space,
        name="bench",
        system_prompt="You are a benchmark.",
        model_connection=connection.pk,
        tools=["echo"],
    )
    return user, session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


def _fill_journal(session, user, records: int) -> None:
    """Append `records` main-instance records in complete 4-record groups, one run per group."""
    from django.utils import timezone

    from sessions_app.models import Run, SessionMessage

    now = timezone.now()
    groups = records // 4
    runs = Run.objects.bulk_create(
        [
            Run(session=session, number=n + 1, status="succeeded", question=f"q{n}", attempt=1)
            for n in range(groups)
        ],
        batch_size=2_000,
    )
    rows, seq = [], 0
    for n, run in enumerate(runs):
        call = f"c{n}"
        group = [
            ("user_input", "user_input", {"role": "user", "content": f"Question {n}: NONCE-{n}"}),
            (
                "assistant",
                "assistant:1",
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "echo", "arguments": f'{{"text": "value {n}"}}'},
                        }
                    ],
                },
            ),
            (
                "tool_result",
                f"tool:{call}",
                {"role": "tool", "tool_call_id": call, "content": f"value {n} " + "x" * 200},
            ),
            ("assistant", "assistant:2", {"role": "assistant", "content": f"Answer {n}."}),
        ]
        for kind, key, message in group:
            seq += 1
            rows.append(
                SessionMessage(
                    session=session,
                    seq=seq,
                    run=run,
                    instance="main",
                    kind=kind,
                    entry_key=key,
                    message=message,
                    created_at=now,
                )
            )
        if len(rows) >= 5_000:
            SessionMessage.objects.bulk_create(rows)
            rows = []
    SessionMessage.objects.bulk_create(rows)
    type(session).objects.filter(pk=session.pk).update(next_seq=seq + 1)


def _timed(function, repeat: int = 3) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_history_load() -> list[tuple]:
    from context_app.engine_adapter import version_binding
    from sessions_app.models import SessionView
    from sessions_app.selectors.history import history_for_new_run
    from sessions_app.selectors.views import binding_key

    rows = []
    for size in (1_000, 10_000, 100_000):
        user, session = _published_session(f"load{size}")
        _fill_journal(session, user, size)
        binding = version_binding(session.agent_version)
        without = _timed(lambda s=session, b=binding: history_for_new_run(s, b))
        last_run = session.runs.order_by("-number").first()
        SessionView.objects.create(
            session=session,
            revision=1,
            watermark=size - 20,
            run=last_run,
            binding=binding,
            binding_key=binding_key(binding),
            messages=[{"role": "user", "content": "[handoff summary] " + "fact 1. " * 200}],
            user_turns=size // 4 - 5,
            model_steps=size // 2 - 10,
            baseline_user_turns=size // 4 - 5,
            baseline_model_steps=size // 2 - 10,
        )
        with_view = _timed(lambda s=session, b=binding: history_for_new_run(s, b))
        rows.append((size, without * 1000, with_view * 1000, without / with_view))
    return rows


def bench_journal_sync(run_length: int, runs: int) -> float:
    """Return records/s syncing `runs` runs of `run_length` records, 10 new records per save.

    The frame grows as the engine grows it (every record shown in the view); each save hands
    over the checkpoint by reference and the records added since the last one.
    """
    from agentloom.engine import Checkpoint, InstanceFrame, Record
    from sessions_app.models import Run
    from sessions_app.services.journal import JournalWriter

    _user, session = _published_session(f"sync{run_length}")
    elapsed, total, batch = 0.0, 0, 10
    for number in range(1, runs + 1):
        run = Run.objects.create(session=session, number=number, status="succeeded", question="q")
        writer = JournalWriter(run, lease_owner=None)
        frame = InstanceFrame(instance="main", messages=[{"role": "system", "content": "s"}])
        started = time.perf_counter()
        for n in range(run_length):
            message = {"role": "assistant", "content": f"step {n} " + "y" * 200}
            at = f"2026-11-30T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00"
            frame.add_record(Record(n + 1, "assistant", message, f"assistant:{n + 1}", at))
            frame.show(message, {"own": n + 1})
            if n % batch == batch - 1:
                writer.sync(Checkpoint.of(frame))
                frame.mark_saved()
        elapsed += time.perf_counter() - started
        total += run_length
    return total / elapsed


def journal_bytes_per_record() -> float:
    from django.db import connection

    from sessions_app.models import SessionMessage

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('sessions_app_sessionmessage')")
        size_bytes = cursor.fetchone()[0]
    return size_bytes / SessionMessage.objects.count()


class _LoopingGateway(ModelGateway):
    """A scripted model: `steps` tool calls, then a final answer."""

    provider, model_id = "bench", "bench"

    def __init__(self, steps: int):
        self.steps = steps

    def complete(self, request):
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if request.purpose != "action" or done >= self.steps:
            return ModelResponse(message={"role": "assistant", "content": "done"})
        return ModelResponse(
            message={
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"x{done}",
                        "type": "function",
                        "function": {"name": "echo", "arguments": '{"text": "' + "z" * 100 + '"}'},
                    }
                ],
            }
        )


def _worker(url: str, run_ids: list[int], steps: int, ready, go, spans) -> None:
    _setup_django(url)
    from django.db import connections

    from context_app import engine_adapter
    from sessions_app.services.execution import run_execute

    engine_adapter.set_gateway_factory(lambda version, connection: _LoopingGateway(steps))
    ready.put(True)
    go.wait()  # start together, after Django has loaded in every process
    started = time.time()
    for run_id in run_ids:
        run_execute(run_id=run_id)
    spans.put((started, time.time()))
    connections.close_all()


def bench_engine_steps(url: str, workers: int, runs: int = 16, steps: int = 25) -> float:
    from django.db import connections

    from sessions_app.models import SessionMessage
    from sessions_app.services.runs import run_ask

    run_ids = []
    for n in range(runs):
        user, session = _published_session(f"steps{workers}-{n}")
        run_ids.append(run_ask(user=user, session=session, question="loop").pk)
    connections.close_all()
    context = multiprocessing.get_context("spawn")
    ready, go, spans = context.Queue(), context.Event(), context.Queue()
    processes = [
        context.Process(target=_worker, args=(url, run_ids[w::workers], steps, ready, go, spans))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    go.set()
    for process in processes:
        process.join()
    measured = [spans.get(timeout=10) for _ in processes]
    elapsed = max(end for _, end in measured) - min(start for start, _ in measured)
    made = SessionMessage.objects.filter(run_id__in=run_ids, kind="assistant").count()
    return made / elapsed


def main() -> None:
    admin_url = _admin_url()
    url = _bench_url(admin_url)
    _recreate_database(admin_url)
    try:
        _setup_django(url)
        from django.core.management import call_command

        # Sending a run to the broker is not what is measured here.
        from sessions_app import tasks

        tasks.execute_run.delay = lambda run_id, **_: None
        call_command("migrate", verbosity=0)

        print("New-run history load (PostgreSQL, median of 3)")
        print(f"{'main records':>12} | {'no view (ms)':>12} | {'view near end (ms)':>18} | ratio")
        for size, without, with_view, ratio in bench_history_load():
            print(f"{size:>12,} | {without:>12.1f} | {with_view:>18.1f} | {ratio:5.1f}x")

        print("\nJournal sync (10 new records per save; the checkpoint holds no records)")
        for run_length, runs in ((100, 20), (1_000, 2), (5_000, 1)):
            rate = bench_journal_sync(run_length, runs)
            print(f"  runs of {run_length:>5,} records: {rate:>8,.0f} records/s")
        per_record = journal_bytes_per_record()
        print(f"Journal size on disk: {per_record:,.0f} bytes per record (table + indexes)")

        print("\nEngine steps end to end (scripted model, journal, encryption)")
        for workers in (1, 2):
            rate = bench_engine_steps(url, workers)
            print(f"  {workers} worker process(es): {rate:,.1f} steps/s")
    finally:
        from django.db import connections

        connections.close_all()
        _drop_database(admin_url)


if __name__ == "__main__":
    main()
