"""Reusable views: the one home of the rule that says which view a new run may reuse.

The observed-prefix rule: a run may save a compaction snapshot as a
reusable view only if its inherited watermark plus its own main-instance records up to the
snapshot's `covered_seq` form a contiguous prefix of the session's main-instance records, and only
with no pending tool calls, no queued supplements and no terminal records outside the runtime
view. The view then stands for the session prefix up to its `watermark`; a new run reuses the
highest-watermark view saved under a binding equal to its own that nobody has revoked.

Revocation reaches derived views: a view's summary is made from the view its run started from
(the run's own previous view, else the view it inherited), recorded as `derived_from`. A view
whose chain of `derived_from` holds a revoked view is revoked by derivation and never chosen
either; a new run falls back to the newest view with a clean chain, or to full projection. The
chain is read when a view is chosen, so a view saved after its ancestor was revoked is never
chosen either.

Views are stored by reference (`SessionView.entries`): the handoff summary and other messages
that exist nowhere else are stored encrypted (a large one, the summary, once per session:
`services.stored_messages`), everything else as references to journal records.
The compaction snapshot a view is saved from holds `JournalReference` rows (one per run of
consecutive records), written once, so the database keeps what the snapshot and the view refer
to; a view goes with its run, and so do they. The view refers to its snapshot's stored row
(`SessionView.snapshot`), which is kept while the view exists. A compaction that only masked
saves no view before compaction version 5; from version 5 it saves one, so the runs after keep
its stubs where the view rule allows (a new run starting from it never shows them whole again).
Choosing a view reads clear index columns only; only the chosen view is decrypted. The reads
that choose by this rule (`compliant_view`, `view_derivations`) are in `selectors.views`; saving
and revoking a view, and turning old references into ranges, are here.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agentloom.engine import LARGE_KEYS, as_ranges, compaction_of, union_ranges
from agentloom.errors import Conflict, NotFound
from agentloom.spaces.selectors import space_role
from sessions_app.models import (
    MAIN_INSTANCE,
    CompactionSnapshot,
    JournalReference,
    RunSupplement,
    Session,
    SessionMessage,
    SessionView,
)
from sessions_app.selectors.views import binding_key, referenced_seqs
from sessions_app.services.stored_messages import stored_once


def session_refs(
    *, run_id: int, instance: str, entries: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return `entries` with the run's own-record ranges turned into session references.

    Returns (entries, inline messages): each entry is `{"s": seq, "as": …}` or `{"i": n}`.
    """
    wanted = [(start, end) for entry in entries if "own" in entry for start, end in [entry["own"]]]
    rows: dict[int, tuple[int, str]] = {}
    if wanted:
        low = min(start for start, _ in wanted)
        high = max(end for _, end in wanted)
        rows = {
            local: (seq, kind)
            for local, seq, kind in SessionMessage.objects.filter(
                run_id=run_id, instance=instance, local_seq__gte=low, local_seq__lte=high
            ).values_list("local_seq", "seq", "kind")
        }
    refs: list[dict[str, Any]] = []
    inline: list[dict[str, Any]] = []
    for entry in entries:
        if "m" in entry:
            # A summary keeps the session ranges it stands for (`src`), so a later summary of it
            # covers them too.
            refs.append({"i": len(inline), **({"src": entry["src"]} if "src" in entry else {})})
            inline.append(entry["m"])
        elif "own" in entry:
            start, end = entry["own"]
            for local in range(start, end + 1):
                seq, kind = rows[local]
                if kind == SessionMessage.Kind.STATUS:
                    continue
                ref: dict[str, Any] = {"s": seq, "as": "own"}
                if kind == SessionMessage.Kind.TOOL_RESULT and "cap" in entry:
                    ref["cap"] = entry["cap"]
                # Excerpts and masks keep the run reference they show (r<run>:<seq>).
                ref.update((key, entry[key]) for key in LARGE_KEYS if key in entry)
                refs.append(ref)
        else:
            refs.append(dict(entry))
    return refs, inline


