"""Time the migrations of large tables (`migrate_references`, `store_messages_once`) on one session.

    .venv/bin/python bench/references.py                              # 100,000 records, both
    .venv/bin/python bench/references.py --records 2000 --backends sqlite   # smoke run

Builds, with `bulk_create`, one session of N journal records (turns of a question, a tool call,
its result, an answer and the run's status), one run whose compaction snapshot refers to every
record but the statuses one row per record, and a reusable view saved from that snapshot with
the same rows again: references as they were written before ranges. Then it runs the migration
batch by batch, as the command does, and prints the rows before and after, the wall and CPU time,
the longest batch (the longest any transaction of it held its row locks) and, on PostgreSQL, the
reference table's size (heap and indexes) before and after a VACUUM.

Then (`--summaries`, by default one per 70 records as the peer workload compacts at 128K) it
gives the session handoff summaries as they were saved before messages were stored once: each
summary (`--summary-chars`) inline in the three compaction snapshots of its run (the compaction
and two maskings) and in the two views saved from them, beside a small note. It runs `manage.py
store_messages_once`'s batches and prints the rows rewritten, the messages stored, the wall and
CPU time, the longest batch and, on PostgreSQL, the three tables' size after a VACUUM FULL
before and after.

Each backend runs in a fresh process on a scratch database: PostgreSQL `<name>_refs` next to the
database named by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), created and
dropped by the script; SQLite in a temporary directory.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scratch import scratch_environment

DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"
TURN = ("user_input", "assistant", "tool_result", "assistant", "status")
CHUNK = 5_000


def _admin_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else DEFAULT_POSTGRES_URL


def _scratch_url(admin_url: str) -> str:
    base, name = admin_url.rsplit("/", 1)
    return f"{base}/{name.split('?')[0]}_refs"


def _admin_execute(admin_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://", 1), autocommit=True
    ) as connection:
        connection.execute(statement)


def _build(records: int):
    """Return the session built: its records, one run, a snapshot's and a view's references."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from context_app.services.agents import agent_create, agent_publish
    from models_app.models import ModelConnection
    from sessions_app.models import JournalReference, Run, SessionMessage, SessionView
    from sessions_app.services.runs import session_create
    from tests.factories import make_space

    user, _ = get_user_model().objects.get_or_create(username="bench-refs")
    space = make_space(name="bench refs", admin=user)
    connection = ModelConnection.objects.create(
        space=space, name="refs", provider="local", model_id="local-demo"
    )
    agent = agent_create(
        user=user, space=space, name="refs", system_prompt="Bench.", model_connection=connection.pk
    )
    session = session_create(user=user, agent_version=agent_publish(user=user, agent=agent))
    run = Run.objects.create(session=session, number=1, status="succeeded", question="q")
    now = timezone.now()
    for start in range(1, records + 1, CHUNK):
        SessionMessage.objects.bulk_create(
            [
                SessionMessage(
                    session=session,
                    seq=seq,
                    run=run,
                    kind=TURN[(seq - 1) % len(TURN)],
                    entry_key=f"e{seq}",
                    local_seq=seq,
                    message={"role": "user", "content": f"record {seq}"},
                    created_at=now,
                )
                for seq in range(start, min(start + CHUNK, records + 1))
            ]
        )
    view = SessionView.objects.create(
        session=session, revision=1, watermark=records, messages=[], run=run, snapshot_revision=1
    )
    ids = SessionMessage.objects.filter(session=session).exclude(kind="status")
    ids = list(ids.order_by("seq").values_list("pk", flat=True))
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        JournalReference.objects.bulk_create(
            [JournalReference(message_id=pk, run=run, snapshot_revision=1) for pk in chunk]
            + [JournalReference(message_id=pk, view=view) for pk in chunk]
        )
    return session


def _summaries(session, count: int, chars: int) -> None:
    """Give `session` `count` summaries saved inline, as before messages were stored once."""
    import random

    from sessions_app.models import CompactionSnapshot, Run, SessionView

    words = random.Random(7).choices(
        ["goal", "state", "file", "tool", "result", "open", "decided", "next", "error", "kept"]
        + [f"w{n}" for n in range(400)],
        k=chars // 4,
    )
    note = {"role": "user", "content": "[note] earlier tool results are shown as stubs"}
    revision = 2  # the references part saved revision 1
    for number in range(count):
        text = f"Summary {number}: " + " ".join(words[number % 50 :])[:chars]
        summary = {"role": "user", "content": text}
        run = Run.objects.create(
            session=session, number=number + 2, status="succeeded", question="q"
        )
        snapshots = CompactionSnapshot.objects.bulk_create(
            [
                CompactionSnapshot(
                    run=run,
                    revision=r,
                    snapshot={"view": [{"m": summary}, {"m": note}], "revision": r},
                )
                for r in (1, 2, 3)
            ]
        )
        SessionView.objects.bulk_create(
            [
                SessionView(
                    session=session,
                    revision=revision + offset,
                    watermark=number + 1,
                    messages=[summary, note],
                    entries=[{"i": 0}, {"i": 1}],
                    run=run,
                    snapshot=snapshots[offset + 1],
                    snapshot_revision=offset + 2,
                )
                for offset in (0, 1)
            ]
        )
        revision += 2


