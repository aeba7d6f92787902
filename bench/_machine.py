"""What the benchmarks share: the machine line, percentiles, a server's port, and the pytest
command line of a bench that runs its own test functions."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def print_machine() -> None:
    """Print the commit (marked when modified), the cores, the load average and the command."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"commit {commit}{' (modified)' if dirty else ''}, {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    print("command:", " ".join(sys.argv), flush=True)


def pytest_arguments(bench_file: str, test: str = "") -> list[str]:
    """Return pytest's arguments that run the test functions of `bench_file` (or its one `test`)
    with the project's configuration, printing what they print, in their order."""
    target = f"{bench_file}::{test}" if test else bench_file
    return [
        *("-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly"),
        *("--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), target),
    ]


def percentile(values: list[float], percent: float) -> float:
    """Return the nearest-rank `percent` percentile of `values` (nan when there are none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    """Return a free port on the loopback interface."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(base: str) -> None:
    """Wait up to 60 s for the web server at `base` to answer its login page."""
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{base}/accounts/login/", timeout=5)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