def _with_summary_sources(
    run_id: int, session_id: int, instance: str, snapshot: dict[str, Any]
) -> list[dict[str, Any]]:
    """Return the snapshot's view entries, its summary marked with the session seqs it replaced.

    The snapshot names them as the run's own local seqs and session seqs (transitively: what
    the summaries it summarised stood for included); a view holds them as session ranges joined
    across status records, so a summary of a long session holds a range or two, not one per turn.
    """
    sources = snapshot.get("sources") or {}
    session = [list(pair) for pair in sources.get("session") or []]
    own = {seq for first, last in sources.get("own") or [] for seq in range(first, last + 1)}
    if own:
        session.extend(
            [seq, seq]
            for seq in SessionMessage.objects.filter(
                run_id=run_id, instance=instance, local_seq__in=own
            ).values_list("seq", flat=True)
        )
    if not session:
        return snapshot["view"]
    ranges = across_status(session_id, union_ranges(session))
    return [
        {**entry, "src": ranges} if "m" in entry and "summary" in entry else entry
        for entry in snapshot["view"]
    ]


def _without_system_head(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A new run brings its own system prompt, so a reusable view starts after it.
    start = 0
    while start < len(entries) and (entries[start].get("m") or {}).get("role") == "system":
        start += 1
    return entries[start:]


def reference_rows(session_id: int, refs: list[dict[str, Any]], **referrer: Any) -> None:
    """Insert one `JournalReference` per run of consecutive journal records in `refs`.

    `referrer` is the run's compaction snapshot (`run_id`, `snapshot_revision`).
    """
    ranges = reference_ranges(session_id, {ref["s"] for ref in refs if "s" in ref})
    if not ranges:
        return
    ends = {seq for first, last in ranges for seq in (first, last)}
    ids = dict(
        SessionMessage.objects.filter(session_id=session_id, seq__in=ends).values_list("seq", "pk")
    )
    JournalReference.objects.bulk_create(
        [
            JournalReference(message_id=ids[first], last_id=ids[last], **referrer)
            for first, last in ranges
        ]
    )


def reference_ranges(session_id: int, seqs: set[int]) -> list[list[int]]:
    """Return `seqs` as the inclusive ranges their references cover (one query)."""
    return across_status(session_id, as_ranges(seqs))


def across_status(session_id: int, ranges: list[list[int]]) -> list[list[int]]:
    """Return sorted, disjoint `ranges` joined across every gap of status records only (one
    query, none for a single range).

    No view shows a run's status, so a range that runs over one stands for the same records;
    without this every turn of a session would start a range of its own.
    """
    if len(ranges) < 2:
        return ranges
    statuses = set(
        SessionMessage.objects.filter(
            session_id=session_id,
            seq__gt=ranges[0][1],
            seq__lt=ranges[-1][0],
            kind=SessionMessage.Kind.STATUS,
        ).values_list("seq", flat=True)
    )
    joined = [list(ranges[0])]
    for first, last in ranges[1:]:
        if all(seq in statuses for seq in range(joined[-1][1] + 1, first)):
            joined[-1][1] = last
        else:
            joined.append([first, last])
    return joined


def view_refusal_reason(
    *,
    run_id: int,
    session_id: int,
    inherited_watermark: int,
    frame: dict[str, Any],
    snapshot: dict[str, Any],
) -> tuple[str | None, int | None]:
    """Return (reason, watermark): why `snapshot` may not become a reusable view, or (None, W)."""
    state = frame.get("state") or {}
    if state.get("pending_tool_calls"):
        return "pending tool calls", None
    if _supplements_queued(run_id, state):
        return "supplements are still queued", None
    covered = snapshot.get("covered_seq") or 0
    if not covered:
        return "the view covers no record of this run", None
    rows = SessionMessage.objects.filter(
        run_id=run_id, instance=MAIN_INSTANCE, local_seq__gte=1, local_seq__lte=covered
    )
    if rows.count() != covered:
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
    return None, watermark


def _supplements_queued(run_id: int, state: dict[str, Any]) -> bool:
    """True while a supplement waits: queued in the frame, or accepted and not journaled yet."""
    if state.get("queued_supplements"):
        return True
    return RunSupplement.objects.filter(run_id=run_id, consumed_at__isnull=True).exists()


def snapshot_save(
    *, run_id: int, session_id: int, inherited_watermark: int, frame: dict[str, Any]
) -> tuple[int | None, str | None]:
    """Record the references of the frame's newest snapshot; save it as a view when allowed.

    The references are written once, under the run's snapshot; a view saved from the snapshot
    is kept by them. A snapshot whose compaction only masked is not saved as a view before
    compaction version 5. Returns
    (view revision, refusal reason). Call inside the save's transaction, after the
    snapshot's records are journaled.
    """
    snapshots = (frame.get("context") or {}).get("compactions") or []
    if not snapshots or "view" not in snapshots[-1]:
        return None, None
    snapshot = snapshots[-1]
    revision = snapshot["revision"]
    if SessionView.objects.filter(run_id=run_id, snapshot_revision=revision).exists():
        return None, None
    entries = _with_summary_sources(run_id, session_id, frame["instance"], snapshot)
    refs, inline = session_refs(
        run_id=run_id, instance=frame["instance"], entries=_without_system_head(entries)
    )
    if not JournalReference.objects.filter(run_id=run_id, snapshot_revision=revision).exists():
        reference_rows(session_id, refs, run_id=run_id, snapshot_revision=revision)
    binding = frame.get("binding") or {}
    if _only_masked(snapshot) and not compaction_of(binding).keeps_masks:
        return None, "the compaction only masked tool results (no summary to reuse)"
    reason, watermark = view_refusal_reason(
        run_id=run_id,
        session_id=session_id,
        inherited_watermark=inherited_watermark,
        frame=frame,
        snapshot=snapshot,
    )
    if reason is not None:
        return None, reason
    counters = snapshot["counters"]
    view = SessionView.objects.create(
        derived_from=_derived_from(run_id, session_id, frame),
        session_id=session_id,
        revision=(
            SessionView.objects.filter(session_id=session_id).aggregate(top=Max("revision"))["top"]
            or 0
        )
        + 1,
        watermark=watermark,
        messages=stored_once(session_id, inline),
        entries=refs,
        user_turns=counters["user_turns"],
        model_steps=counters["model_steps"],
        baseline_user_turns=counters["baseline_user_turns"],
        baseline_model_steps=counters["baseline_model_steps"],
        run_id=run_id,
        binding=binding,
        binding_key=binding_key(binding),
        snapshot_revision=revision,
        # Stored by the same save, before this (`services.snapshots`).
        snapshot_id=CompactionSnapshot.objects.filter(
            run_id=run_id, instance=frame["instance"], revision=revision
        )
        .values_list("pk", flat=True)
        .first(),
    )
    # The view writes no references of its own: its run's snapshot holds them (see above).
    return view.revision, None


def _only_masked(snapshot: dict[str, Any]) -> bool:
    """True when the snapshot's compaction only masked tool results (no summary, no call).

    Before compaction version 5 such a compaction is not saved as a reusable view: a new run
    that projects the same records masks them again without a model call. From version 5 it is
    (`Compaction.keeps_masks`): a new run projecting the records would show them whole again,
    so its first request would rewrite the prompt from the first stub on, and its next masking
    would choose its own batch.
    """
    return (snapshot.get("metrics") or {}).get("reason") == "masked"


def _derived_from(run_id: int, session_id: int, frame: dict[str, Any]) -> SessionView | None:
    """Return the view a new snapshot of the run is made from: its last, else the inherited one."""
    previous = SessionView.objects.filter(run_id=run_id).only("pk").order_by("-revision").first()
    if previous is not None:
        return previous
    history = ((frame.get("context") or {}).get("inherited") or {}).get("history") or {}
    if history.get("view") is None:
        return None
    return (
        SessionView.objects.filter(session_id=session_id, revision=history["view"])
        .only("pk")
        .first()
    )


@transaction.atomic(durable=True)
def view_revoke(*, user, session: Session, revision: Any) -> SessionView:
    """Revoke a reusable view: later new runs use neither it nor any view derived from it.

    The row stays, on record. The session's creator or an admin of its space may; a run already
    started keeps the history it was given. Revoking twice is refused (409).
    """
    if session.created_by_id != user.pk and space_role(user, session.space_id) != "admin":
        raise NotFound("Not found.")
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise NotFound("Not found.")
    view = (
        SessionView.objects.select_for_update()
        .defer("messages")
        .filter(session=session, revision=revision)
        .first()
    )
    if view is None:
        raise NotFound("Not found.")
    if view.revoked_at is not None:
        raise Conflict(f"View r{revision} was already revoked.")
    view.revoked_at = timezone.now()
    view.revoked_by = user
    view.save(update_fields=["revoked_at", "revoked_by"])
    return view


def references_migrate_batch(limit: int) -> int:
    """Turn up to `limit` per-record references of one referrer into ranges; return how many.

    Rows written before ranges (`last` null) are taken referrer by referrer, snapshots first, in
    seq order: consecutive records become one range row (extending the referrer's range that
    ends just before, so batch boundaries leave no seam), and a view's rows that its run's
    snapshot already keeps are dropped (references written once). One short transaction per
    batch, locking only the reference rows it converts (not the journal records they name, which
    new references of a live run take a key-share lock on): an interrupted migration resumes
    where it stopped.
    Returns 0 when nothing is left.
    """
    with transaction.atomic():
        old = JournalReference.objects.filter(last__isnull=True)
        head = (
            old.filter(view__isnull=True).order_by("pk").first()
            or old.order_by("pk").select_related("view").first()
        )
        if head is None:
            return 0
        if head.view_id is None:
            referrer: dict[str, Any] = {
                "run_id": head.run_id,
                "snapshot_revision": head.snapshot_revision,
            }
            kept: set[int] = set()
        else:
            referrer = {"view_id": head.view_id}
            kept = referenced_seqs(
                JournalReference.objects.filter(
                    run_id=head.view.run_id, snapshot_revision=head.view.snapshot_revision
                )
            )
        rows = list(
            old.filter(**referrer)
            .select_for_update(of=("self",))
            .order_by("message__seq", "pk")
            .values_list("pk", "message_id", "message__seq", "message__session_id")[:limit]
        )
        ids = {seq: pk for _, pk, seq, _ in rows}
        if rows:
            session_id = rows[0][3]
            ranges = reference_ranges(session_id, set(ids) - kept)
            if ranges:
                _extend_or_add(session_id, referrer, ranges, ids)
        JournalReference.objects.filter(pk__in=[row[0] for row in rows]).delete()
    return len(rows)


def _extend_or_add(
    session_id: int, referrer: dict[str, Any], ranges: list[list[int]], ids: dict[int, int]
) -> None:
    """Write `ranges` for `referrer`, the first joined to the referrer's range just before it."""
    first, last = ranges[0]
    before = (
        JournalReference.objects.filter(**referrer, last__seq__lt=first)
        .filter(last__session_id=session_id)
        .order_by("-last__seq")
        .values_list("pk", "last__seq")
        .first()
    )
    if before is not None and not (
        SessionMessage.objects.filter(session_id=session_id, seq__gt=before[1], seq__lt=first)
        .exclude(kind=SessionMessage.Kind.STATUS)
        .exists()
    ):
        JournalReference.objects.filter(pk=before[0]).update(last_id=ids[last])
        ranges = ranges[1:]
    JournalReference.objects.bulk_create(
        [JournalReference(message_id=ids[a], last_id=ids[b], **referrer) for a, b in ranges]
    )
