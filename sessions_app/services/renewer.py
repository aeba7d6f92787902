"""One lease renewer per worker process: the heartbeat and the cancel relay of all its runs.

A worker process executes many runs at once (Celery's thread pool), each on a thread of its own
that mostly waits on a model or a tool. Every run's `EngineHooks.watch` is the process's one
engine `Watcher` (`renewer.run(RunLease(run_id, owner))`): no thread and no database connection
per call. Its one thread, with one database connection of its own (outside the database slots,
so that no run's database work can delay a heartbeat), asks `RunLeases`:

- every `RUN_HEARTBEAT_SECONDS` of a call, to renew that run's lease (`renew_lease`, fenced by
  the lease owner), never past the call's own deadline; the same statement returns whether the
  run was asked to cancel or sent a supplement, handed to the run (`RunLease.on_signals`);
- every `CANCEL_POLL_SECONDS`, in one query for all of them, which runs with a tool or a stream
  in flight have been asked to cancel.

The watcher's thread starts with the first call of a process (after Celery forks, never before),
and its connection is closed after a query that failed and when no call is left in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from agentloom.engine import Watcher, WatchHooks
from sessions_app.models import Run
from sessions_app.services.journal import RunSignals, renew_lease

CANCEL_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class RunLease:
    """The run whose calls are watched, and the owner its lease is renewed for."""

    run_id: int
    owner: str
    # Told what each renewal found (the run's own writes are told the same by its saves).
    on_signals: Callable[[RunSignals], None] | None = field(default=None, compare=False, hash=False)


class RunLeases(WatchHooks):
    """The database side of the process's watcher (see the module docstring)."""

    def __init__(self, *, cancel_poll_seconds: float = CANCEL_POLL_SECONDS):
        self.cancel_poll_seconds = cancel_poll_seconds

    @property
    def heartbeat_seconds(self) -> float:
        return settings.RUN_HEARTBEAT_SECONDS

    def renew(self, run: RunLease) -> bool:
        signals = renew_lease(run_id=run.run_id, owner=run.owner)
        if signals is not None and run.on_signals is not None:
            run.on_signals(signals)
        return signals is not None

    def cancels_asked(self, runs: set[RunLease]) -> set[RunLease]:
        asked = set(
            Run.objects.filter(
                pk__in={run.run_id for run in runs}, cancel_requested=True
            ).values_list("pk", flat=True)
        )
        found = {run for run in runs if run.run_id in asked}
        for run in found:
            if run.on_signals is not None:
                # The supplement count was not read: unknown, so the queue is read again.
                run.on_signals(RunSignals(cancel_requested=True, supplements_added=None))
        return found

    def release(self) -> None:
        connection.close()


def lease_renewer(*, cancel_poll_seconds: float = CANCEL_POLL_SECONDS) -> Watcher:
    """Return a watcher that renews run leases and relays cancel requests from the database."""
    return Watcher(RunLeases(cancel_poll_seconds=cancel_poll_seconds))


# The process's renewer: every run this process executes has its calls watched here.
renewer = lease_renewer()
