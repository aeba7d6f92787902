"""Journal sync: turn an engine checkpoint into ordered, encrypted, idempotent journal rows.

Called on every engine save. In ONE transaction it allocates session seqs for the new records
from `Session.next_seq` under SELECT … FOR UPDATE, inserts them (insert-or-ignore on
(run, instance, entry_key)), stores the encrypted checkpoint, renews the run's lease, marks
journaled supplements consumed and saves a reusable view when the prefix rule allows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentloom.engine.frame import iter_frame_records, reusable_views
from sessions_app.models import (
    MAIN_INSTANCE,
    Run,
    RunSupplement,
    Session,
    SessionMessage,
    SessionView,
)

SUPPLEMENT_KEY_PREFIX = "supplement:"


class LeaseLost(Exception):
    """The worker no longer holds the run's lease (swept, or claimed elsewhere): stop at once."""


@dataclass
class SyncResult:
    inserted: int = 0
    view_revision: int | None = None
    view_refusal: str | None = None
    seqs: dict[tuple[str, str], int] = field(default_factory=dict)


def new_frame_records(
    frame: dict[str, Any], known: set[tuple[str, str]]
) -> list[tuple[str, dict[str, Any]]]:
    """Return the (instance, record) pairs of `frame` and its children not in `known`.

    They come in journal order: chronological across instances, and in record order inside
    one instance (the sort is stable).
    """
    fresh = [
        (instance, record)
        for instance, record in iter_frame_records(frame)
        if (instance, record["entry_key"]) not in known
    ]
    fresh.sort(key=lambda item: item[1].get("at") or "")
    return fresh


def _record_time(record: dict[str, Any]) -> datetime:
    moment = parse_datetime(record.get("at") or "") if record.get("at") else None
    return moment or timezone.now()


JournalEntry = tuple[str, str, str, Any, datetime]  # instance, kind, entry_key, message, at


def append_records(
    *,
    run_id: int,
    session_id: int,
    records: Iterable[JournalEntry],
    known: set[tuple[str, str]] | None = None,
) -> list[SessionMessage]:
    """Append the run's records that are not journaled yet, in order; return the new rows.

    Call inside a transaction. Seqs come from `Session.next_seq` read under SELECT … FOR UPDATE,
    never from an unlocked max(seq)+1; (run, instance, entry_key) makes a repeat a no-op.
    `known` (the run's journaled (instance, entry_key) pairs) spares the query when the caller
    already has it.
    """
    session = Session.objects.select_for_update().get(pk=session_id)
    if known is None:
        known = set(
            SessionMessage.objects.filter(run_id=run_id).values_list("instance", "entry_key")
        )
    rows, seq = [], session.next_seq
    for instance, kind, entry_key, message, at in records:
        if (instance, entry_key) in known:
            continue
        rows.append(
            SessionMessage(
                session_id=session_id,
                seq=seq,
                run_id=run_id,
                instance=instance,
                kind=kind,
                entry_key=entry_key,
                message=message,
                created_at=at,
            )
        )
        seq += 1
    if rows:
        SessionMessage.objects.bulk_create(rows, ignore_conflicts=True)
        Session.objects.filter(pk=session_id).update(next_seq=seq)
    return rows


class JournalWriter:
    """Syncs one run's checkpoints into the journal for the worker holding its lease."""

    def __init__(self, run: Run, *, lease_owner: str | None):
        self.run_id = run.pk
        self.session_id = run.session_id
        self.inherited_watermark = run.inherited_watermark
        self.lease_owner = lease_owner
        self.known: set[tuple[str, str]] = set(
            SessionMessage.objects.filter(run_id=run.pk).values_list("instance", "entry_key")
        )

    def _renew_lease(self, **fields: Any) -> None:
        query = Run.objects.filter(pk=self.run_id)
        if self.lease_owner is not None:
            query = query.filter(lease_owner=self.lease_owner, status=Run.Status.RUNNING)
            fields.setdefault(
                "lease_expires_at", timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)
            )
        fields["updated_at"] = timezone.now()
        if query.update(**fields) != 1:
            raise LeaseLost(f"run {self.run_id} is no longer leased by this worker")

    def sync(self, frame: dict[str, Any], **run_fields: Any) -> SyncResult:
        """Persist `frame` (and `run_fields`) atomically; return what was written."""
        with transaction.atomic():
            result = SyncResult()
            new_rows = append_records(
                run_id=self.run_id,
                session_id=self.session_id,
                records=(
                    (instance, r["kind"], r["entry_key"], r["message"], _record_time(r))
                    for instance, r in new_frame_records(frame, self.known)
                ),
                known=self.known,
            )
            if new_rows:
                result.inserted = len(new_rows)
                consumed = [
                    row.entry_key[len(SUPPLEMENT_KEY_PREFIX) :]
                    for row in new_rows
                    if row.kind == SessionMessage.Kind.SUPPLEMENT and row.instance == MAIN_INSTANCE
                ]
                if consumed:
                    RunSupplement.objects.filter(
                        run_id=self.run_id, pk__in=[int(k) for k in consumed if k.isdigit()]
                    ).update(consumed_at=timezone.now())
            counters = (frame.get("context") or {}).get("counters") or {}
            self._renew_lease(checkpoint=frame, counters=counters, **run_fields)
            result.view_revision, result.view_refusal = _maybe_save_view(
                run_id=self.run_id,
                session_id=self.session_id,
                inherited_watermark=self.inherited_watermark,
                frame=frame,
            )
        self.known.update((row.instance, row.entry_key) for row in new_rows)
        return result


