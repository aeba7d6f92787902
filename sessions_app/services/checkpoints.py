"""Checkpoints by reference, written: a `format: 1` checkpoint rewritten by reference.

`format: 1` checkpoints are self-contained; they still load (`selectors.checkpoints`), and a
resumed one is written back in `format: 2` at its first save; `migrate_checkpoint` converts one
without running it. `snapshots_store_batch` moves the snapshots a `format: 2` checkpoint saved
before `CompactionSnapshot` embeds into their stored rows (`services.snapshots`).
"""

from __future__ import annotations

from django.db import transaction

from agentloom.engine import Checkpoint, InstanceFrame
from sessions_app.models import CompactionSnapshot, Run, SessionView
from sessions_app.selectors.checkpoints import pointed_snapshots
from sessions_app.services.journal import JournalWriter, lock_run
from sessions_app.services.snapshots import snapshots_store, stored_frame


def migrate_checkpoint(run: Run) -> bool:
    """Rewrite a `format: 1` checkpoint by reference; return False when there was nothing to do.

    Its records are journaled already; their rows learn their local seqs, and its snapshots'
    references are recorded, in one transaction.
    """
    with transaction.atomic():
        run = lock_run(run.pk, session_id=run.session_id)
        checkpoint = run.checkpoint
        if not isinstance(checkpoint, dict) or checkpoint.get("format", 1) != 1:
            return False
        if not (checkpoint.get("context") or {}).get("records"):
            return False  # legacy: adopted first, when resumed or by adopt_legacy_journal
        frame = InstanceFrame.from_dict(checkpoint)
        JournalWriter(run, lease_owner=None).sync(Checkpoint.of(frame))
    return True


def snapshots_store_batch(*, after: int, limit: int) -> tuple[int, int]:
    """Store the embedded snapshots of up to `limit` runs with an id above `after`.

    Each run's checkpoint then points to its rows, and its views refer to theirs. A run that is
    active is left to its worker, whose next save does the same. One short transaction per run
    (its session's lock, then its own); a run done already is left as it is, so a repeat changes
    nothing. Returns (the last run id looked at, 0 when none was left; runs converted).
    """
    runs = list(
        Run.objects.filter(pk__gt=after, checkpoint__isnull=False)
        .exclude(status__in=Run.ACTIVE_STATUSES)
        .order_by("pk")
        .values_list("pk", "session_id")[:limit]
    )
    converted = 0
    for run_id, session_id in runs:
        with transaction.atomic():
            run = lock_run(run_id, session_id=session_id)
            checkpoint = run.checkpoint
            if run.is_active or not isinstance(checkpoint, dict) or checkpoint.get("format") != 2:
                continue
            stored, fresh = stored_frame(checkpoint, pointed_snapshots(checkpoint))
            if stored is not checkpoint:
                snapshots_store(run_id, session_id, fresh)
                Run.objects.filter(pk=run_id).update(checkpoint=stored)
                converted += 1
            _link_views(run_id, checkpoint["instance"])
    return (runs[-1][0] if runs else 0), converted


def _link_views(run_id: int, instance: str) -> None:
    """Let the run's views saved before snapshots were stored refer to their snapshot's row."""
    for view in SessionView.objects.filter(run_id=run_id, snapshot__isnull=True).only(
        "pk", "snapshot_revision"
    ):
        row = (
            CompactionSnapshot.objects.filter(
                run_id=run_id, instance=instance, revision=view.snapshot_revision
            )
            .values_list("pk", flat=True)
            .first()
        )
        if row is not None:
            SessionView.objects.filter(pk=view.pk).update(snapshot_id=row)
