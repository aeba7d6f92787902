"""Forking a session at a journal record: a new session whose journal starts with a copy.

The fork belongs to the same creator and agent version. Its journal begins with the original's
main-instance records up to the chosen seq (any instance's record may be chosen), re-encrypted,
numbered from 1, each naming its seq in the original (`origin_seq`), under copies of their runs
(finished, history only: `origin_number`, never resumed); its own runs follow. A tool group
still open at that seq is closed by the fork with one `status: unknown` result per call
(never assumed done, never re-executed). Being a copy, the fork's journal is read, paged,
searched, exported and purged on its own: the original may be purged while the fork lives.
Reusable views are not carried over: the fork's first run projects its copied prefix. Forking
while a run of the original is active is refused (409).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentloom.engine import MAIN_INSTANCE, UNKNOWN_RESULT
from agentloom.errors import Conflict, InvalidInput, NotFound
from sessions_app.models import Run, Session, SessionMessage
from sessions_app.services.runs import lock_live_session, sweep_expired_leases
from sessions_app.services.search_index import index_records

FORK_BATCH = 500
RUN_COPY_FIELDS = ("status", "question", "answer", "error", "attempt", "counters", "finished_at")


@transaction.atomic(durable=True)
def session_fork(*, user, session: Session, seq: int) -> Session:
    """Return a new session of `user` whose journal is `session`'s main records up to `seq`."""
    if session.created_by_id != user.pk:
        raise NotFound("Not found.")
    sweep_expired_leases(session=session)
    lock_live_session(session.pk)
    if Run.objects.filter(session=session, status__in=Run.ACTIVE_STATUSES).exists():
        raise Conflict("A run of this session is active; fork once it has finished.")
    if not SessionMessage.objects.filter(session=session, seq=seq).exists():
        raise InvalidInput("No journal record of this session has this seq.", field="seq")
    fork = Session.objects.create(
        space_id=session.space_id,
        agent_id=session.agent_id,
        agent_version_id=session.agent_version_id,
        created_by=user,
        title=session.title,
        read_only=session.read_only,
        origin={
            "kind": "fork",
            "session": session.pk,
            "seq": seq,
            "at": timezone.now().isoformat(),
        },
    )
    rows = SessionMessage.objects.filter(
        session=session, instance=MAIN_INSTANCE, seq__lte=seq
    ).order_by("seq")
    runs: dict[int, Run] = {}
    open_calls: list[str] = []
    batch: list[SessionMessage] = []
    number = 0
    for record in rows.select_related("run").iterator(chunk_size=FORK_BATCH):
        copy = runs.get(record.run_id) or _copied_run(fork, record.run, runs)
        number += 1
        batch.append(_copied_record(fork, copy, record, number))
        open_calls = _still_open(open_calls, record)
        if len(batch) == FORK_BATCH:
            SessionMessage.objects.bulk_create(batch)
            index_records(batch)
            batch = []
    for call_id in open_calls:
        number += 1
        batch.append(_unknown_result(fork, copy, call_id, number))
    SessionMessage.objects.bulk_create(batch)
    index_records(batch)
    Session.objects.filter(pk=fork.pk).update(next_seq=number + 1)
    fork.next_seq = number + 1
    return fork


def _copied_run(fork: Session, original: Run, runs: dict[int, Run]) -> Run:
    fields = {name: getattr(original, name) for name in RUN_COPY_FIELDS}
    if original.status not in Run.FINISHED_STATUSES:
        fields["status"] = Run.Status.CANCELLED
    copy = Run.objects.create(
        session=fork, number=original.number, origin_number=original.number, **fields
    )
    runs[original.pk] = copy
    return copy


def _copied_record(fork: Session, run: Run, record: SessionMessage, seq: int) -> SessionMessage:
    return SessionMessage(
        session=fork,
        seq=seq,
        run=run,
        instance=record.instance,
        kind=record.kind,
        entry_key=record.entry_key,
        message=record.message,
        origin_seq=record.seq,
        created_at=record.created_at,
    )


def _still_open(open_calls: list[str], record: SessionMessage) -> list[str]:
    """Return the calls of the latest tool group that have no result after `record`."""
    message = record.message if isinstance(record.message, dict) else {}
    if record.kind == SessionMessage.Kind.ASSISTANT:
        return [call.get("id") for call in message.get("tool_calls") or [] if call.get("id")]
    if record.kind == SessionMessage.Kind.TOOL_RESULT:
        return [call for call in open_calls if call != message.get("tool_call_id")]
    return open_calls


def _unknown_result(fork: Session, run: Run, call_id: str, seq: int) -> SessionMessage:
    return SessionMessage(
        session=fork,
        seq=seq,
        run=run,
        instance=MAIN_INSTANCE,
        kind=SessionMessage.Kind.TOOL_RESULT,
        entry_key=f"fork:unknown:{call_id}",
        message={"role": "tool", "tool_call_id": call_id, "content": UNKNOWN_RESULT},
        created_at=timezone.now(),
    )