def view_refusal_reason(
    *,
    run_id: int,
    session_id: int,
    inherited_watermark: int,
    frame: dict[str, Any],
    snapshot: dict[str, Any],
) -> tuple[str | None, int | None]:
    """Return (reason, watermark): why `snapshot` may not become a reusable view, or (None, W).

    A view may claim only an ordered, contiguous prefix of the session's main-instance records
    that the run actually observed (DESIGN.md §5).
    """
    state = frame.get("state") or {}
    if state.get("pending_tool_calls"):
        return "pending tool calls", None
    if state.get("queued_supplements"):
        return "supplements are still queued", None
    covered = snapshot.get("covered_seq") or 0
    local_keys = [
        record["entry_key"]
        for record in (frame.get("context") or {}).get("records") or []
        if record["seq"] <= covered
    ]
    if not local_keys:
        return "the view covers no record of this run", None
    rows = SessionMessage.objects.filter(
        run_id=run_id, instance=MAIN_INSTANCE, entry_key__in=local_keys
    )
    if rows.count() != len(local_keys):
        return "covered records are not all journaled", None
    watermark = rows.aggregate(top=Max("seq"))["top"]
    interleaved = (
        SessionMessage.objects.filter(
            session_id=session_id,
            instance=MAIN_INSTANCE,
            seq__gt=inherited_watermark,
            seq__lte=watermark,
        )
        .exclude(run_id=run_id)
        .exists()
    )
    if interleaved:
        return "other runs' records lie inside the covered range (not an observed prefix)", None
    if SessionMessage.objects.filter(
        run_id=run_id,
        instance=MAIN_INSTANCE,
        kind=SessionMessage.Kind.STATUS,
        seq__gt=inherited_watermark,
        seq__lte=watermark,
    ).exists():
        return "terminal records inside the covered range are not in the view", None
    if RunSupplement.objects.filter(run_id=run_id, consumed_at__isnull=True).exists():
        return "supplements are still queued", None
    return None, watermark


def _maybe_save_view(
    *, run_id: int, session_id: int, inherited_watermark: int, frame: dict[str, Any]
) -> tuple[int | None, str | None]:
    """Save the frame's newest compaction as a reusable view when the prefix rule allows it."""
    views = reusable_views(frame)
    if not views:
        return None, None
    view = views[-1]
    if SessionView.objects.filter(run_id=run_id, snapshot_revision=view["revision"]).exists():
        return None, None
    reason, watermark = view_refusal_reason(
        run_id=run_id,
        session_id=session_id,
        inherited_watermark=inherited_watermark,
        frame=frame,
        snapshot=view,
    )
    if reason is not None:
        return None, reason
    revision = (
        SessionView.objects.filter(session_id=session_id).aggregate(top=Max("revision"))["top"] or 0
    ) + 1
    SessionView.objects.create(
        session_id=session_id,
        revision=revision,
        watermark=watermark,
        messages=view["messages"],
        user_turns=view["user_turns"],
        model_steps=view["model_steps"],
        baseline_user_turns=view["baseline_user_turns"],
        baseline_model_steps=view["baseline_model_steps"],
        run_id=run_id,
        binding=frame.get("binding") or {},
        snapshot_revision=view["revision"],
    )
    return revision, None
