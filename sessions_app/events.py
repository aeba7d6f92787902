"""`GET /api/v1/runs/{id}/events`: a run's progress as server-sent events.

Four events, each with an `id` a client sends back as `Last-Event-ID` to resume:

- `delta` — `{"instance", "content", "reasoning", "tool_calls", "purpose"}`: a streamed model
  call's output as it is generated (redacted in the worker; see `sessions_app.services.live`);
  `purpose` is `action` for an answer, else the call is a summary or a check of one;
- `call_end` — `{"instance", "purpose", "failed"}`: a model call ended, streamed or not; the
  deltas since the last one were its output, and an `action` call that did not fail is
  journaled as the instance's next `assistant` record;
- `record` — `{"seq", "kind", "instance"}`: a journal record landed (the console then shows the
  server-rendered record in place of the deltas);
- `status` — `{"status", "error"}`: sent first, then whenever the run's status changes; the
  stream ends after the run has finished and everything before its end has been sent.

The id is `<record seq>:<delta cursor>:<stream>`. Without `Last-Event-ID`, records start after
`?after=` (default: the session's latest) and deltas at the model call in flight. Deltas can be
resumed while their run goes on (for at most `LIVE_DELTA_SECONDS`): they are deleted when it
ends, and a stream resumed after that finds none past its cursor and gets the run's records,
which hold what the deltas showed, then its status. Only the session's creator may read
it, as the journal (404 for anyone else); the view is async and authenticates as the API does (a
token or a signed-in session). Under WSGI (`runserver`) it streams from a synchronous generator in
the request's thread, under ASGI from an asynchronous one.

An open stream waits most of its life, and holds no pooled database connection while it waits:
each poll gives its connection back to the pool when it is done (`give_back_pooled_connection`),
so open streams never starve the pool of the other requests. A user holds at most
`EVENT_STREAMS_PER_USER` open at once, each with a lease in the cache (`agentloom.ratelimit.lease`,
shared by the web processes, expiring if a process dies); past it the answer is 429 with
`Retry-After`. `<stream>` names the lease: a client resuming with `Last-Event-ID` takes its old
stream's place over.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse, StreamingHttpResponse
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings

from agentloom import metrics
from agentloom.api import object_id
from agentloom.errors import NotFound, RateLimited
from agentloom.ratelimit import Lease, lease
from sessions_app.models import Run, SessionMessage
from sessions_app.selectors.runs import run_get
from sessions_app.services.live import read_deltas
from sessions_app.services.slots import give_back_pooled_connection

__all__ = ["run_events"]

POLL_SECONDS = 0.1
# Records and status are read from the database less often than deltas arrive.
RECORD_POLLS = 3
KEEPALIVE_SECONDS = 15.0


class RunFeed:
    """What a run's events stream sends next; `poll()` returns `(frames, finished)`.

    `lease` is the stream's place among its user's open streams, refreshed while it lives and
    given back when it ends.
    """

    def __init__(self, run: Run, lease: Lease, last_event_id: str | None, after: int | None):
        self.run_id = run.pk
        self.session_id = run.session_id
        self.lease = lease
        self.status: str | None = None
        self.seq, self.cursor, _ = _parse_event_id(last_event_id)
        if self.seq is None:
            self.seq = after if after is not None else self._latest_seq()
        self.polls = 0
        self.sent_at = time.monotonic()

    def _latest_seq(self) -> int:
        last = (
            SessionMessage.objects.filter(session_id=self.session_id)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        return last or 0

    def poll(self) -> tuple[list[str], bool]:
        frames: list[str] = []
        deltas, cursor = read_deltas(self.run_id, self.cursor)
        for ident, data in deltas:
            self.cursor = ident  # each event's id names itself, for `Last-Event-ID`
            frames.append(self._frame("call_end" if data.pop("end", False) else "delta", data))
        self.cursor = cursor
        finished = False
        if self.polls % RECORD_POLLS == 0:
            # The status is read before the records: a run seen finished has journaled them all.
            status, error = Run.objects.values_list("status", "error").get(pk=self.run_id)
            finished = status in Run.FINISHED_STATUSES
            frames += self._records()
            if status != self.status:
                self.status = status
                frames.append(self._frame("status", {"status": status, "error": error or None}))
        self.polls += 1
        if not frames and time.monotonic() - self.sent_at > KEEPALIVE_SECONDS:
            frames.append(": keep-alive\n\n")
        if frames:
            self.sent_at = time.monotonic()
        return frames, finished

    def _records(self) -> list[str]:
        rows = (
            SessionMessage.objects.filter(run_id=self.run_id, seq__gt=self.seq)
            .order_by("seq")
            .values("seq", "kind", "instance")
        )
        frames = []
        for row in rows:
            self.seq = row["seq"]
            frames.append(self._frame("record", row))
        return frames

    def _frame(self, event: str, data: dict[str, Any]) -> str:
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        ident = f"{self.seq}:{self.cursor or ''}:{self.lease.token}"
        return f"id: {ident}\nevent: {event}\ndata: {payload}\n\n"

    def step(self) -> tuple[list[str], bool]:
        """Poll once, then give the connection back; finished too once another connection of
        the same client has taken this stream's place over."""
        try:
            if not self.lease.refresh():
                return [], True
            return self.poll()
        finally:
            give_back_pooled_connection()

    def frames(self) -> Iterator[str]:
        metrics.event_streams_open.inc()
        try:
            yield "retry: 1000\n\n"
            while True:
                frames, finished = self.step()
                yield from frames
                if finished:
                    return
                time.sleep(POLL_SECONDS)
        finally:
            metrics.event_streams_open.dec()
            self.lease.release()

    async def aframes(self) -> AsyncIterator[str]:
        metrics.event_streams_open.inc()
        try:
            yield "retry: 1000\n\n"
            while True:
                frames, finished = await sync_to_async(self.step)()
                for frame in frames:
                    yield frame
                if finished:
                    return
                await asyncio.sleep(POLL_SECONDS)
        finally:
            metrics.event_streams_open.dec()
            self.lease.release()


