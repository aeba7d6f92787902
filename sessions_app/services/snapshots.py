"""Compaction snapshots stored once: a checkpoint points to them instead of embedding them.

A save stores each snapshot of its frame (and of its children's frames) that is not stored yet
as one `CompactionSnapshot` row, in the save's transaction, and the checkpoint it writes names
every snapshot by a pointer (`selectors.checkpoints.SNAPSHOT_POINTER`). So a save rewrites no
snapshot, and a run that masks again at its start stores that snapshot once instead of in each
of its checkpoints. `selectors.checkpoints.run_checkpoint` reads them back. A checkpoint saved
before embeds its snapshots: it still reads, its run's next save stores them, and
`snapshots_store_batch` (`manage.py store_snapshots`) moves those of runs that will not save
again.
"""

from __future__ import annotations

from typing import Any

from sessions_app.models import CompactionSnapshot
from sessions_app.selectors.checkpoints import SNAPSHOT_POINTER
from sessions_app.services.stored_messages import snapshot_stored_once

SnapshotKey = tuple[str, int]


def stored_frame(
    frame: dict[str, Any], stored: set[SnapshotKey]
) -> tuple[dict[str, Any], list[tuple[SnapshotKey, dict[str, Any]]]]:
    """Return `frame` as it is stored, and the snapshots to store with it.

    Every snapshot becomes a pointer; the ones not in `stored` (the (instance, revision) already
    stored for the run) are returned to be stored. `frame` is not changed: a frame that holds no
    snapshot is returned as it is.
    """
    fresh: list[tuple[SnapshotKey, dict[str, Any]]] = []

    def walk(part: dict[str, Any]) -> dict[str, Any]:
        context = part.get("context") or {}
        snapshots = context.get("compactions") or []
        if any(not snapshot.get(SNAPSHOT_POINTER) for snapshot in snapshots):
            pointers = []
            for snapshot in snapshots:
                if not snapshot.get(SNAPSHOT_POINTER):
                    key = (part["instance"], snapshot["revision"])
                    if key not in stored:
                        fresh.append((key, snapshot))
                    snapshot = {"revision": snapshot["revision"], SNAPSHOT_POINTER: True}
                pointers.append(snapshot)
            part = {**part, "context": {**context, "compactions": pointers}}
        state = part.get("state") or {}
        children = state.get("children") or {}
        if children:
            kept = {name: walk(child) for name, child in children.items()}
            if any(kept[name] is not children[name] for name in children):
                part = {**part, "state": {**state, "children": kept}}
        return part

    return walk(frame), fresh


def snapshots_store(
    run_id: int, session_id: int, snapshots: list[tuple[SnapshotKey, dict[str, Any]]]
) -> None:
    """Store `snapshots` of run `run_id` (one statement); one stored already stays as it is.

    A large inline message of a snapshot's view (its handoff summary) is stored once for the
    session and named by a marker (`services.stored_messages`).
    """
    if snapshots:
        CompactionSnapshot.objects.bulk_create(
            [
                CompactionSnapshot(
                    run_id=run_id,
                    instance=instance,
                    revision=revision,
                    snapshot=snapshot_stored_once(session_id, snapshot),
                )
                for (instance, revision), snapshot in snapshots
            ],
            ignore_conflicts=True,
        )
