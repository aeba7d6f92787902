"""Checkpoints by reference, read: the journal-backed record store and a run's frame.

A `format: 2` checkpoint refers to the run's own journal records (by instance and local seq),
to session records (by seq) and to the inherited history block (a view revision and a seq
range); `JournalStore` resolves them with one indexed query each. `format: 1` checkpoints are
self-contained; they still load (`services.checkpoints` rewrites one by reference).

A checkpoint's compaction snapshots are stored once, apart (`CompactionSnapshot`): the stored
checkpoint names each by a pointer (`SNAPSHOT_POINTER`) and `run_checkpoint` reads them back
into it; a checkpoint saved before embeds them, and reads as it is. A run that succeeded keeps
a slim checkpoint (`services.journal.finished_checkpoint`): without the state only a resume
reads, without its candidate answer (the run's `answer`) and its compaction log rows without
the sources their snapshots hold, which `run_checkpoint` gives them back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from agentloom.engine import (
    Hit,
    InstanceFrame,
    Origin,
    Record,
    RecordStore,
    SearchQuery,
    iso_utc,
)
from sessions_app.models import MAIN_INSTANCE, CompactionSnapshot, Run, SessionMessage
from sessions_app.selectors.history import history_block
from sessions_app.selectors.journal import journal_messages
from sessions_app.selectors.search import search_journal
from sessions_app.selectors.stored_messages import snapshots_read


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

    def search(self, query: SearchQuery, *, up_to: int) -> list[Hit]:
        return search_journal(self.session_id, query, up_to=up_to)


# The key of a snapshot pointer: `{"revision": r, "stored": true}` stands for the snapshot
# `(run, instance, r)` stored in `CompactionSnapshot`.
SNAPSHOT_POINTER = "stored"


def snapshot_frames(frame: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield a stored frame and every child frame inside it (depth first)."""
    yield frame
    for child in ((frame.get("state") or {}).get("children") or {}).values():
        if isinstance(child, dict):
            yield from snapshot_frames(child)


def pointed_snapshots(checkpoint: dict[str, Any] | None) -> set[tuple[str, int]]:
    """Return the (instance, revision) of every snapshot a stored checkpoint points to."""
    if not isinstance(checkpoint, dict):
        return set()
    return {
        (frame.get("instance"), snapshot["revision"])
        for frame in snapshot_frames(checkpoint)
        for snapshot in (frame.get("context") or {}).get("compactions") or []
        if snapshot.get(SNAPSHOT_POINTER)
    }


def with_snapshots(
    frame: dict[str, Any], stored: dict[tuple[str, int], dict[str, Any]]
) -> dict[str, Any]:
    """Return `frame` with each snapshot pointer replaced by the snapshot `stored` holds."""
    context = frame.get("context") or {}
    snapshots = context.get("compactions") or []
    if any(snapshot.get(SNAPSHOT_POINTER) for snapshot in snapshots):
        whole = []
        for snapshot in snapshots:
            if snapshot.get(SNAPSHOT_POINTER):
                key = (frame.get("instance"), snapshot["revision"])
                if key not in stored:
                    raise CompactionSnapshot.DoesNotExist(
                        f"the checkpoint points to snapshot r{key[1]} of {key[0]}, which is "
                        "not stored"
                    )
                snapshot = stored[key]
            whole.append(snapshot)
        frame = {**frame, "context": {**context, "compactions": whole}}
    state = frame.get("state") or {}
    children = state.get("children") or {}
    if children:
        read = {name: with_snapshots(child, stored) for name, child in children.items()}
        frame = {**frame, "state": {**state, "children": read}}
    return frame


def run_checkpoint(run: Run) -> dict[str, Any] | None:
    """Return the run's stored checkpoint with its snapshots read back (None before its first
    save); one query, only when it points to any, and one for the messages they store once."""
    checkpoint = with_answer(run.checkpoint, run)
    if not pointed_snapshots(checkpoint):
        return checkpoint
    stored = {
        (instance, revision): snapshot
        for instance, revision, snapshot in CompactionSnapshot.objects.filter(
            run_id=run.pk
        ).values_list("instance", "revision", "snapshot")
    }
    whole = with_snapshots(checkpoint, snapshots_read(run.session_id, stored))
    return with_sources(whole)


def with_answer(checkpoint: dict[str, Any] | None, run: Run) -> dict[str, Any] | None:
    """Return `checkpoint` with the candidate answer a succeeded run's checkpoint leaves out
    (`services.journal.finished_checkpoint`): the run's `answer`, written by the same save."""
    if not isinstance(checkpoint, dict) or run.status != Run.Status.SUCCEEDED:
        return checkpoint
    state = checkpoint.get("state")
    if not isinstance(state, dict) or "candidate_answer" in state or run.answer is None:
        return checkpoint
    return {**checkpoint, "state": {**state, "candidate_answer": run.answer}}


def with_sources(frame: dict[str, Any]) -> dict[str, Any]:
    """Return `frame` with each compaction log row that leaves out its sources (a succeeded
    run's checkpoint: `services.journal.finished_checkpoint`) given its snapshot's."""
    state = frame.get("state") or {}
    log = state.get("compaction_log") or []
    sources = {
        snapshot.get("revision"): snapshot["sources"]
        for snapshot in (frame.get("context") or {}).get("compactions") or []
        if "sources" in snapshot
    }
    if not any(isinstance(row, dict) and "sources" not in row for row in log) or not sources:
        return frame
    read = [
        {**row, "sources": sources[row.get("revision")]}
        if isinstance(row, dict) and "sources" not in row and row.get("revision") in sources
        else row
        for row in log
    ]
    return {**frame, "state": {**state, "compaction_log": read}}


def frame_of(run: Run) -> InstanceFrame | None:
    """Return the run's checkpoint as a frame in memory (None before its first save)."""
    checkpoint = run_checkpoint(run)
    if checkpoint is None:
        return None
    return InstanceFrame.from_dict(checkpoint, store=JournalStore(run))


def full_checkpoint(run: Run) -> dict[str, Any] | None:
    """Return the run's checkpoint as self-contained `format: 1` data, for reading and replay."""
    frame = frame_of(run)
    return frame.to_dict() if frame is not None else None
