"""Watching calls in flight: the lease heartbeat and the cancellation relay.

While a model call or a tool runs, the engine's thread is busy and cannot renew the run's lease
or notice a cancel request. It hands each call, as a `WatchedCall`, to its `EngineHooks.watch`
(a `CallWatch`) for exactly as long as the call runs. A `Watcher` is the one implementation: one
thread watches every call in flight of every run given to it (`Watcher.run(key)` is the watch
of one run), asking its `WatchHooks` (the application) from that thread:

- every `heartbeat_seconds` of a call it renews that run's lease (`WatchHooks.renew`); a False
  answer means the lease is lost: the call's `lost` and `cancelled` are set at once (and its
  `on_cancel` called), its lease is renewed no more, and the engine stops right after the call
  without writing anything. A renewal that raises is not a lost lease: the next beat tries again;
- it never renews past the call's own deadline (the gateway's read timeout × attempts for a
  model call, the tool's limit for a tool), so a hung call cannot hold the run forever: its lease
  then expires and the run is swept as `worker_lost`;
- every `cancel_poll_seconds`, for the calls that relay cancellation (a tool or a streamed model
  call), it asks in one question which of their runs have been asked to cancel
  (`WatchHooks.cancels_asked`) and sets those calls' `cancelled` (and calls `on_cancel`, which
  closes a stream), so the call stops within that time.

A call with nothing to watch (no heartbeat, no cancellation to relay) starts no thread. The thread
starts with the first call in flight (in a forked process, its own), ends when none is left, and
calls `WatchHooks.release` before it ends and after a question that failed (the application
gives back what the thread opened, such as a database connection).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["CallWatch", "RunWatch", "WatchHooks", "WatchedCall", "Watcher"]

log = logging.getLogger(__name__)

# The longest the watching thread sleeps between two looks at its calls.
_LONGEST_PAUSE = 1.0


@dataclass(frozen=True)
class WatchedCall:
    """One model call or tool in flight, as the engine hands it to its watch."""

    # No renewal this many seconds after the call began; None renews until the call ends.
    deadline_seconds: float | None
    # Set by the watch when the run's lease is lost.
    lost: threading.Event
    # Set by the watch when the call must stop (a cancel request relayed, or the lease lost).
    cancelled: threading.Event
    # True for a tool or a streamed model call: a cancel request reaches it while it runs.
    relay_cancel: bool
    # Called after `cancelled` is set (a streamed call closes its stream).
    on_cancel: Callable[[], None] | None = None


class CallWatch(Protocol):
    """What `EngineHooks.watch` is: the watch of one run's calls."""

    def watching(self, call: WatchedCall) -> AbstractContextManager[Any]:
        """Return the context manager that watches `call` for as long as it runs."""
        ...


class WatchHooks:
    """What a `Watcher` asks the application, from its own thread; override what applies.

    `heartbeat_seconds` None renews nothing; `cancels_asked` answers for many runs at once.
    """

    heartbeat_seconds: float | None = None
    cancel_poll_seconds: float = 0.5

    def renew(self, run: Hashable) -> bool:
        """Renew the lease of `run`; return whether it is still held."""
        return True

    def cancels_asked(self, runs: set[Hashable]) -> set[Hashable]:
        """Return which of `runs` have been asked to cancel."""
        return set()

    def release(self) -> None:
        """Give back what the watching thread opened (called in that thread)."""


@dataclass(eq=False)
class _InFlight:
    """One call in flight, as the watcher sees it."""

    run: Hashable
    call: WatchedCall
    next_beat: float
    # No renewal at or after this moment (monotonic); None renews until the call ends.
    renew_until: float | None
    renewing: bool

    def cancel(self) -> None:
        self.call.cancelled.set()
        if self.call.on_cancel is not None:
            self.call.on_cancel()


@dataclass(frozen=True)
class RunWatch:
    """The `CallWatch` of one run: its calls watched by `watcher` under the key `run`."""

    watcher: Watcher
    run: Hashable

    def watching(self, call: WatchedCall) -> AbstractContextManager[Any]:
        return self.watcher.watching(self.run, call)


