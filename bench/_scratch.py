"""The settings a benchmark's scratch database runs with (imported by the scripts beside it)."""

from __future__ import annotations

import contextlib
import os

# What a benchmark's one user asks, faster than the per-user and per-session limits allow.
_RATE_LIMITS = (
    "RUNS_PER_USER",
    "RUNS_PER_SESSION",
    "SUPPLEMENTS_PER_USER",
    "SUPPLEMENTS_PER_SESSION",
)


def scratch_environment(database_url: str) -> None:
    """Point Django at `database_url` with throwaway keys and no per-user rate limits."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")
    # A scratch database, created and dropped by the benchmark: any keys do.
    os.environ.setdefault("SECRET_KEY", "bench-scratch-secret-key-0123456789abcdef")
    os.environ.setdefault("FIELD_ENCRYPTION_KEY", "bench-scratch-field-key-0123456789abcdef")
    for name in _RATE_LIMITS:
        os.environ.setdefault(f"RATE_LIMIT_{name}", "off")


@contextlib.contextmanager
def scratch_postgres(name: str):
    """Create the database `name` next to DATABASE_URL's (PostgreSQL), point Django at it, and
    drop it afterwards; yield its URL."""
    import psycopg

    admin = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    if not admin.startswith(("postgres://", "postgresql://")):
        raise SystemExit("this benchmark measures PostgreSQL: set DATABASE_URL=postgres://…")
    plain = admin.replace("postgres://", "postgresql://", 1)

    def run(statement: str) -> None:
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(statement)

    run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    run(f'CREATE DATABASE "{name}"')
    url = admin.rsplit("/", 1)[0] + "/" + name
    scratch_environment(url)
    try:
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def autovacuum_on() -> bool:
    """Return whether the PostgreSQL server Django is connected to runs autovacuum."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        return cursor.fetchone()[0] == "on"


def analyze_as_autovacuum_would() -> None:
    """ANALYZE each table whose changes since its last analysis pass autovacuum's threshold
    (`autovacuum_analyze_threshold` + `autovacuum_analyze_scale_factor` × its rows), as a
    server with autovacuum on does by itself: a scratch database on a server with it off would
    otherwise be planned from the statistics of its empty tables. It vacuums nothing."""
    _as_autovacuum_would("ANALYZE", "n_mod_since_analyze", "analyze")


def vacuum_as_autovacuum_would() -> None:
    """VACUUM each table whose dead row versions pass autovacuum's threshold
    (`autovacuum_vacuum_threshold` + `autovacuum_vacuum_scale_factor` × its rows), as a server
    with autovacuum on does by itself: their space is then reused by the rows written after,
    where a server with autovacuum off keeps every dead version. Nothing is given back to the
    file system (that is VACUUM FULL's). Runs outside a transaction, as VACUUM must."""
    _as_autovacuum_would("VACUUM", "n_dead_tup", "vacuum")


def _as_autovacuum_would(command: str, counter: str, setting: str) -> None:
    """Run `command` on each table whose `counter` (a column of `pg_stat_user_tables`) passes
    `autovacuum_<setting>_threshold` + `autovacuum_<setting>_scale_factor` × its rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            f"WHERE s.{counter} > current_setting('autovacuum_{setting}_threshold')::int "
            f"+ current_setting('autovacuum_{setting}_scale_factor')::float8 "
            "* greatest(c.reltuples, 0)"
        )
        for (table,) in cursor.fetchall():
            cursor.execute(f'{command} "{table}"')
