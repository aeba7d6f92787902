"""Start-up configuration: malformed values stop start-up naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start_django(tmp_path, **env):
    """Run django.setup() in a fresh interpreter with `env`; return the completed process."""
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DEBUG"}}
    clean.update({"AGENTLOOM_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": str(ROOT)})
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentloom.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_defaults_start(tmp_path):
    result = _start_django(tmp_path)
    assert result.returncode == 0, result.stderr
    # Development keys are generated once into the untracked var/ directory.
    assert (tmp_path / "var" / "local-secrets.json").exists()


@pytest.mark.parametrize(
    "value", ["not a url", "mysql://root@127.0.0.1/x", "postgres://127.0.0.1:5432/", "sqlite://"]
)
def test_malformed_database_url_names_the_variable(tmp_path, value):
    result = _start_django(tmp_path, DATABASE_URL=value)
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_production_without_encryption_key_fails(tmp_path):
    result = _start_django(
        tmp_path, DEBUG="false", SECRET_KEY="s" * 50, ALLOWED_HOSTS="example.org"
    )
    assert result.returncode != 0
    assert "FIELD_ENCRYPTION_KEY" in result.stderr
    assert not (tmp_path / "var" / "local-secrets.json").exists(), "no key may be generated"


def test_production_without_secret_key_fails(tmp_path):
    result = _start_django(tmp_path, DEBUG="false", FIELD_ENCRYPTION_KEY="k" * 50)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_with_both_keys_starts(tmp_path):
    result = _start_django(
        tmp_path, DEBUG="false", SECRET_KEY="s" * 50, FIELD_ENCRYPTION_KEY="k" * 50
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEBUG", "maybe"),
        ("ALLOW_PRIVATE_MODEL_HOSTS", "perhaps"),
        ("RUN_LEASE_SECONDS", "ten"),
        ("LEGACY_CONTEXT_CHARS", "-5"),
        ("CELERY_BROKER_URL", "kafka://127.0.0.1"),
        ("FIELD_ENCRYPTION_KEY", "short"),
    ],
)
def test_malformed_values_name_the_variable(tmp_path, name, value):
    result = _start_django(tmp_path, **{name: value})
    assert result.returncode != 0
    assert name in result.stderr


def test_importing_the_engine_loads_neither_django_nor_celery():
    code = (
        "import sys, agentloom.engine, agentloom.providers;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', "
        "'rest_framework'});"
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_sqlite_is_shared_safely_by_web_and_worker(tmp_path):
    """WAL, BEGIN IMMEDIATE and a 20 s busy timeout, so two processes can write in turn."""
    code = (
        "import django; django.setup();"
        "from django.db import connection;"
        "cursor = connection.cursor();"
        "print(cursor.execute('PRAGMA journal_mode').fetchone()[0],"
        " connection.settings_dict['OPTIONS']['transaction_mode'],"
        " connection.settings_dict['OPTIONS']['timeout'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        {
            "AGENTLOOM_VAR_DIR": str(tmp_path / "var"),
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "agentloom.settings",
        }
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["wal", "IMMEDIATE", "20"]