class Watcher:
    """Watches every call in flight of the runs given to it from one thread (see the module)."""

    def __init__(self, hooks: WatchHooks):
        self.hooks = hooks
        self.beats = 0
        self._wake = threading.Condition()
        self._calls: set[_InFlight] = set()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def run(self, run: Hashable) -> RunWatch:
        """Return the watch of the calls of `run` (its key in the hooks' questions)."""
        return RunWatch(self, run)

    def in_flight(self) -> int:
        """Return how many calls are in flight."""
        with self._wake:
            return len(self._calls)

    def watching(self, run: Hashable, call: WatchedCall) -> AbstractContextManager[Any]:
        """Return the context manager that watches `call` of `run` while it runs."""
        heartbeat = self.hooks.heartbeat_seconds
        if heartbeat is None and not call.relay_cancel:
            return nullcontext(call)
        now = time.monotonic()
        deadline = call.deadline_seconds
        return self._watching(
            _InFlight(
                run=run,
                call=call,
                next_beat=now + (heartbeat or 0),
                renew_until=None if deadline is None else now + deadline,
                renewing=heartbeat is not None,
            )
        )

    @contextmanager
    def _watching(self, flight: _InFlight) -> Iterator[WatchedCall]:
        with self._wake:
            self._calls.add(flight)
            self._start_once()
        try:
            yield flight.call
        finally:
            with self._wake:
                self._calls.discard(flight)
                if not self._calls:
                    self._wake.notify()

    def _start_once(self) -> None:
        # A thread does not survive a fork: a forked process starts its own.
        alive = self._thread is not None and self._thread.is_alive()
        if alive and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="agentloom-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            self._watch_until_idle()
        finally:
            self._release()

    def _watch_until_idle(self) -> None:
        calls = self._current(pause=0)
        while calls:
            try:
                self.tick(calls)
            except Exception:
                # A question that failed is asked again at the next tick.
                log.warning("the watch could not ask about its calls", exc_info=True)
                self._release()
            calls = self._current(pause=self._pause(calls))

    def _current(self, *, pause: float) -> list[_InFlight]:
        """Return the calls in flight after `pause` (sooner once none is left); end on none."""
        with self._wake:
            if pause > 0 and self._calls:
                self._wake.wait(pause)
            if not self._calls and self._thread is threading.current_thread():
                self._thread = None
            return list(self._calls)

    def _release(self) -> None:
        try:
            self.hooks.release()
        except Exception:
            log.warning("the watch could not release what it held", exc_info=True)

    def _pause(self, calls: list[_InFlight]) -> float:
        now = time.monotonic()
        waits = [flight.next_beat - now for flight in calls if flight.renewing]
        if any(flight.call.relay_cancel and not flight.call.cancelled.is_set() for flight in calls):
            waits.append(self.hooks.cancel_poll_seconds)
        default = self.hooks.cancel_poll_seconds
        return min(max(min(waits, default=default), 0.01), _LONGEST_PAUSE)

    def tick(self, calls: list[_InFlight]) -> None:
        """Relay cancel requests to the calls that take them, then renew the leases due."""
        self._relay_cancels(calls)
        now = time.monotonic()
        for flight in calls:
            if flight.renewing and now >= flight.next_beat:
                self._beat(flight, now)

    def _relay_cancels(self, calls: list[_InFlight]) -> None:
        watched = [f for f in calls if f.call.relay_cancel and not f.call.cancelled.is_set()]
        if not watched:
            return
        asked = self.hooks.cancels_asked({flight.run for flight in watched})
        for flight in watched:
            if flight.run in asked:
                flight.cancel()

    def _beat(self, flight: _InFlight, now: float) -> None:
        flight.next_beat = now + (self.hooks.heartbeat_seconds or 0)
        if flight.renew_until is not None and now >= flight.renew_until:
            # Past the call's own deadline: renew no more, so a hung call lets the lease go.
            flight.renewing = False
            return
        try:
            held = self.hooks.renew(flight.run)
        except Exception:
            # A failed write is not a lost lease: the next beat tries again.
            log.warning("run %s: the lease could not be renewed; trying again", flight.run)
            self._release()
            return
        if not held:
            flight.renewing = False
            flight.call.lost.set()
            flight.cancel()
            return
        self.beats += 1
