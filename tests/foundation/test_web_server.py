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

from agentloom.serve import granian_command

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
    assert '"$PY" -m agentloom.serve --host 127.0.0.1 --port 8000 &' in body
    assert "collectstatic --no-input" in body
    assert "runserver" not in body
    assert "--pool=threads" in body


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_served_site_answers_pages_static_files_and_the_api(tmp_path, alice):
    from agentloom.spaces.tokens import token_create

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
