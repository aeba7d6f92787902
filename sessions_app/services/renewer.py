"""One lease renewer per worker process: the heartbeat and the cancel relay of all its runs.

A worker process executes many runs at once (Celery's thread pool), each on a thread of its own
that mostly waits on a model or a tool. While a call runs the engine asks its `watch` hook for a
watch; here that watch only registers the call with the process's renewer and removes it when
the call ends: no thread and no database connection per call. The renewer's one thread, with one
database connection of its own (outside the database slots, so that no run's database work can
delay a heartbeat):

- every `RUN_HEARTBEAT_SECONDS` of a call it renews that run's lease (`renew_lease`, fenced by the
  lease owner), never past the call's own deadline; a lease found lost sets the call's `lost`
  and `cancelled` signals and is renewed no more, and the engine stops right after the call;
- every `CANCEL_POLL_SECONDS` it asks, in one query for all of them, which runs with a tool in
  flight have been asked to cancel, and sets those tools' signals.

A renewal that fails (the database did not answer) is not a lost lease: the next beat tries
again. The thread starts with the first call of a process (after Celery forks, never before) and
holds no connection while no call is in flight.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from sessions_app.models import Run
from sessions_app.services.runs import renew_lease

log = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.5


@dataclass(eq=False)
class _Call:
    """One model call or tool in flight, as the renewer sees it."""

    run_id: int
    owner: str
    lost: threading.Event
    cancelled: threading.Event
    relay_cancel: bool
    next_beat: float
    # No renewal at or after this moment (monotonic); None renews until the call ends.
    renew_until: float | None
    renewing: bool = True


class LeaseRenewer:
    """Watches every call in flight in this process from one thread (see the module docstring)."""

    def __init__(self, *, cancel_poll_seconds: float = CANCEL_POLL_SECONDS):
        self.cancel_poll_seconds = cancel_poll_seconds
        self.beats = 0
        self._wake = threading.Condition()
        self._calls: set[_Call] = set()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def watch(self, *, run_id: int, owner: str) -> Callable[..., AbstractContextManager[_Call]]:
        """Return the engine's `watch` hook for run `run_id` held by `owner`."""

        def factory(
            *,
            deadline_seconds: float | None,
            lost: threading.Event,
            cancelled: threading.Event,
            relay_cancel: bool,
        ) -> AbstractContextManager[_Call]:
            now = time.monotonic()
            call = _Call(
                run_id=run_id,
                owner=owner,
                lost=lost,
                cancelled=cancelled,
                relay_cancel=relay_cancel,
                next_beat=now + settings.RUN_HEARTBEAT_SECONDS,
                renew_until=None if deadline_seconds is None else now + deadline_seconds,
            )
            return self._watching(call)

        return factory

    def in_flight(self) -> int:
        """Return how many calls this process has in flight."""
        with self._wake:
            return len(self._calls)

    @contextmanager
    def _watching(self, call: _Call) -> Iterator[_Call]:
        with self._wake:
            self._calls.add(call)
            self._start_once()
            self._wake.notify()
        try:
            yield call
        finally:
            with self._wake:
                self._calls.discard(call)

    def _start_once(self) -> None:
        # A thread does not survive a fork: a forked process starts its own.
        alive = self._thread is not None and self._thread.is_alive()
        if alive and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="agentloom-renewer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._wake:
                if not self._calls:
                    connection.close()  # idle: hold no connection
                while not self._calls:
                    self._wake.wait()
                calls = list(self._calls)
            try:
                self.tick(calls)
            except Exception:
                # The database did not answer: try again at the next tick on a new connection.
                log.warning("the lease renewer could not reach the database", exc_info=True)
                connection.close()
            time.sleep(self._pause(calls))

    def _pause(self, calls: list[_Call]) -> float:
        now = time.monotonic()
        waits = [call.next_beat - now for call in calls if call.renewing]
        if any(call.relay_cancel and not call.cancelled.is_set() for call in calls):
            waits.append(self.cancel_poll_seconds)
        return min(max(min(waits, default=self.cancel_poll_seconds), 0.01), 1.0)

    def tick(self, calls: list[_Call]) -> None:
        """Relay cancel requests to the tools of `calls`, then renew the leases that are due."""
        self._relay_cancels(calls)
        now = time.monotonic()
        for call in calls:
            if call.renewing and now >= call.next_beat:
                self._beat(call, now)

    def _relay_cancels(self, calls: list[_Call]) -> None:
        watched = [call for call in calls if call.relay_cancel and not call.cancelled.is_set()]
        if not watched:
            return
        asked = set(
            Run.objects.filter(
                pk__in={call.run_id for call in watched}, cancel_requested=True
            ).values_list("pk", flat=True)
        )
        for call in watched:
            if call.run_id in asked:
                call.cancelled.set()

    def _beat(self, call: _Call, now: float) -> None:
        call.next_beat = now + settings.RUN_HEARTBEAT_SECONDS
        if call.renew_until is not None and now >= call.renew_until:
            # Past the call's own deadline: renew no more, so a hung call lets the lease go.
            call.renewing = False
            return
        try:
            held = renew_lease(run_id=call.run_id, owner=call.owner)
        except Exception:
            log.warning("run %s: the lease could not be renewed; trying again", call.run_id)
            connection.close()
            return
        if not held:
            call.renewing = False
            call.lost.set()
            call.cancelled.set()
            return
        self.beats += 1


# The process's renewer: every run this process executes registers its calls here.
renewer = LeaseRenewer()
