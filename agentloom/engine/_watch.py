"""Watching work in flight: the lease heartbeat and the cancellation relay.

While a model call or a tool runs, the engine's thread is busy and cannot renew the run's lease
or notice a cancel request. A `Watch` runs beside it, in a thread of its own, for exactly as long
as that one call:

- every `heartbeat_seconds` it calls `renew_lease`; a False answer means the lease is lost: the
  watch sets `lost` and the cancellation signal at once and renews nothing more, and the engine
  stops right after the call without writing anything;
- it never renews past the call's own deadline (the gateway's read timeout × attempts for a
  model call, the tool's limit for a tool), so a hung call cannot hold the run forever: its lease
  then expires and the run is swept as `worker_lost`;
- for a tool or a streamed model call it polls `should_cancel` every `cancel_poll_seconds` and
  sets the signal (and calls `on_cancel`, which closes a stream), so the call stops within
  that time.

`on_exit` is called in the watch's thread before it ends (the application releases what the
thread opened, such as a database connection).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Watch"]

log = logging.getLogger(__name__)


class Watch:
    """Renew the lease and relay cancellation while one call runs (a context manager)."""

    def __init__(
        self,
        *,
        renew_lease: Callable[[], bool] | None,
        should_cancel: Callable[[], bool] | None,
        heartbeat_seconds: float,
        cancel_poll_seconds: float,
        deadline_seconds: float | None,
        lost: threading.Event,
        cancelled: threading.Event,
        on_exit: Callable[[], None] | None = None,
        on_cancel: Callable[[], None] | None = None,
    ):
        self.renew_lease = renew_lease
        self.should_cancel = should_cancel
        self.heartbeat_seconds = heartbeat_seconds
        self.cancel_poll_seconds = cancel_poll_seconds
        self.deadline_seconds = deadline_seconds
        self.lost = lost
        self.cancelled = cancelled
        self.on_exit = on_exit
        self.on_cancel = on_cancel
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        if self.renew_lease is not None or self.should_cancel is not None:
            self._thread = threading.Thread(target=self._watch, name="agentloom-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _cancel(self) -> None:
        self.cancelled.set()
        if self.on_cancel is not None:
            self.on_cancel()

    def _watch(self) -> None:
        try:
            self._loop()
        except Exception:
            # A failing hook must not kill the engine's thread; the lease then simply runs out.
            log.exception("the run's watch stopped on an error")
        finally:
            if self.on_exit is not None:
                self.on_exit()

    def _loop(self) -> None:
        started = time.monotonic()
        next_beat = started + self.heartbeat_seconds
        renew = self.renew_lease
        while True:
            now = time.monotonic()
            waits = [next_beat - now] if renew is not None else []
            if self.should_cancel is not None:
                waits.append(self.cancel_poll_seconds)
            if not waits or self._stop.wait(max(min(waits), 0.01)):
                return
            if (
                self.should_cancel is not None
                and not self.cancelled.is_set()
                and self.should_cancel()
            ):
                self._cancel()
            now = time.monotonic()
            if renew is None or now < next_beat:
                continue
            next_beat = now + self.heartbeat_seconds
            if self.deadline_seconds is not None and now - started >= self.deadline_seconds:
                # Past the call's own deadline: renew no more, so a hung call lets the lease go.
                renew = None
                continue
            try:
                held = renew()
            except Exception:
                # A failed write is not a lost lease: the next beat tries again.
                log.warning("the lease could not be renewed; trying again", exc_info=True)
                continue
            if not held:
                self.lost.set()
                self._cancel()
                return
            self.beats += 1
