"""Checkpoints by reference, read: the journal-backed record store and a run's frame.

A `format: 2` checkpoint refers to the run's own journal records (by instance and local seq),
to session records (by seq) and to the inherited history block (a view revision and a seq
range); `JournalStore` resolves them with one indexed query each. `format: 1` checkpoints are
self-contained; they still load (`services.checkpoints` rewrites one by reference).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agentloom.engine import InstanceFrame, Origin, Record, RecordStore, iso_utc
from sessions_app.models import MAIN_INSTANCE, Run, SessionMessage
from sessions_app.selectors.history import history_block
from sessions_app.selectors.journal import journal_messages


class JournalStore(RecordStore):
    """Resolves a run's by-reference frames against the session journal."""

    def __init__(self, run: Run):
        self.run_id = run.pk
        self.session_id = run.session_id
        self._records: dict[str, list[Record]] | None = None

    def records(self, instance: str) -> list[Record]:
        if self._records is None:
            # Every instance of the run at once: one query on (run, instance, local_seq).
            self._records = {}
            rows = (
                SessionMessage.objects.filter(run_id=self.run_id, local_seq__isnull=False)
                .order_by("instance", "local_seq")
                .values_list("instance", "local_seq", "kind", "entry_key", "message", "created_at")
            )
            for name, local_seq, kind, entry_key, message, created_at in rows:
                self._records.setdefault(name, []).append(
                    Record(local_seq, kind, message, entry_key, iso_utc(created_at))
                )
        return list(self._records.get(instance, []))

    def journal(self, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
        return journal_messages(self.session_id, seqs)

    def history(
        self, block: dict[str, Any], *, rendering: int
    ) -> tuple[list[dict[str, Any]], list[Origin]]:
        return history_block(self.session_id, block, rendering=rendering)

    def main_record(
        self,
        *,
        up_to: int,
        seq: int | None = None,
        run: int | None = None,
        local: int | None = None,
    ) -> dict[str, Any] | None:
        rows = SessionMessage.objects.filter(
            session_id=self.session_id, instance=MAIN_INSTANCE, seq__lte=up_to
        )
        if seq is not None:
            rows = rows.filter(seq=seq)
        else:
            rows = rows.filter(run__number=run, local_seq=local)
        return rows.values_list("message", flat=True).first()


def frame_of(run: Run) -> InstanceFrame | None:
    """Return the run's checkpoint as a frame in memory (None before its first save)."""
    if run.checkpoint is None:
        return None
    return InstanceFrame.from_dict(run.checkpoint, store=JournalStore(run))


def full_checkpoint(run: Run) -> dict[str, Any] | None:
    """Return the run's checkpoint as self-contained `format: 1` data, for reading and replay."""
    frame = frame_of(run)
    return frame.to_dict() if frame is not None else None
