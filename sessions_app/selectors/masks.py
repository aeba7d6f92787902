"""The tool results runs masked, which a new run's projection keeps masked (rendering 7).

A compaction that masks replaces tool results with one-line stubs naming a reference
(`r<run>:<seq>`, or `s:<seq>` for an inherited record). Where the reusable-view rule saves that
view, the next run starts from it; where it refuses (interleaved runs, pending tools, queued
supplements, a failed attempt inside the covered range), the next run starts from an older view
or none and projects the journal after it, and without these masks it would show the results
whole again (the older view's too), rewrite the prompt from the first of them and mask again.
So the masks are read back from where they already live, the runs' stored compaction snapshots
(a stub's entry keeps its reference), and given to projection; nothing else stores them, and
they go with their runs and sessions. The journal itself is never changed.

The rule of what projection does with them is `agentloom.engine._projection` (rendering 7).
"""

from __future__ import annotations

from typing import Any

from sessions_app.models import MAIN_INSTANCE, CompactionSnapshot, SessionMessage


def carried_masks(session_id: int, *, after: int, up_to: int | None = None) -> dict[int, str]:
    """Return the main records up to `up_to` that a run with records after `after` (the view a
    new run starts from) masked: seq -> the reference its stub named (the newest snapshot's,
    where two runs masked one record).

    A masking the view already shows was made by a run before it, which the view's own run
    projected; so only the runs after the view are read, and their stubs are applied to the
    view's messages and to the records after it.
    """
    if up_to is not None and up_to <= 0:
        return {}  # asked before anything was journaled: nothing to mask
    records = SessionMessage.objects.filter(
        session_id=session_id, instance=MAIN_INSTANCE, seq__gt=after
    )
    # One statement: the snapshots of the runs with records after the view.
    snapshots = CompactionSnapshot.objects.filter(
        run_id__in=records.values("run_id"), instance=MAIN_INSTANCE
    ).order_by("pk")
    masks: dict[int, str] = {}
    for run_id, snapshot in snapshots.values_list("run_id", "snapshot"):
        masks.update(_masked_in(run_id, snapshot.get("view") or []))
    return {seq: ref for seq, ref in masks.items() if up_to is None or seq <= up_to}


def _masked_in(run_id: int, entries: list[dict[str, Any]]) -> dict[int, str]:
    """Return the session seqs a snapshot's view entries show masked, with their references."""
    found: dict[int, str] = {}
    own: dict[int, str] = {}
    for entry in entries:
        if "mask" not in entry:
            continue
        if "s" in entry:
            found[entry["s"]] = entry["ref"]
        elif "own" in entry:
            first, last = entry["own"]
            own.update((local, entry["ref"]) for local in range(first, last + 1))
    if own:
        rows = SessionMessage.objects.filter(
            run_id=run_id, instance=MAIN_INSTANCE, local_seq__in=list(own)
        ).values_list("local_seq", "seq")
        found.update((seq, own[local]) for local, seq in rows)
    return found
