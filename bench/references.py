"""Time `manage.py migrate_references` on one session of journal records referenced per record.

    .venv/bin/python bench/references.py                              # 100,000 records, both
    .venv/bin/python bench/references.py --records 2000 --backends sqlite   # smoke run

Builds, with `bulk_create`, one session of N journal records (turns of a question, a tool call,
its result, an answer and the run's status), one run whose compaction snapshot refers to every
record but the statuses one row per record, and a reusable view saved from that snapshot with
the same rows again: references as they were written before ranges. Then it runs the migration
batch by batch, as the command does, and prints the rows before and after, the wall and CPU time,
the longest batch (the longest any transaction of it held its row locks) and, on PostgreSQL, the
reference table's size (heap and indexes) before and after a VACUUM.

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


def one(url: str, records: int, batch_size: int) -> None:
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
    _build(records)
    print(f"{backend}: built {records:,} records in {time.perf_counter() - started:.1f} s")
    print(f"  before: {JournalReference.objects.count():,} reference rows{_table(backend)}")
    wall, cpu = time.perf_counter(), time.process_time()
    longest = batches = 0.0
    while True:
        batch = time.perf_counter()
        if not references_migrate_batch(batch_size):
            break
        longest = max(longest, time.perf_counter() - batch)
        batches += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"  migrate_references: {batches:.0f} batches of {batch_size:,}, wall {wall:.1f} s, "
        f"CPU {cpu:.1f} s, longest batch {longest * 1000:.0f} ms"
    )
    print(f"  after: {JournalReference.objects.count():,} reference rows{_table(backend)}")
    again = time.perf_counter()
    call_command("migrate_references", stdout=io.StringIO())
    print(f"  run again: nothing to do, {time.perf_counter() - again:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        one(arguments.one, arguments.records, arguments.batch_size)
        return
    command = [sys.executable, __file__, "--records", str(arguments.records)]
    command += ["--batch-size", str(arguments.batch_size), "--one"]
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
