"""Database slots: how many of a worker process's runs use the database at the same moment.

A run spends most of its life waiting on a model or a tool, and holds no database connection
then. Its database work (claiming it, loading its history, and each engine hook: saves,
model-call records, cancel and supplement checks, journal reads) runs in `database_slots.held()`,
which takes one of the process's slots for as long as that work lasts and gives the thread's
connection back when it is done: to the connection pool on PostgreSQL, closed on SQLite. A
process with hundreds of runs in flight therefore uses at most `size` connections for them (plus
the lease renewer's one), and a run waiting for a slot holds nothing that another needs.

Whatever else waits between short database reads gives a pooled connection back the same way
(`give_back_pooled_connection`): an events stream after each poll, so that open streams hold
none of the pool's. Without a pool it keeps its connection: SQLite has no pool to starve, and
reopening a connection ten times a second would cost more than keeping it (1.5 ms a poll on
SQLite; a new PostgreSQL session each time).

`held()` is re-entrant within a thread (a sub-agent's hooks run inside its parent's tool).
The size is `RUN_DATABASE_SLOTS`: on PostgreSQL one less than the connection pool (the renewer
takes the last connection); on SQLite one, so the process's runs take turns at the database and
its IMMEDIATE writers never queue against each other behind the busy timeout. There the
process also keeps one idle connection open for its whole life: closing the last connection to
a WAL database checkpoints it, which would cost milliseconds on every slot given back.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection

from agentloom import metrics

Result = TypeVar("Result")


class DatabaseSlots:
    """A semaphore of database slots with a per-thread depth (see the module docstring)."""

    def __init__(self, size: int | None = None):
        self._size = size
        self._semaphore: threading.BoundedSemaphore | None = None
        self._anchor: sqlite3.Connection | None = None
        self._guard = threading.Lock()
        self._local = threading.local()
        self.peak = 0
        self._busy = 0

    @property
    def size(self) -> int:
        return self._size if self._size is not None else settings.RUN_DATABASE_SLOTS

    def _slots(self) -> threading.BoundedSemaphore:
        with self._guard:
            if self._semaphore is None:
                self._semaphore = threading.BoundedSemaphore(self.size)
                self._anchor = _wal_anchor()
            return self._semaphore

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold a slot (once per thread) while the block uses the database."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._slots().acquire()
            with self._guard:
                self._busy += 1
                self.peak = max(self.peak, self._busy)
            metrics.database_slots_in_use.inc()
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._give_back()

    def _give_back(self) -> None:
        try:
            give_back_connection()
        finally:
            with self._guard:
                self._busy -= 1
            metrics.database_slots_in_use.dec()
            self._slots().release()

    def wrap(self, function: Callable[..., Result]) -> Callable[..., Result]:
        """Return `function` running in `held()`."""

        @functools.wraps(function)
        def held_call(*args: Any, **kwargs: Any) -> Result:
            with self.held():
                return function(*args, **kwargs)

        return held_call


def give_back_connection() -> None:
    """Give the thread's connection back (to the pool, or closed) unless a transaction holds it."""
    if not connection.in_atomic_block:
        connection.close()


def give_back_pooled_connection() -> None:
    """Give the thread's connection back to the pool, if it came from one."""
    if getattr(connection, "pool", None) is not None:
        give_back_connection()


def _wal_anchor() -> sqlite3.Connection | None:
    """Open the idle connection that keeps a SQLite database's WAL open (None elsewhere)."""
    if connection.vendor != "sqlite":
        return None
    anchor = sqlite3.connect(connection.settings_dict["NAME"], check_same_thread=False)
    anchor.execute("SELECT count(*) FROM sqlite_master").fetchone()  # joins the WAL
    return anchor


# The process's slots, sized from the settings at first use.
database_slots = DatabaseSlots()
