"""Benchmark a long session the way a LangGraph peer would drive it: one question per run.

    .venv/bin/python bench/peer.py
    .venv/bin/python bench/peer.py --turns 1,10 --backends sqlite --windows 128000   # smoke run

One session receives N questions; each is a new run, asked with `run_ask` and driven inline with
`run_execute` (nothing goes to a broker). A scripted model answers each 150-character question
with one call to the built-in `echo` tool carrying a 2,000-character text, then with a
300-character final answer; a compaction request gets a deterministic ~1,500-character summary.

Every (backend, window) combination runs in a fresh process (Django settings are per process) on
a freshly migrated scratch database: PostgreSQL `<name>_peer` next to the database `<name>` named
by DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), created and dropped by the
script, and SQLite in a temporary directory. The model budget is the window given with
max_output_tokens=4,096 and safety_margin_tokens=1,024 under the default context policy; with
100,000,000 nothing compacts, with 128,000 compaction and reusable views happen.

At every checkpoint turn count it prints, per combination:
- the wall and CPU time of one turn (run_ask + run_execute), median of the last 10 turns;
- the new-run history load time (`history_for_new_run`, wall and CPU, mean of 5 calls);
- reusable views (SessionView rows) and compaction calls so far;
- the journaled conversation (JSON bytes of the decrypted journal messages), the growth since
  just after migration of every table of sessions_app, context_app and models_app, indexes
  included (PostgreSQL: `pg_total_relation_size`; SQLite: the pages `dbstat` counts, else the
  file plus its -wal) and the ratio growth / conversation;
then, at the last checkpoint, the growth of each table, by part (PostgreSQL heap, TOAST and
indexes, with the live and dead row versions; SQLite table, indexes and the unused bytes inside
their pages), and each encrypted column's values as JSON, ciphertext, binary Fernet tokens, as
stored and as base64 tokens would store them;
on PostgreSQL the same again after VACUUM FULL (the live rows alone: the dead versions of
rewritten rows are freed for reuse by autovacuum, never given back, and a server with autovacuum
off keeps them); and a summary of the last checkpoint of
every combination, with the median turn time of turns 1-10 and the ratio of the last 10 turns to
it (wall and CPU). `--turns 1,10,1000,10000` runs the long session.

On a PostgreSQL server with autovacuum off (as a test server may be), the planner would work
from the statistics of an empty database for the whole run: after each turn, outside its timing,
the bench analyzes each table that autovacuum's own rule would (`n_mod_since_analyze` above
`autovacuum_analyze_threshold` + `autovacuum_analyze_scale_factor` × its rows), as a production
server does on its own; and it vacuums each table whose dead row versions pass autovacuum's
rule (`n_dead_tup` above `autovacuum_vacuum_threshold` + `autovacuum_vacuum_scale_factor` × its
rows), so that the growth counts what a production server keeps: dead versions are reused by
later rows there, never given back. `--keep-dead` leaves them all, as a server with autovacuum
off does (the figure earlier versions of this bench printed).

Query logging is switched off after start-up (as with DEBUG=false in production), so that a
DEBUG=true in the environment does not add its own cost to every query.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scratch import (
    analyze_as_autovacuum_would,
    autovacuum_on,
    scratch_environment,
    vacuum_as_autovacuum_would,
)

from agentloom.engine import ModelGateway

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"

QUESTION_CHARS = 150
ECHO_CHARS = 2_000
ANSWER_CHARS = 300
SUMMARY_CHARS = 1_500
MAX_OUTPUT_TOKENS = 4_096
SAFETY_MARGIN_TOKENS = 1_024
HISTORY_CALLS = 5
MB = 1_000_000


# --- databases -------------------------------------------------------------------------------


def _admin_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else DEFAULT_POSTGRES_URL


def _bench_name(admin_url: str) -> str:
    """Return the scratch database's name: the admin database's name with `_peer` appended."""
    return admin_url.rsplit("/", 1)[1].split("?")[0] + "_peer"


def _bench_url(admin_url: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + _bench_name(admin_url)


def _admin_execute(admin_url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://", 1), autocommit=True
    ) as c:
        for statement in statements:
            c.execute(statement)


def _recreate_database(admin_url: str) -> None:
    _admin_execute(
        admin_url,
        f'DROP DATABASE IF EXISTS "{_bench_name(admin_url)}" WITH (FORCE)',
        f'CREATE DATABASE "{_bench_name(admin_url)}"',
    )


def _drop_database(admin_url: str) -> None:
    _admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{_bench_name(admin_url)}" WITH (FORCE)')


def _setup_django(url: str) -> None:
    scratch_environment(url)
    import django

    django.setup()
    from django.conf import settings

    # Django logs every query (with its parameters, megabytes of ciphertext here) under DEBUG.
    settings.DEBUG = False


APPS = ("sessions_app", "context_app", "models_app")


def _of_apps(column: str) -> str:
    """Return the SQL condition that `column` names a table of the three apps."""
    return " OR ".join(f"{column} LIKE '{app}\\_%' ESCAPE '\\'" for app in APPS)


def _table_bytes(backend: str, sqlite_path: str | None) -> dict[str, int]:
    """Return the bytes of every table of the three apps, indexes (and TOAST) included.

    PostgreSQL: `pg_total_relation_size` of each table. SQLite: the pages `dbstat` counts for
    the table and its indexes; without `dbstat`, the file (and its -wal) as one entry.
    """
    from django.db import DatabaseError, connection

    with connection.cursor() as cursor:
        if backend == "postgres":
            cursor.execute(
                "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
                f"WHERE relkind = 'r' AND ({_of_apps('relname')})"
            )
            return dict(cursor.fetchall())
        try:
            cursor.execute(
                "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat AS d "
                "JOIN sqlite_master AS m ON m.name = d.name "
                f"WHERE {_of_apps('m.tbl_name')} GROUP BY m.tbl_name"
            )
            return dict(cursor.fetchall())
        except DatabaseError:  # SQLite built without dbstat
            assert sqlite_path is not None
            return {
                "(database file)": sum(
                    os.path.getsize(path)
                    for path in (sqlite_path, sqlite_path + "-wal")
                    if os.path.exists(path)
                )
            }


def _table_parts(backend: str) -> dict[str, dict[str, int]]:
    """Return, per table of the three apps, its bytes by part: PostgreSQL `heap` (with its free
    space and visibility maps), `toast` (with the TOAST index) and `indexes`, and its live and
    dead row versions as the statistics collector last counted them; SQLite `table` and
    `indexes` (the pages `dbstat` counts) and `unused` (free bytes inside those pages)."""
    from django.db import DatabaseError, connection

    parts: dict[str, dict[str, int]] = {}
    with connection.cursor() as cursor:
        if backend == "postgres":
            cursor.execute(
                "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid), "
                "CASE WHEN c.reltoastrelid = 0 THEN 0 "
                "ELSE pg_total_relation_size(c.reltoastrelid) END, "
                "COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0) "
                "FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid "
                f"WHERE c.relkind = 'r' AND ({_of_apps('c.relname')})"
            )
            for name, table, indexes, toast, live, dead in cursor.fetchall():
                parts[name] = {
                    "heap": table - toast,
                    "toast": toast,
                    "indexes": indexes,
                    "live": live,
                    "dead": dead,
                }
            return parts
        try:
            cursor.execute(
                "SELECT m.tbl_name, m.type, SUM(d.pgsize), SUM(d.unused) FROM dbstat AS d "
                "JOIN sqlite_master AS m ON m.name = d.name "
                f"WHERE {_of_apps('m.tbl_name')} GROUP BY m.tbl_name, m.type"
            )
        except DatabaseError:  # SQLite built without dbstat: no parts to tell
            return parts
        for name, kind, size, unused in cursor.fetchall():
            entry = parts.setdefault(name, {"table": 0, "indexes": 0, "unused": 0})
            entry["table" if kind == "table" else "indexes"] += size
            entry["unused"] += unused
    return parts


def _encrypted_columns() -> list[dict]:
    """Return, per encrypted column of the three apps that holds values, its value count, how
    many are empty and their bytes: `json` the values' compact JSON text, `ciphertext` the
    AES-CBC ciphertext (the text, zlib-compressed first where the column compresses, padded to
    16 bytes), `binary` the Fernet tokens in binary (the ciphertext and 57 bytes of version,
    time, IV and HMAC; an empty value has none), `stored` what the column holds (a binary token
    after its one-byte mark, an empty value's three bytes) and `base64` what it would hold with
    every value a token in base64 text, as before the binary form (an empty value's token is
    100 bytes)."""
    import base64

    from django.db import connection

    from agentloom import encryption
    from agentloom.fields import encrypted_fields

    empty_token = len(base64.urlsafe_b64encode(bytes(57 + 16)))
    found = []
    for model, field in encrypted_fields():
        if model._meta.app_label not in APPS:
            continue
        sizes = dict.fromkeys(
            ("values", "empty", "json", "ciphertext", "binary", "stored", "base64"), 0
        )
        column = connection.ops.quote_name(field.column)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {column} FROM {connection.ops.quote_name(model._meta.db_table)} "
                f"WHERE {column} IS NOT NULL"
            )
            while batch := cursor.fetchmany(1_000):
                for (token,) in batch:
                    token = bytes(token)
                    value, length = encryption.decrypt_sized(token)
                    sizes["values"] += 1
                    sizes["stored"] += len(token)
                    if length is None:  # a legacy value: its compact JSON measured anew
                        length = len(
                            json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
                        )
                    sizes["json"] += length
                    if token[:1] == encryption.EMPTY_MARK:
                        sizes["empty"] += 1
                        sizes["base64"] += empty_token
                        continue
                    if token[:1] == encryption.BINARY_MARK:
                        binary = len(token) - len(encryption.BINARY_MARK)
                    elif encryption.is_legacy(token):
                        binary = len(token)
                    else:
                        binary = len(base64.urlsafe_b64decode(token))
                    sizes["ciphertext"] += binary - 57
                    sizes["binary"] += binary
                    sizes["base64"] += len(base64.urlsafe_b64encode(bytes(binary)))
        if sizes["values"]:
            found.append({"column": f"{model._meta.db_table}.{field.column}", **sizes})
    return found


def _print_breakdown(backend: str, baseline: dict[str, dict[str, int]]) -> None:
    """Print the growth of each table by part."""
    parts = _table_parts(backend)
    sizes = ("heap", "toast", "indexes") if backend == "postgres" else ("table", "indexes")
    extra = ("live", "dead") if backend == "postgres" else ("unused",)
    print(
        "growth by table and part, MB"
        + (" (live / dead row versions as last counted)" if backend == "postgres" else ""),
        flush=True,
    )
    counts = f" {'live':>8} {'dead':>8}" if backend == "postgres" else f" {'unused':>9}"
    print(f"  {'table':<36} " + " ".join(f"{part:>9}" for part in sizes) + counts, flush=True)
    rows = []
    for name, now in parts.items():
        before = baseline.get(name, {})
        grown = {part: now[part] - before.get(part, 0) for part in (*sizes, *extra)}
        if any(grown[part] for part in sizes):
            rows.append((name, grown))
    for name, grown in sorted(rows, key=lambda row: -sum(row[1][part] for part in sizes)):
        line = f"  {name:<36} " + " ".join(f"{grown[part] / MB:>9.3f}" for part in sizes)
        if backend == "postgres":
            line += f" {parts[name]['live']:>8,} {parts[name]['dead']:>8,}"
        else:
            line += f" {grown['unused'] / MB:>9.3f}"
        print(line, flush=True)


def _print_encrypted_columns() -> None:
    """Print what each encrypted column holds, from its values' JSON to its stored bytes."""
    parts = ("json", "ciphertext", "binary", "stored", "base64")
    print(
        "encrypted columns, MB: the values' JSON, the ciphertext (compressed where the column "
        "compresses), binary Fernet tokens (+57 B each), as stored (binary after a mark; an empty "
        "value 3 B), as base64 tokens would store them",
        flush=True,
    )
    print(
        f"  {'column':<44} {'values':>8} {'empty':>8} " + " ".join(f"{p:>10}" for p in parts),
        flush=True,
    )
    columns = _encrypted_columns()
    for column in sorted(columns, key=lambda column: -column["stored"]):
        print(
            f"  {column['column']:<44} {column['values']:>8,} {column['empty']:>8,} "
            + " ".join(f"{column[part] / MB:>10.3f}" for part in parts),
            flush=True,
        )
    total = {part: sum(column[part] for column in columns) for part in parts}
    print(
        f"  {'all':<44} {sum(c['values'] for c in columns):>8,} "
        f"{sum(c['empty'] for c in columns):>8,} "
        + " ".join(f"{total[part] / MB:>10.3f}" for part in parts),
        flush=True,
    )


def _vacuumed_growth(
    baseline: dict[str, int], baseline_parts: dict[str, dict[str, int]], last: dict
) -> int:
    """PostgreSQL: rewrite every table with VACUUM FULL and print the growth and its parts again:
    what the live rows hold. The figures before it also count the dead row versions left by
    rewritten rows (the run's saves, the projection point moved forward, deleted deltas), which
    a plain VACUUM (autovacuum) only frees for reuse, never gives back, and which a server with
    autovacuum off keeps; return the growth."""
    from django.db import connection

    autovacuum = "on" if autovacuum_on() else "off"
    with connection.cursor() as cursor:
        cursor.execute("VACUUM FULL")
    growth = sum(_table_bytes("postgres", None).values()) - sum(baseline.values())
    print(
        f"after VACUUM FULL (the server's autovacuum is {autovacuum}): growth "
        f"{growth / MB:.2f} MB, {growth / last['conversation']:.2f}x the conversation",
        flush=True,
    )
    _print_breakdown("postgres", baseline_parts)
    return growth


# --- the scripted peer model -----------------------------------------------------------------


# Filler words drawn from a fixed vocabulary with English letter and word frequencies: zlib
# shrinks 2,000 characters of it to about half, as it does English prose, so storage that
# compresses is measured on text as compressible as real conversations, not on repetition.
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_LETTER_WEIGHTS = [12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8]
_LETTER_WEIGHTS += [2.4, 2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1]
_VOCABULARY_RNG = random.Random(7)
_VOCABULARY = [
    "".join(_VOCABULARY_RNG.choices(_LETTERS, _LETTER_WEIGHTS, k=_VOCABULARY_RNG.randint(2, 9)))
    for _ in range(8_000)
]
_WORD_CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) ** 0.9 for rank in range(8_000)))