def _parse_event_id(value: str | None) -> tuple[int | None, str | None, str]:
    """Return the record seq, the delta cursor and the stream's lease an event id names."""
    seq, cursor, stream = [*(value or "").strip().split(":", 2), "", ""][:3]
    if not seq.isdigit():
        return None, None, ""
    return int(seq), cursor or None, stream


def _open(request, id: str) -> RunFeed | JsonResponse:
    """Authenticate as the API does, take a place among the user's open streams and return the
    run's feed, or the error answer; the connection goes back either way."""
    try:
        return _feed_or_refusal(request, id)
    finally:
        give_back_pooled_connection()


def _feed_or_refusal(request, id: str) -> RunFeed | JsonResponse:
    drf = Request(
        request, authenticators=[cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    )
    try:
        user = drf.user
    except exceptions.AuthenticationFailed as error:
        return JsonResponse({"detail": str(error.detail)}, status=401)
    if user is None or not user.is_authenticated:
        answer = JsonResponse(
            {"detail": "Authentication credentials were not provided."}, status=401
        )
        answer["WWW-Authenticate"] = "Token"
        return answer
    try:
        run = run_get(user=user, run_id=object_id(id))
    except NotFound:
        return JsonResponse({"detail": "Not found."}, status=404)
    last_event_id = request.headers.get("Last-Event-ID")
    try:
        place = lease(
            "event_streams",
            user.pk,
            bound=settings.EVENT_STREAMS_PER_USER,
            what="event streams",
            resume=_parse_event_id(last_event_id)[2],
        )
    except RateLimited as error:
        answer = JsonResponse(error.as_json(), status=429)
        answer["Retry-After"] = str(error.retry_after)
        return answer
    after = request.GET.get("after", "")
    return RunFeed(run, place, last_event_id, int(after) if after.isdigit() else None)


async def run_events(request, id: str):
    """Stream the run's deltas, records and status as server-sent events."""
    if request.method != "GET":
        return JsonResponse({"detail": f'Method "{request.method}" not allowed.'}, status=405)
    opened = await sync_to_async(_open)(request, id)
    if isinstance(opened, JsonResponse):
        return opened
    frames = opened.aframes() if isinstance(request, ASGIRequest) else opened.frames()
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
