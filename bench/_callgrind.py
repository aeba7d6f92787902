"""Instructions counted under callgrind, for the benches that measure the CPU of a run.

CPU time on a shared machine moves with its load; the instructions callgrind counts for the same
inputs do not (within a few percent from run to run: the run's other threads, a database that
grows). A bench runs its pytest process under `command()` — instrumentation off at start, so
start-up runs at near native speed — and switches it on after its warm-up through callgrind's
client requests (`client_requests`: a library compiled with `cc` from `valgrind/callgrind.h`,
loaded with ctypes by `Requests`), then either collects around each measured run and dumps
(`Requests.collected`) or lets valgrind collect and dump around a marked function
(`--toggle-collect=… --dump-after=…`). `totals` reads what each dump counted.

Only the bench's own process runs under valgrind; it needs valgrind, its headers and a C compiler.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LIBRARY", "Requests", "client_requests", "command", "totals"]

# The environment variable that gives the measured process the client-request library's path.
LIBRARY = "BENCH_CALLGRIND_LIBRARY"

_SOURCE = r"""
#include <valgrind/callgrind.h>
void callgrind_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void callgrind_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void callgrind_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""
_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.M)


def client_requests(directory: Path) -> Path:
    """Compile callgrind's client requests into `directory`; return the library's path."""
    source, library = directory / "requests.c", directory / "requests.so"
    source.write_text(_SOURCE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def command(output: Path, *options: str) -> list[str]:
    """Return the valgrind command line that counts into `output`.<n> files, nothing counted
    until the process starts instrumenting (`Requests.start`)."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--callgrind-out-file={output}",
        *options,
    ]


def totals(output: Path) -> list[int]:
    """Return the instructions of each dump of `output` (`output`.1, .2, …) in order, leaving out
    dumps that counted nothing (the one valgrind writes at exit)."""
    dumps = sorted(
        output.parent.glob(f"{output.name}.*"), key=lambda path: int(path.name.rsplit(".", 1)[1])
    )
    counts = []
    for dump in dumps:
        found = _TOTAL.search(dump.read_bytes())
        if found and int(found.group(1)):
            counts.append(int(found.group(1)))
    return counts


class Requests:
    """Callgrind's client requests in the measured process, or nothing when it runs natively
    (no library named by `LIBRARY`)."""

    def __init__(self) -> None:
        path = os.environ.get(LIBRARY, "")
        self._library = ctypes.CDLL(path) if path else None

    @property
    def active(self) -> bool:
        return self._library is not None

    def start(self) -> None:
        """Start instrumenting (after the warm-up): from now on the process runs slowly."""
        if self._library is not None:
            self._library.callgrind_start()

    @contextmanager
    def collected(self, name: str) -> Iterator[None]:
        """Collect what the block runs, then dump it as one file."""
        if self._library is None:
            yield
            return
        self._library.callgrind_toggle()
        try:
            yield
        finally:
            self._library.callgrind_toggle()
            self._library.callgrind_dump(name.encode())