def _exact(text: str, size: int, seed: int = 0) -> str:
    """Return `text` followed by filler words (or cut) to exactly `size` characters."""
    rng = random.Random(f"{seed}:{text[:16]}")
    words = [text]
    length = len(text)
    while length < size:
        # Words average six characters: draw enough for the rest in one call.
        for word in rng.choices(_VOCABULARY, cum_weights=_WORD_CUMULATIVE, k=size // 4 + 1):
            words.append(word)
            length += len(word) + 1
            if length >= size:
                break
    return " ".join(words)[:size]


def _question(turn: int) -> str:
    return _exact(
        f"Q{turn:05d}: call the echo tool with a {ECHO_CHARS:,}-character text, then answer in "
        f"{ANSWER_CHARS} characters.",
        QUESTION_CHARS,
    )


class PeerGateway(ModelGateway):
    """A scripted peer model: one echo call per question, then the answer; fixed summaries."""

    provider, model_id = "bench", "peer"

    def complete(self, request):
        from agentloom.engine import message_text
        from agentloom.engine.testing import text_response, tool_call_response

        last = request.messages[-1] if request.messages else {}
        if request.purpose == "compaction":
            header = "[bench summary] The earlier turns asked for echoes and got them.\n"
            return text_response(_exact(header + message_text(last), SUMMARY_CHARS))
        if request.purpose == "verification":
            return text_response("PASS")
        if last.get("role") == "tool":
            answer = f"Answer: the echo tool returned {message_text(last)[:40]!r}."
            return text_response(_exact(answer, ANSWER_CHARS))
        tag = message_text(last)[:6]  # "Q00042" when the last message is the question
        return tool_call_response(("echo", {"text": _exact(f"{tag} echo payload.", ECHO_CHARS)}))


# --- one combination, in its own process -----------------------------------------------------


def _peer_session(
    window: int, provider: str = "local", model_id: str = "local-demo", estimator: str = "bytes"
):
    from django.contrib.auth import get_user_model

    from context_app.services.agents import agent_create, agent_publish
    from models_app.models import ModelConnection
    from sessions_app.services.runs import session_create
    from tests.factories import make_space

    user, _ = get_user_model().objects.get_or_create(username="bench-peer")
    space = make_space(name="bench peer", admin=user)
    connection = ModelConnection.objects.create(
        space=space,
        name="peer",
        provider=provider,
        model_id=model_id,
        # Never called: the benchmark's gateway answers (a provider other than `local` is named
        # for the estimator its models are measured with).
        base_url="" if provider == "local" else "https://api.openai.com/v1",
        context_window=window,
        estimator=estimator,
        max_output_tokens=MAX_OUTPUT_TOKENS,
        safety_margin_tokens=SAFETY_MARGIN_TOKENS,
    )
    agent = agent_create(
        user=user,
        space=space,
        name="peer",
        system_prompt="You are a peer benchmark agent.",
        model_connection=connection.pk,
        tools=["echo"],
    )
    return user, session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


class _ConversationMeter:
    """Sums the JSON bytes of the decrypted journal messages, reading only new rows each time."""

    def __init__(self, session):
        self.session = session
        self.last_seq = 0
        self.bytes = 0
        self.records = 0

    def update(self) -> None:
        from sessions_app.models import SessionMessage

        rows = (
            SessionMessage.objects.filter(session=self.session, seq__gt=self.last_seq)
            .order_by("seq")
            .values_list("seq", "message")
        )
        for seq, message in rows.iterator(chunk_size=500):
            self.bytes += len(json.dumps(message, ensure_ascii=False).encode())
            self.records += 1
            self.last_seq = seq


def _history_ms(session, version) -> tuple[float, float]:
    """Return the wall and CPU milliseconds of one new-run history load (mean of 5 calls)."""
    from context_app.engine_adapter import version_binding
    from sessions_app.selectors.history import history_for_new_run

    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(HISTORY_CALLS):
        history_for_new_run(session, version_binding(version))
    return (
        (time.perf_counter() - started) / HISTORY_CALLS * 1000,
        (time.process_time() - cpu) / HISTORY_CALLS * 1000,
    )


def _median_ms(durations: list[float], first: int, last: int) -> float:
    """Return the median of turns first..last (1-based, inclusive), in milliseconds."""
    return statistics.median(durations[first - 1 : last]) * 1000


def _label(backend: str, window: int) -> str:
    name = {"postgres": "PostgreSQL", "sqlite": "SQLite"}[backend]
    return f"{name}, context_window={window:,}"


HEADER = (
    f"{'turns':>6} | {'turn ms':>8} | {'turn cpu':>8} | {'history ms':>10} | {'hist cpu':>8} | "
    f"{'views':>5} | {'compactions':>11} | "
    f"{'records':>7} | {'conv MB':>8} | {'growth MB':>9} | {'growth/conv':>11}"
)


def _format_row(row: dict) -> str:
    return (
        f"{row['turns']:>6,} | {row['turn_ms']:>8.1f} | {row['turn_cpu_ms']:>8.1f} | "
        f"{row['history_ms']:>10.1f} | {row['history_cpu_ms']:>8.1f} | "
        f"{row['views']:>5,} | {row['compactions']:>11,} | {row['records']:>7,} | "
        f"{row['conversation'] / MB:>8.2f} | {row['growth'] / MB:>9.2f} | "
        f"{row['growth'] / row['conversation']:>10.2f}x"
    )


def run_combination(
    backend: str,
    url: str,
    sqlite_path: str | None,
    window: int,
    turns: list[int],
    keep_dead: bool,
    results,
) -> None:
    """Drive one session up to max(turns) runs and put the checkpoint rows on `results`."""
    _setup_django(url)
    from django.core.management import call_command
    from django.db import connections

    from context_app import engine_adapter
    from sessions_app.models import ModelCall, Run, SessionView
    from sessions_app.services import runs
    from sessions_app.services.execution import run_execute

    call_command("migrate", verbosity=0)
    baseline = _table_bytes(backend, sqlite_path)
    baseline_parts = _table_parts(backend)
    # Runs are driven inline below; the Celery task that run_ask queues on commit is not.
    runs._enqueue = lambda run: None
    engine_adapter.set_gateway_factory(lambda version, connection: PeerGateway())

    user, session = _peer_session(window)
    version = session.agent_version
    meter = _ConversationMeter(session)
    durations: list[float] = []
    cpu: list[float] = []
    rows: list[dict] = []
    print(f"\n{_label(backend, window)}", flush=True)
    analyze = backend == "postgres" and not autovacuum_on()
    vacuum = analyze and not keep_dead
    if analyze:
        done = "analyzed and vacuumed by its rules" if vacuum else "analyzed by its rule"
        print(f"(autovacuum is off: tables are {done} after each turn)", flush=True)
    print(HEADER, flush=True)
    started_all = time.perf_counter()
    for turn in range(1, max(turns) + 1):
        started, started_cpu = time.perf_counter(), time.process_time()
        run = runs.run_ask(user=user, session=session, question=_question(turn))
        outcome = run_execute(run_id=run.pk)
        durations.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        run.refresh_from_db(fields=["status", "error"])
        if outcome != Run.Status.SUCCEEDED or run.status != Run.Status.SUCCEEDED:
            sys.exit(
                f"bench/peer.py: {_label(backend, window)}: turn {turn} (run {run.pk}) ended "
                f"{outcome!r} with status {run.status!r}, error {run.error!r}; aborting"
            )
        meter.update()
        if analyze:
            analyze_as_autovacuum_would()
        if vacuum:
            vacuum_as_autovacuum_would()
        if turn not in turns:
            continue
        history_ms, history_cpu_ms = _history_ms(session, version)
        row = {
            "backend": backend,
            "window": window,
            "turns": turn,
            "turn_ms": _median_ms(durations, max(1, turn - 9), turn),
            "first_ms": _median_ms(durations, 1, min(10, turn)),
            "turn_cpu_ms": _median_ms(cpu, max(1, turn - 9), turn),
            "first_cpu_ms": _median_ms(cpu, 1, min(10, turn)),
            "history_ms": history_ms,
            "history_cpu_ms": history_cpu_ms,
            "views": SessionView.objects.filter(session=session).count(),
            "compactions": ModelCall.objects.filter(
                run__session=session, purpose=ModelCall.Purpose.COMPACTION
            ).count(),
            "records": meter.records,
            "conversation": meter.bytes,
            "growth": sum(_table_bytes(backend, sqlite_path).values()) - sum(baseline.values()),
            "elapsed_s": time.perf_counter() - started_all,
        }
        rows.append(row)
        print(_format_row(row), flush=True)
    last = rows[-1]
    print(
        f"turn ms, median of turns 1-{min(10, last['turns'])}: {last['first_ms']:.1f}; "
        f"last 10 / first 10: {last['turn_ms'] / last['first_ms']:.2f}x "
        f"(CPU {last['turn_cpu_ms']:.1f} / {last['first_cpu_ms']:.1f} ms: "
        f"{last['turn_cpu_ms'] / last['first_cpu_ms']:.2f}x); "
        f"{last['turns']:,} turns in {last['elapsed_s']:.0f} s",
        flush=True,
    )
    tables = _table_bytes(backend, sqlite_path)
    print(f"growth by table at {last['turns']:,} turns (indexes included):", flush=True)
    for table, size in sorted(tables.items(), key=lambda item: -item[1]):
        grown = size - baseline.get(table, 0)
        if grown:
            print(f"  {table:<36} {grown / MB:>8.3f} MB", flush=True)
    _print_breakdown(backend, baseline_parts)
    _print_encrypted_columns()
    if backend == "postgres":
        last["vacuumed"] = _vacuumed_growth(baseline, baseline_parts, last)
    connections.close_all()
    results.put(rows)


# --- driver ----------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(item.replace("_", "")) for item in text.split(",") if item.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _backend_list(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    unknown = sorted(set(names) - {"postgres", "sqlite"})
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"backends are postgres and sqlite, got {text!r}")
    return list(dict.fromkeys(names))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=_int_list, default=_int_list("1,50,200,500,1000"))
    parser.add_argument("--backends", type=_backend_list, default=["postgres", "sqlite"])
    parser.add_argument("--windows", type=_int_list, default=[100_000_000, 128_000])
    parser.add_argument(
        "--keep-dead",
        action="store_true",
        help="PostgreSQL with autovacuum off: analyze only, keep every dead row version",
    )
    arguments = parser.parse_args()
    arguments.windows = sorted(arguments.windows, reverse=True)
    return arguments


