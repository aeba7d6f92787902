"""Worker processes per machine: one setting, one per core on PostgreSQL, one on SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from agentloom.config import machine_cores
from agentloom.work import run, worker_command
from tests.foundation.test_settings import _start_django

POSTGRES = "postgres://postgres@127.0.0.1:5432/anything"  # importing the settings connects to none
_SHOW = (
    "import django; django.setup(); from django.conf import settings;"
    "print(settings.WORKER_PROCESSES, settings.WORKER_CONCURRENCY)"
)


def test_postgresql_runs_a_worker_process_per_core_and_sqlite_one(tmp_path):
    on_postgres = _start_django(tmp_path, _SHOW, DATABASE_URL=POSTGRES)
    assert on_postgres.returncode == 0, on_postgres.stderr
    assert on_postgres.stdout.split() == [str(machine_cores()), "200"]
    asked = _start_django(tmp_path, _SHOW, DATABASE_URL=POSTGRES, WORKER_PROCESSES="3")
    assert asked.stdout.split()[0] == "3"
    on_sqlite = _start_django(tmp_path, _SHOW, DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
    assert on_sqlite.stdout.split()[0] == "1"


_READY = (
    "import gc, django; django.setup(); from celery.signals import worker_ready;"
    "import agentloom.celery; before = gc.get_freeze_count(); worker_ready.send(sender=None);"
    "print(before, gc.get_freeze_count(), gc.isenabled())"
)


def test_a_ready_worker_keeps_what_it_loaded_out_of_full_collections(tmp_path):
    """What a worker loaded (Django, the apps, the engine) is frozen once it is ready, so no
    collection visits it again (agentloom.startup); what runs create later is still collected."""
    ready = _start_django(tmp_path, _READY, DATABASE_URL=None, CELERY_BROKER_URL=None)
    assert ready.returncode == 0, ready.stderr
    before, after, collecting = ready.stdout.split()
    assert int(before) == 0
    assert int(after) > 50_000
    assert collecting == "True"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"WORKER_PROCESSES": "two", "DATABASE_URL": POSTGRES}, "WORKER_PROCESSES must be an"),
        ({"WORKER_PROCESSES": "0", "DATABASE_URL": POSTGRES}, "WORKER_PROCESSES must be at least"),
        ({"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY must be at least 1"),
        ({"WORKER_PROCESSES": "2"}, "WORKER_PROCESSES must be 1 on SQLite"),
    ],
)
def test_a_bad_worker_setting_stops_start_up_naming_it(tmp_path, env, said):
    result = _start_django(tmp_path, **env)
    assert result.returncode != 0
    assert said in result.stderr


def test_each_worker_process_is_named_apart_and_only_the_first_runs_the_beat():
    commands = [
        worker_command(index, concurrency=250, beat=True, schedule="/var/schedule")
        for index in (1, 2)
    ]
    assert [c[c.index("worker") + 1 :] for c in commands][1] == [
        "--pool=threads",
        "--concurrency=250",
        "--hostname=worker2@%h",
        f"--loglevel={os.environ.get('LOG_LEVEL', 'INFO')}",
    ]
    assert {"--beat", "--schedule=/var/schedule"} <= set(commands[0])
    assert "--hostname=worker1@%h" in commands[0]


def test_the_launcher_refuses_several_processes_on_sqlite(tmp_path):
    result = _start_django(
        tmp_path,
        "from agentloom.work import main; main(['--processes', '2'])",
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
    )
    assert result.returncode == 2
    assert "one worker process" in result.stderr


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_when_one_worker_process_ends_the_others_stop_and_its_status_is_the_sets():
    began = time.monotonic()
    assert run([SLEEPER, [sys.executable, "-c", "raise SystemExit(3)"]]) == 3
    assert time.monotonic() - began < 20, "the sleeper was stopped, not waited for"


def test_a_stop_signal_reaches_every_worker_process_once(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    # Each child writes a mark when SIGTERM reaches it, then exits; a SIGINT stops it without a
    # mark, as at a terminal (set here: a launcher started in the background inherits SIGINT
    # ignored, and then a shared group would go unnoticed).
    child = (
        "import signal, sys, time, os\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"def stop(*_):\n    open(os.path.join({str(marks)!r}, str(os.getpid())), 'a').write('T')"
        "\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "time.sleep(60)\n"
    )
    code = (
        "import sys; from agentloom.work import run; "
        f"sys.exit(run([[sys.executable, '-c', {child!r}]] * 2))"
    )
    launcher = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(1.5)
        os.killpg(launcher.pid, signal.SIGINT)  # a Ctrl-C at the terminal: the whole group
        assert launcher.wait(timeout=20) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
    written = sorted(path.read_text() for path in marks.iterdir())
    assert written == ["T", "T"], "one SIGTERM each, in their own groups"
