"""Forking a session at a journal record: a new session whose journal starts with a copy.

The fork belongs to the same creator and agent version. Its journal begins with the original's
main-instance records up to the chosen seq (any instance's record may be chosen), re-encrypted,
numbered from 1, each naming its seq in the original (`origin_seq`), under copies of their runs
(finished, history only: `origin_number`, never resumed); its own runs follow. A tool group
still open at that seq is closed by the fork with one `status: unknown` result per call
(never assumed done, never re-executed). Being a copy, the fork's journal is read, paged,
searched, exported and purged on its own: the original may be purged while the fork lives.
Copies keep their local seqs, so a run reference (`r3:7`) names the fork's copy there too. A
fork of an imported session notes where its imported records end (`origin["imported"]`), so its
runs mark them as the original's do (rendering 6).

A reusable view of the original is carried over when its watermark lies within the prefix and
every record it refers to was copied: its references are mapped to the copies' seqs — the
records it shows (`s`), the ranges a summary stands for (`src`), and `s:<seq>` references and
`h<seq>_<n>` call ids in what it stores inline or names (a summary's kept lines, a stub's
reference, a placeholder's call id). A view with one reference that cannot be mapped, or
revoked (itself or by derivation), is not carried. A carried view keeps its binding, counters
and derivation among the carried views; it refers to no snapshot of the fork and keeps its
records with reference rows of its own. So the fork's first run starts from the compacted view
instead of projecting (and compacting again) the whole prefix. Forking while a run of the
original is active is refused (409).
"""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentloom.engine import MAIN_INSTANCE, UNKNOWN_RESULT, union_ranges
from agentloom.errors import Conflict, InvalidInput, NotFound
from sessions_app.models import Run, Session, SessionMessage, SessionView
from sessions_app.selectors.history import import_origin, imported_history
from sessions_app.selectors.stored_messages import messages_read
from sessions_app.selectors.views import view_derivations
from sessions_app.services.reusable_views import reference_rows
from sessions_app.services.runs import lock_live_session, sweep_expired_leases
from sessions_app.services.search_index import index_records
from sessions_app.services.stored_messages import stored_once

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
    # The original's seq of each copied record -> the copy's.
    seqs: dict[int, int] = {}
    for record in rows.select_related("run").iterator(chunk_size=FORK_BATCH):
        copy = runs.get(record.run_id) or _copied_run(fork, record.run, runs)
        number += 1
        seqs[record.seq] = number
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
    fork.next_seq = number + 1
    imported = imported_history(session.origin, session.pk)
    if imported is not None:
        last = max((copy for seq, copy in seqs.items() if seq <= imported.upto), default=0)
        fork.origin["imported"] = {**(import_origin(session.origin) or {}), "upto": last}
    Session.objects.filter(pk=fork.pk).update(next_seq=fork.next_seq, origin=fork.origin)
    _carry_views(session, fork, seq, seqs, {run.number: run for run in runs.values()})
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
        local_seq=record.local_seq,
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


# References a view may hold in text: `s:<seq>` (or a span `s:<a>–<b>`) and `h<seq>_<n>` ids.
_SEQ_REF = re.compile(r"\bs:(\d+)(?:–(\d+))?")
_CALL_ID = re.compile(r"\bh(\d+)_(\d+)\b")


class _Unmapped(Exception):
    """A view refers to a record the fork did not copy."""


def _carry_views(
    session: Session, fork: Session, seq: int, seqs: dict[int, int], runs: dict[int, Run]
) -> None:
    """Carry over the original's views that lie within the prefix and map whole (see above)."""
    derivations = view_derivations(session.pk)
    carried: dict[int, SessionView] = {}
    views = SessionView.objects.filter(
        session=session, watermark__lte=seq, revoked_at__isnull=True
    ).select_related("run")
    for view in views.order_by("revision"):
        if derivations[view.revision].revoked_ancestor is not None:
            continue
        try:
            watermark = _mapped_seq(view.watermark, seqs)
            entries = [_mapped_entry(entry, seqs) for entry in view.entries]
            messages = _mapped_value(messages_read(session.pk, view.messages), seqs)
        except _Unmapped:
            continue
        copy = SessionView.objects.create(
            session=fork,
            revision=len(carried) + 1,
            watermark=watermark,
            messages=stored_once(fork.pk, messages),
            entries=entries,
            user_turns=view.user_turns,
            model_steps=view.model_steps,
            baseline_user_turns=view.baseline_user_turns,
            baseline_model_steps=view.baseline_model_steps,
            run=runs[view.run.number],
            binding=view.binding,
            binding_key=view.binding_key,
            snapshot_revision=view.snapshot_revision,
            derived_from=carried.get(view.derived_from_id),
        )
        carried[view.pk] = copy
        # The fork's copy of the view keeps its records by rows of its own.
        reference_rows(fork.pk, entries, view=copy)


def _mapped_seq(seq: int, seqs: dict[int, int]) -> int:
    if seq not in seqs:
        raise _Unmapped(seq)
    return seqs[seq]


def _mapped_entry(entry: dict[str, Any], seqs: dict[int, int]) -> dict[str, Any]:
    mapped = {key: _mapped_value(value, seqs) for key, value in entry.items()}
    if "s" in entry:
        mapped["s"] = _mapped_seq(entry["s"], seqs)
    if "src" in entry:
        mapped["src"] = union_ranges(
            _mapped_range(first, last, seqs) for first, last in entry["src"]
        )
    return mapped


def _mapped_range(first: int, last: int, seqs: dict[int, int]) -> list[int]:
    """Map a range whose every record the fork copied; the copies are numbered in order with
    nothing between, so that holds exactly when its ends map as far apart as they were."""
    start, end = _mapped_seq(first, seqs), _mapped_seq(last, seqs)
    if end - start != last - first:
        raise _Unmapped(first)
    return [start, end]


def _mapped_value(value: Any, seqs: dict[int, int]) -> Any:
    """Return `value` with every `s:<seq>` reference and `h<seq>_<n>` id in its text mapped."""
    if isinstance(value, str):

        def seq_ref(match: re.Match[str]) -> str:
            first = _mapped_seq(int(match[1]), seqs)
            if match[2] is None:
                return f"s:{first}"
            return f"s:{first}–{_mapped_seq(int(match[2]), seqs)}"

        def call_id(match: re.Match[str]) -> str:
            return f"h{_mapped_seq(int(match[1]), seqs)}_{match[2]}"

        return _CALL_ID.sub(call_id, _SEQ_REF.sub(seq_ref, value))
    if isinstance(value, dict):
        return {key: _mapped_value(item, seqs) for key, item in value.items()}
    if isinstance(value, list):
        return [_mapped_value(item, seqs) for item in value]
    return value
