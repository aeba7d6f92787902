"""Live deltas: a running model call's output, from the worker to the run's events stream.

The engine hands the worker each delta already redacted (with a hold-back, so a key split across
chunks is caught). `DeltaPublisher` gathers them for `FLUSH_SECONDS` and writes them to the
channel; `read_deltas` gives an events stream what came after a cursor. Two channels, one
interface, chosen by `LIVE_CHANNEL_URL`:

- `database` (the embedded default): `RunDelta` rows, their data encrypted like every stored
  secret-bearing field. It needs nothing but the database every process already shares, so a
  single machine without Redis streams too.
- a Redis URL: one Redis stream per run (`XADD` with a length cap and an expiry of
  `LIVE_DELTA_SECONDS`), entries encrypted the same way. Every web and worker process reads
  and writes the same stream, without adding rows and deletes to the database at scale, and a
  stream (unlike pub/sub) keeps entries, so a reconnecting reader resumes from its cursor.

Deltas are only on their way to the journal: when a run ends (`forget_run`, in the transaction
that journals its terminal status) they go, rows and stream alike, and so do those of a deleted
session's runs (`forget_session`). A reader that resumes after that gets the journal's records
instead, which hold everything the deltas showed. What a run's ending cannot reach (a worker
swept as lost that still writes a last delta) goes once older than `LIVE_DELTA_SECONDS`: rows at
the next call's end in any run, a Redis stream by its own expiry.

A call's end is marked in the channel, so a reader that connects mid-run starts at the call in
flight instead of replaying answers already journaled; the mark goes to readers too (its instance,
purpose and whether it failed), so the console knows which deltas a journaled answer replaces.
Cursors are strings: a row id, or a Redis stream id.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentloom import encryption
from sessions_app.models import Run, RunDelta

__all__ = [
    "FLUSH_SECONDS",
    "DeltaPublisher",
    "channel",
    "forget_run",
    "forget_session",
    "read_deltas",
]

FLUSH_SECONDS = 0.05
_STREAM_ENTRIES = 5_000


class DatabaseChannel:
    """Deltas as encrypted `RunDelta` rows."""

    def append(self, run_id: int, items: list[dict[str, Any]]) -> None:
        RunDelta.objects.bulk_create([RunDelta(run_id=run_id, data=item) for item in items])

    def after(self, run_id: int, cursor: str | None, limit: int = 500) -> list[tuple[str, dict]]:
        rows = RunDelta.objects.filter(run_id=run_id, created_at__gte=_oldest())
        if cursor:
            rows = rows.filter(pk__gt=int(cursor)) if cursor.isdigit() else rows.none()
        return [(str(row.pk), row.data) for row in rows.order_by("pk")[:limit]]

    def expire(self) -> None:
        RunDelta.objects.filter(created_at__lt=_oldest()).delete()

    def forget(self, run_ids: Iterable[int]) -> None:
        """Delete the runs' deltas, in the caller's transaction."""
        RunDelta.objects.filter(run_id__in=list(run_ids)).delete()


class RedisChannel:
    """Deltas as encrypted entries of one capped, expiring Redis stream per run."""

    def __init__(self, url: str):
        import redis

        self.redis = redis.Redis.from_url(url)
        self.refused = redis.ResponseError

    @staticmethod
    def key(run_id: int) -> str:
        return f"agentloom:run:{run_id}:deltas"

    def append(self, run_id: int, items: list[dict[str, Any]]) -> None:
        key = self.key(run_id)
        pipe = self.redis.pipeline()
        for item in items:
            pipe.xadd(key, {"d": encryption.encrypt(item)}, maxlen=_STREAM_ENTRIES)
        pipe.expire(key, settings.LIVE_DELTA_SECONDS)
        pipe.execute()

    def after(self, run_id: int, cursor: str | None, limit: int = 500) -> list[tuple[str, dict]]:
        start = f"({cursor}" if cursor else "-"
        try:
            entries = self.redis.xrange(self.key(run_id), min=start, max="+", count=limit)
        except self.refused:  # a malformed cursor from a client: read from the start
            entries = self.redis.xrange(self.key(run_id), min="-", max="+", count=limit)
        return [(ident.decode(), encryption.decrypt(fields[b"d"])) for ident, fields in entries]

    def expire(self) -> None:
        pass  # each stream expires on its own

    def forget(self, run_ids: Iterable[int]) -> None:
        """Delete the runs' streams once the caller's transaction commits (not before: a
        rolled-back ending leaves the run going on)."""
        keys = [self.key(run_id) for run_id in run_ids]
        if keys:
            transaction.on_commit(lambda: self.redis.delete(*keys))


@functools.cache
def _channel_for(url: str) -> DatabaseChannel | RedisChannel:
    return DatabaseChannel() if url == "database" else RedisChannel(url)


def channel() -> DatabaseChannel | RedisChannel:
    """Return the channel `LIVE_CHANNEL_URL` names."""
    return _channel_for(settings.LIVE_CHANNEL_URL)


def forget_run(run_id: int) -> None:
    """Delete a run's deltas as it ends: its journal now holds what they showed."""
    channel().forget([run_id])


def forget_session(session_id: int) -> None:
    """Delete the deltas of every run of a session that is being deleted."""
    channel().forget(Run.objects.filter(session_id=session_id).values_list("pk", flat=True))


def _oldest() -> datetime.datetime:
    return timezone.now() - datetime.timedelta(seconds=settings.LIVE_DELTA_SECONDS)


class DeltaPublisher:
    """The worker's side: `publish(instance, delta)` from the engine, `end_call(...)` per call."""

    def __init__(self, run_id: int, clock=time.monotonic):
        self.run_id = run_id
        self.clock = clock
        self.pending: list[dict[str, Any]] = []
        self.flushed_at = 0.0

    def publish(self, instance: str, delta: dict[str, Any]) -> None:
        last = self.pending[-1] if self.pending else None
        purpose = delta.get("purpose") or "action"
        if last is not None and (last["instance"], last["purpose"]) == (instance, purpose):
            for name in ("content", "reasoning"):
                last[name] += delta.get(name) or ""
            last["tool_calls"] += delta.get("tool_calls") or []
        else:
            self.pending.append(
                {
                    "instance": instance,
                    "content": delta.get("content") or "",
                    "reasoning": delta.get("reasoning") or "",
                    "tool_calls": list(delta.get("tool_calls") or []),
                    "purpose": purpose,
                }
            )
        if self.clock() - self.flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            items, self.pending = self.pending, []
            channel().append(self.run_id, items)
        self.flushed_at = self.clock()

    def end_call(self, instance: str, purpose: str, failed: bool) -> None:
        """Send what is held, mark the call's end, and let expired deltas go."""
        end = {"end": True, "instance": instance, "purpose": purpose, "failed": failed}
        self.pending.append(end)
        self.flush()
        channel().expire()


def read_deltas(run_id: int, cursor: str | None) -> tuple[list[tuple[str, dict]], str | None]:
    """Return the deltas and call ends (`"end": true`) after `cursor`, and the cursor to read on
    from.

    Without a cursor, reading starts after the last call that ended: a reader joining mid-run
    sees the call in flight, not the answers the journal already holds.
    """
    items = channel().after(run_id, cursor, limit=500 if cursor else _STREAM_ENTRIES)
    if cursor is None:
        ends = [index for index, (_, data) in enumerate(items) if data.get("end")]
        if ends:
            cursor = items[ends[-1]][0]
            items = items[ends[-1] + 1 :]
    if items:
        cursor = items[-1][0]
    return items, cursor
