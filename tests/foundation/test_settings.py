"""Start-up configuration: malformed values stop start-up naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


KEYS = {"SECRET_KEY": "s" * 50, "FIELD_ENCRYPTION_KEY": "k" * 50}
_SETTINGS = {
    "DATABASE_URL",
    "DEBUG",
    "ALLOW_PRIVATE_MODEL_HOSTS",
    "CELERY_BROKER_URL",
    "BROKER_VISIBILITY_SECONDS",
    "RUN_QUEUE_SECONDS",
    "SECRET_KEY",
    "SECRET_KEY_FALLBACKS",
    "FIELD_ENCRYPTION_KEY",
    "FIELD_ENCRYPTION_KEY_FALLBACKS",
}


def _start_django(tmp_path, code="import django; django.setup()", **env):
    """Run `code` in a fresh interpreter with both keys and `env` (None removes a variable)."""
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS}
    clean.update({"AGENTLOOM_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": str(ROOT)})
    clean.update(KEYS)
    clean.update(env)
    clean = {k: v for k, v in clean.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentloom.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


_SHOW = (
    "import django; django.setup(); from django.conf import settings;"
    "print(settings.DEBUG, settings.ALLOW_PRIVATE_MODEL_HOSTS)"
)


def test_defaults_are_safe_and_create_no_folder(tmp_path):
    result = _start_django(tmp_path, _SHOW)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
    assert not (tmp_path / "var").exists(), "importing the settings creates no folder"


def test_defaults_without_keys_refuse_to_start(tmp_path):
    result = _start_django(tmp_path, SECRET_KEY=None, FIELD_ENCRYPTION_KEY=None)
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr
    assert not (tmp_path / "var").exists()


def test_debug_keeps_generated_keys_in_an_existing_folder(tmp_path):
    (tmp_path / "var").mkdir()
    result = _start_django(tmp_path, DEBUG="true", SECRET_KEY=None, FIELD_ENCRYPTION_KEY=None)
    assert result.returncode == 0, result.stderr
    # Development keys are generated once into the untracked var/ directory.
    assert (tmp_path / "var" / "local-secrets.json").exists()
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["local-secrets.json"]


def test_debug_without_the_folder_names_it_and_makes_nothing(tmp_path):
    result = _start_django(tmp_path, DEBUG="true", SECRET_KEY=None, FIELD_ENCRYPTION_KEY=None)
    assert result.returncode != 0
    assert "AGENTLOOM_VAR_DIR" in result.stderr and "SECRET_KEY" in result.stderr
    assert not (tmp_path / "var").exists()


def test_the_filesystem_broker_makes_its_folders_when_it_sends(tmp_path):
    code = (
        "import django, os; django.setup();"
        f"assert not os.path.exists({str(tmp_path / 'var')!r});"
        "from sessions_app.tasks import execute_run; execute_run.delay(1);"
        f"print(len(os.listdir({str(tmp_path / 'var' / 'broker' / 'in')!r})))"
    )
    result = _start_django(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1"]


def test_dev_run_turns_debug_and_private_model_hosts_on():
    script = (ROOT / "dev").read_text()
    body = script[script.index("cmd_run() {") : script.index("cmd_lint() {")]
    assert 'export DEBUG="${DEBUG:-true}"' in body
    assert 'export ALLOW_PRIVATE_MODEL_HOSTS="${ALLOW_PRIVATE_MODEL_HOSTS:-true}"' in body
    assert 'local var="${AGENTLOOM_VAR_DIR:-$ROOT/var}"' in body
    assert 'mkdir -p "$var"' in body


@pytest.mark.parametrize(
    "value", ["not a url", "mysql://root@127.0.0.1/x", "postgres://127.0.0.1:5432/", "sqlite://"]
)
def test_malformed_database_url_names_the_variable(tmp_path, value):
    result = _start_django(tmp_path, DATABASE_URL=value)
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_production_without_encryption_key_fails(tmp_path):
    result = _start_django(
        tmp_path, DEBUG="false", FIELD_ENCRYPTION_KEY=None, ALLOWED_HOSTS="example.org"
    )
    assert result.returncode != 0
    assert "FIELD_ENCRYPTION_KEY" in result.stderr
    assert not (tmp_path / "var" / "local-secrets.json").exists(), "no key may be generated"


def test_production_without_secret_key_fails(tmp_path):
    result = _start_django(tmp_path, DEBUG="false", SECRET_KEY=None)
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
        ("BROKER_VISIBILITY_SECONDS", "5"),
        ("FIELD_ENCRYPTION_KEY", "short"),
        ("FIELD_ENCRYPTION_KEY_FALLBACKS", "k" * 40 + ",short"),
        ("SECRET_KEY_FALLBACKS", "short"),
    ],
)
def test_malformed_values_name_the_variable(tmp_path, name, value):
    result = _start_django(tmp_path, **{name: value})
    assert result.returncode != 0
    assert name in result.stderr


_VISIBILITY = (
    "from agentloom.celery import app;"
    "print(app.conf.broker_transport_options.get('visibility_timeout'))"
)


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, "300"),  # half of RUN_QUEUE_SECONDS' 600
        ({"RUN_QUEUE_SECONDS": "900"}, "450"),
        ({"BROKER_VISIBILITY_SECONDS": "123"}, "123"),
    ],
)
def test_the_redis_broker_redelivers_after_the_visibility_setting(tmp_path, env, seconds):
    # Nothing is sent: reading the app's configuration needs no Redis.
    result = _start_django(
        tmp_path, _VISIBILITY, CELERY_BROKER_URL="redis://127.0.0.1:6379/13", **env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [seconds]


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
    (tmp_path / "var").mkdir()  # the folder `./dev run` makes
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