_SUMMARY_TABLES = (
    "sessions_app_compactionsnapshot",
    "sessions_app_sessionview",
    "sessions_app_storedmessage",
)


def _summary_tables(backend: str) -> str:
    if backend != "postgresql":
        return ""
    from django.db import connection

    sizes = []
    with connection.cursor() as cursor:
        for table in _SUMMARY_TABLES:
            cursor.execute(f"VACUUM FULL {table}")
            cursor.execute("SELECT pg_total_relation_size(%s)", [table])
            sizes.append(f"{table.removeprefix('sessions_app_')} {cursor.fetchone()[0] / 1e6:.2f}")
    return ", MB: " + ", ".join(sizes)


def _timed_batches(batch) -> str:
    """Call `batch` until it returns False; return the batches, wall and CPU time and longest."""
    wall, cpu = time.perf_counter(), time.process_time()
    longest, batches = 0.0, 0
    while True:
        started = time.perf_counter()
        if not batch():
            break
        longest = max(longest, time.perf_counter() - started)
        batches += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return (
        f"{batches} batches, wall {wall:.1f} s, CPU {cpu:.1f} s, "
        f"longest batch {longest * 1000:.0f} ms"
    )


def _store_once(session, summaries: int, chars: int, batch_size: int) -> None:
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.models import CompactionSnapshot, SessionView, StoredMessage
    from sessions_app.services.stored_messages import stored_messages_batch

    backend = connection.vendor
    started = time.perf_counter()
    _summaries(session, summaries, chars)
    print(
        f"  built {summaries:,} summaries of {chars:,} characters inline in "
        f"{CompactionSnapshot.objects.count():,} snapshots and {SessionView.objects.count():,} "
        f"views in {time.perf_counter() - started:.1f} s{_summary_tables(backend)}"
    )
    cursors = {CompactionSnapshot: 0, SessionView: 0}
    rewritten = 0

    def batch() -> bool:
        nonlocal rewritten
        for model, after in cursors.items():
            if after is not None:
                last, done = stored_messages_batch(model, after=after, limit=batch_size)
                cursors[model], rewritten = last or None, rewritten + done
                return True
        return False

    timed = _timed_batches(batch)
    print(
        f"  store_messages_once: {timed} (batches of {batch_size:,}), {rewritten:,} rows "
        f"rewritten, {StoredMessage.objects.count():,} messages stored"
    )
    if backend == "postgresql":
        print(f"  after{_summary_tables(backend)}")
    again = time.perf_counter()
    call_command("store_messages_once", stdout=io.StringIO())
    print(f"  run again: nothing to rewrite, {time.perf_counter() - again:.2f} s")


def _table(backend: str) -> str:
    if backend != "postgresql":
        return ""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE sessions_app_journalreference")
        cursor.execute(
            "SELECT pg_relation_size('sessions_app_journalreference'), "
            "pg_indexes_size('sessions_app_journalreference')"
        )
        heap, indexes = cursor.fetchone()
    return f", heap {heap / 1e6:.2f} MB + indexes {indexes / 1e6:.2f} MB"


def one(url: str, records: int, batch_size: int, summaries: int, chars: int) -> None:
    scratch_environment(url)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.models import JournalReference
    from sessions_app.services.reusable_views import references_migrate_batch

    settings.DEBUG = False
    call_command("migrate", verbosity=0)
    backend = connection.vendor
    started = time.perf_counter()
    session = _build(records)
    print(f"{backend}: built {records:,} records in {time.perf_counter() - started:.1f} s")
    print(f"  before: {JournalReference.objects.count():,} reference rows{_table(backend)}")
    timed = _timed_batches(lambda: bool(references_migrate_batch(batch_size)))
    print(f"  migrate_references: {timed} (batches of {batch_size:,})")
    print(f"  after: {JournalReference.objects.count():,} reference rows{_table(backend)}")
    again = time.perf_counter()
    call_command("migrate_references", stdout=io.StringIO())
    print(f"  run again: nothing to do, {time.perf_counter() - again:.2f} s")
    if summaries:
        _store_once(session, summaries, chars, 200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--summaries", type=int, help="default: one per 70 records")
    parser.add_argument("--summary-chars", type=int, default=8_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    summaries = arguments.records // 70 if arguments.summaries is None else arguments.summaries
    if arguments.one:
        one(
            arguments.one,
            arguments.records,
            arguments.batch_size,
            summaries,
            arguments.summary_chars,
        )
        return
    command = [sys.executable, __file__, "--records", str(arguments.records)]
    command += ["--batch-size", str(arguments.batch_size), "--summaries", str(summaries)]
    command += ["--summary-chars", str(arguments.summary_chars), "--one"]
    for backend in arguments.backends.split(","):
        if backend == "postgres":
            admin_url = _admin_url()
            name = _scratch_url(admin_url).rsplit("/", 1)[1]
            _admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            _admin_execute(admin_url, f'CREATE DATABASE "{name}"')
            try:
                subprocess.run([*command, _scratch_url(admin_url)], check=True)
            finally:
                _admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            with tempfile.TemporaryDirectory(prefix="agentloom-refs-") as scratch:
                path = os.path.join(scratch, "refs.sqlite3")
                subprocess.run([*command, f"sqlite:///{path}"], check=True)


if __name__ == "__main__":
    main()
