"""Migrations apply from an empty database and match the models."""

import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


def _migrate(tmp_path, database_url):
    env = {**os.environ, "DATABASE_URL": database_url, "AGENTLOOM_VAR_DIR": str(tmp_path / "v")}
    return subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_migrations_apply_on_empty_sqlite(tmp_path):
    result = _migrate(tmp_path, f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "context_app.0002_agentversion_immutable_trigger... OK" in result.stdout


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_migrations_apply_on_empty_postgres(tmp_path):
    from django.db import connection

    name = f"agentloom_migrate_{uuid.uuid4().hex[:10]}"
    settings = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        user = settings.get("USER") or "postgres"
        url = f"postgres://{user}@{settings['HOST']}:{settings['PORT'] or 5432}/{name}"
        result = _migrate(tmp_path, url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "context_app.0002_agentversion_immutable_trigger... OK" in result.stdout
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
