"""The production web server in the box: Granian over ASGI, started by one command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentloom.serve import WORKERS_KILL_SECONDS, granian_command

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_server_speaks_asgi_and_serves_the_static_files():
    command = granian_command(
        host="127.0.0.1", port=8123, workers=3, static_root="/srv/static", static_url="static/"
    )
    assert command[-1] == "agentloom.asgi:application"
    options = dict(zip(command[1:-1:2], command[2:-1:2], strict=False))
    assert options["--interface"] == "asginl"
    assert (options["--workers"], options["--port"]) == ("3", "8123")
    assert (options["--static-path-route"], options["--static-path-mount"]) == (
        "/static",
        "/srv/static",
    )


def test_the_server_is_pinned_and_dev_run_serves_with_it():
    assert any(line.startswith("granian==") for line in (ROOT / "requirements.txt").open())
    script = (ROOT / "dev").read_text()
    body = script[script.index("cmd_run() {") : script.index("cmd_lint() {")]
    assert '"$PY" -m agentloom.serve --host 127.0.0.1 --port "$port" &' in body
    assert "collectstatic --no-input" in body
    assert "runserver" not in body
    assert '"$PY" -m agentloom.work --beat' in body
    assert 'WORKER_PROCESSES="${WORKER_PROCESSES:-1}"' in body


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_served_site_answers_pages_static_files_and_the_api(tmp_path, alice):
    from agentloom.spaces.services.tokens import token_create

    database = os.environ.get("TEST_SQLITE_NAME")
    from django.db import connection

    if connection.vendor == "sqlite" and not database:
        pytest.skip("needs a file database both processes can open (set TEST_SQLITE_NAME)")
    conf = connection.settings_dict
    url = (
        f"postgres://{conf.get('USER') or 'postgres'}@{conf['HOST']}:{conf['PORT'] or 5432}/"
        f"{conf['NAME']}"
        if connection.vendor == "postgresql"
        else f"sqlite:///{conf['NAME']}"
    )
    static = tmp_path / "static"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "STATIC_ROOT": str(static),
        "AGENTLOOM_VAR_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    _, key = token_create(user=alice, name="web")
    port = _free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "agentloom.serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                login = httpx.get(f"{base}/accounts/login/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.3)
        assert login.status_code == 200
        assert "script-src 'self'" in login.headers["content-security-policy"]
        css = httpx.get(f"{base}/static/admin/css/base.css", timeout=5)
        assert css.status_code == 200 and "body" in css.text
        spaces = httpx.get(
            f"{base}/api/v1/spaces/", headers={"Authorization": f"Token {key}"}, timeout=5
        )
        assert spaces.status_code == 200, spaces.text
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _dev_run(tmp_path, log, *args: str, **env: str) -> subprocess.Popen:
    """Start `./dev run` on a scratch database, broker and static folder, in its own group."""
    variables = {
        **{k: v for k, v in os.environ.items() if k not in ("PORT", "DATABASE_URL")},
        "AGENTLOOM_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'dev.sqlite3'}",
        "STATIC_ROOT": str(tmp_path / "static"),
        "CELERY_BROKER_URL": "filesystem://",
        "WORKER_CONCURRENCY": "2",
        **env,
    }
    return subprocess.Popen(
        [str(ROOT / "dev"), "run", *args],
        cwd=ROOT,
        env=variables,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _run_port(*args: str, **env: str) -> subprocess.CompletedProcess:
    """Call the `run_port` function of `./dev` alone with `args`, under `env`."""
    script = (ROOT / "dev").read_text()
    function = script[script.index("run_port() {") : script.index("cmd_run() {")]
    return subprocess.run(
        ["bash", "-c", f'{function}\nrun_port "$@"', "run_port", *args],
        env={**{k: v for k, v in os.environ.items() if k != "PORT"}, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_dev_run_takes_its_port_from_the_option_then_the_environment():
    assert _run_port().stdout.strip() == "8000"
    assert _run_port(PORT="8001").stdout.strip() == "8001"
    assert _run_port("--port", "8002", PORT="8001").stdout.strip() == "8002"
    assert _run_port("--port=8003").stdout.strip() == "8003"
    for args, env in (
        (["--port", "eighty"], {}),
        (["--port"], {}),
        (["--port", "0"], {}),
        ([], {"PORT": "70000"}),
    ):
        refused = _run_port(*args, **env)
        assert refused.returncode == 2, (args, env)
        assert "must be a number from 1 to 65535" in refused.stderr
    assert "unknown option --host" in _run_port("--host", "0.0.0.0").stderr


def test_dev_run_refuses_a_bad_port_before_doing_anything():
    done = subprocess.run(
        [str(ROOT / "dev"), "run", "--port", "eighty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "1 to 65535, got 'eighty'" in done.stderr
    assert done.stdout == "", "nothing was installed, migrated or started"


@pytest.mark.slow
def test_dev_run_serves_on_the_port_asked_for(tmp_path):
    port = _free_port()
    path = tmp_path / "dev.log"
    with path.open("w") as log:
        dev = _dev_run(tmp_path, log, "--port", str(port))
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                login = httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=5)
                break
            except httpx.TransportError:
                assert dev.poll() is None, path.read_text()
                assert time.monotonic() < deadline, path.read_text()
                time.sleep(0.5)
        assert login.status_code == 200
        assert f"Open http://127.0.0.1:{port}/ and log in." in path.read_text()
        # The worker's beat schedule lives in the run's own var folder, beside its secrets.
        while not list((tmp_path / "var").glob("celerybeat-schedule*")):
            assert time.monotonic() < deadline, path.read_text()
            time.sleep(0.5)
    finally:
        os.killpg(dev.pid, signal.SIGTERM)
        dev.wait(timeout=60)


@pytest.mark.slow
def test_a_server_stopped_while_a_worker_starts_still_stops(tmp_path):
    """A worker that gets the stop signal before it is ready never stops by itself: Granian
    kills it after `WORKERS_KILL_SECONDS`, so stopping the server (Ctrl-C on `./dev run`, a
    deployment's SIGTERM) always ends."""
    env = {
        **os.environ,
        "STATIC_ROOT": str(tmp_path / "static"),
        "AGENTLOOM_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "agentloom.serve", "--port", str(_free_port()), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in server.stdout:
            seen.append(line)
            if "Spawning worker-2" in line:
                break
        assert any("Spawning worker-2" in line for line in seen), "".join(seen)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=WORKERS_KILL_SECONDS + 20)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        server.stdout.close()
