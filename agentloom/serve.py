"""The production web server: Granian serving `agentloom.asgi` and the collected static files.

    .venv/bin/python -m agentloom.serve [--host 127.0.0.1] [--port 8000] [--workers N]

An ASGI server, so that the streamed events the console reads can be served without a process
per open page; Django runs the synchronous views unchanged (in each worker's thread for them).
Granian serves `STATIC_ROOT` (fill it with `manage.py collectstatic`) under `STATIC_URL` itself.
`WEB_WORKERS` (default 2) is how many worker processes it starts; `./dev run` serves this way too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

# A worker that refuses to stop (one that got the stop signal while it was still starting never
# stops; an events stream holds its worker until the run ends) is killed this long after the
# server was told to stop, so stopping always ends.
WORKERS_KILL_SECONDS = 10


def granian_command(
    *, host: str, port: int, workers: int, static_root: str, static_url: str
) -> list[str]:
    """Return the Granian command line for these options."""
    granian = shutil.which("granian", path=str(Path(sys.executable).parent)) or "granian"
    return [
        granian,
        "--interface",
        "asginl",  # Django's ASGI handler speaks HTTP only, no lifespan events
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--static-path-route",
        "/" + static_url.strip("/"),
        "--static-path-mount",
        static_root,
        "--no-ws",
        "--workers-kill-timeout",
        str(WORKERS_KILL_SECONDS),
        "agentloom.asgi:application",
    ]


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")
    from django.conf import settings

    parser = argparse.ArgumentParser(prog="python -m agentloom.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=settings.WEB_WORKERS)
    options = parser.parse_args(argv)
    static_root = Path(settings.STATIC_ROOT)
    static_root.mkdir(parents=True, exist_ok=True)
    command = granian_command(
        host=options.host,
        port=options.port,
        workers=options.workers,
        static_root=str(static_root),
        static_url=settings.STATIC_URL,
    )
    os.execv(command[0], command)  # noqa: S606 (the server replaces this process)


if __name__ == "__main__":
    main()