def _run_in_process(context, *args) -> list[dict]:
    results = context.Queue()
    process = context.Process(target=run_combination, args=(*args, results))
    process.start()
    process.join()
    if process.exitcode != 0:
        sys.exit(f"bench/peer.py: a combination failed (exit code {process.exitcode})")
    return results.get(timeout=30)


def main() -> None:
    arguments = _arguments()
    context = multiprocessing.get_context("spawn")
    admin_url = _admin_url()
    started = time.perf_counter()
    print(
        f"Peer workload: one session, one run per question ({QUESTION_CHARS}-char question, one "
        f"echo call of {ECHO_CHARS:,} chars, {ANSWER_CHARS}-char answer); "
        f"turns {', '.join(f'{t:,}' for t in arguments.turns)}"
    )
    summary: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="agentloom-peer-") as scratch:
        for backend in arguments.backends:
            for window in arguments.windows:
                if backend == "postgres":
                    _recreate_database(admin_url)
                    try:
                        rows = _run_in_process(
                            context,
                            backend,
                            _bench_url(admin_url),
                            None,
                            window,
                            arguments.turns,
                            arguments.keep_dead,
                        )
                    finally:
                        _drop_database(admin_url)
                else:
                    path = os.path.join(scratch, f"peer-{window}.sqlite3")
                    rows = _run_in_process(
                        context,
                        backend,
                        f"sqlite:///{path}",
                        path,
                        window,
                        arguments.turns,
                        arguments.keep_dead,
                    )
                    for leftover in (path, path + "-wal", path + "-shm"):
                        if os.path.exists(leftover):
                            os.remove(leftover)
                summary.append(rows[-1])

    print(f"\nSummary at {arguments.turns[-1]:,} turns")
    print(
        f"{'combination':<38} | {'turn ms 1-10':>12} | {'last 10':>8} | {'ratio':>6} | "
        f"{'cpu ratio':>9} | {'history ms':>10} | {'hist cpu':>8} | {'views':>5} | "
        f"{'conv MB':>8} | {'growth MB':>9} | "
        f"{'growth/conv':>11} | {'live rows':>9} | {'time s':>6}"
    )
    for row in summary:
        vacuumed = f"{row['vacuumed'] / row['conversation']:.2f}x" if "vacuumed" in row else "-"
        print(
            f"{_label(row['backend'], row['window']):<38} | {row['first_ms']:>12.1f} | "
            f"{row['turn_ms']:>8.1f} | {row['turn_ms'] / row['first_ms']:>5.2f}x | "
            f"{row['turn_cpu_ms'] / row['first_cpu_ms']:>8.2f}x | "
            f"{row['history_ms']:>10.1f} | {row['history_cpu_ms']:>8.1f} | {row['views']:>5,} | "
            f"{row['conversation'] / MB:>8.2f} | {row['growth'] / MB:>9.2f} | "
            f"{row['growth'] / row['conversation']:>10.2f}x | {vacuumed:>9} | "
            f"{row['elapsed_s']:>6.0f}"
        )
    print(f"\nTotal: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
