"""The history a new run inherits: best compliant view + main-instance records after it.

With a reusable view, loading costs the view's references plus the records after its watermark;
without one, one query and one decryption per main-instance record. A projection point
(`ProjectionPoint`) saved after that view under the run's binding shortens both: projection
resumes from it and reads only the records after its watermark. A point is used only when it
extends exactly the view the reusable-view rule chooses (none when it chooses none), at a
watermark within `as_of`'s limit, so it is never chosen over a compliant view.

Decrypted points are kept in the worker's memory (`_DecryptedPoints`): reading a point from the
database decrypts every record it refers to, once per worker instead of once per run. How the
cache stays safe:

- Key rotation. It holds plaintext, keyed by the point's row, its watermark and a digest of the
  configured field keys (`encryption.keyring_id`). `rotate_encryption_key` re-encrypts rows under
  the new primary key without changing their plaintext, so an entry stays true; a key taken out
  of the fallbacks changes the digest, so nothing read under the old keys is served again (a
  value only that key opened must fail to read, not be answered from memory).
- Deletion and purge. An entry is found only through its point's row, read from the database
  first: a purged session's points are gone (cascade), so its entries are never served again and
  age out of the cache; a soft-deleted session takes no new run. The plaintext stays in that
  worker's memory until then, as any value a worker read does until it is collected.
- A point's row is moved forward, never rewritten at the same watermark, and the journal records
  it refers to are never rewritten, so (row, watermark) names one content.

Records are decrypted here rather than by their field (`stored_message`): the stored text is the
message's compact JSON, so its length is the message's byte size, which the records carry into
the engine (`JournalRecord.size`): a view message shown as recorded is then measured without
being serialised again, in a worker that reads the records for the first time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import BinaryField, Max
from django.db.models.functions import Cast

from agentloom.encryption import decrypt_sized, keyring_id
from agentloom.engine import (
    TOOL_RESULT_VIEW_CHARS,
    ExcerptJudge,
    ImportedHistory,
    JournalRecord,
    Origin,
    ProjectedHistory,
    ProjectionPoint,
    ReusableView,
    block_excerpts,
    block_masks,
    history_judge,
    inherited_plan_set,
    project_history,
    rendering_of,
)
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage, SessionView
from sessions_app.models import ProjectionPoint as PointRow
from sessions_app.selectors.masks import carried_masks
from sessions_app.selectors.views import binding_key, compliant_view, view_content


def main_records_after(
    session: Session, watermark: int, *, up_to: int | None = None
) -> list[JournalRecord]:
    """Return the session's main-instance journal records with watermark < seq <= up_to."""
    if up_to is not None and up_to <= watermark:
        return []  # an empty range: nothing to read
    rows = SessionMessage.objects.filter(session=session, instance=MAIN_INSTANCE, seq__gt=watermark)
    if up_to is not None:
        rows = rows.filter(seq__lte=up_to)
    return list(_journal_records(rows.order_by("seq")))


def stored_message():
    """Return the expression of a journal row's stored message, read without decrypting it
    (`decrypt_sized` decrypts it with its size)."""
    return Cast("message", output_field=BinaryField())


def _journal_records(rows) -> Iterator[JournalRecord]:
    """Yield main-instance journal rows as the engine reads them, decrypted one at a time."""
    rows = rows.values_list(
        "seq", "run__number", "kind", "entry_key", stored_message(), "local_seq"
    )
    # Projected notes name runs by their number in the session ("[run 3 failed: …]"), and
    # references the records by their run's number and local seq (`r3:7`, rendering 5).
    for seq, number, kind, entry_key, stored, local_seq in rows.iterator(chunk_size=2_000):
        message, size = decrypt_sized(stored)
        yield JournalRecord(
            seq=seq,
            run_id=number,
            instance=MAIN_INSTANCE,
            kind=kind,
            message=message,
            entry_key=entry_key,
            local_seq=local_seq,
            size=size,
        )


def imported_history(origin: dict[str, Any] | None, session_id: int) -> ImportedHistory | None:
    """Return the records an imported session brought and where from (None: not imported).

    An import keeps its records' seqs and notes the last one (`upto`); a fork of an imported
    session notes the last copy of one (`imported`). An import made before `upto` was noted
    counts the records of its copied runs.
    """
    origin = import_origin(origin)
    if origin is None:
        return None
    upto = origin.get("upto")
    if not isinstance(upto, int):
        upto = SessionMessage.objects.filter(
            session_id=session_id, run__origin_number__isnull=False
        ).aggregate(top=Max("seq"))["top"]
    if not upto:
        return None
    return ImportedHistory(upto=upto, origin=imported_from(origin))


def import_origin(origin: dict[str, Any] | None) -> dict[str, Any] | None:
    """Return the import a session's history came from: its own, or its original's (a fork)."""
    origin = origin or {}
    if origin.get("kind") == "fork":
        origin = origin.get("imported") or {}
    return origin if origin.get("kind") == "import" else None


def imported_from(origin: dict[str, Any]) -> str:
    """Return where an import came from, as the note names it (the same text every time)."""
    exported = str(origin.get("exported_at") or "")[:10]
    place = f"session {origin.get('session')}"
    if origin.get("agentloom"):
        place += f" (AgentLoom {origin['agentloom']})"
    return f"{place}, exported {exported}" if exported else place


def plan_as_of(session: Session, *, up_to: int | None, after: int = 0) -> str | None:
    """Return the plan the session's main records in (after, up_to] last set (`inherited_plan`).

    Read newest first and only until it is decided. A version without `update_plan` never set
    one (history grants no tool), so its journal is not read at all.
    """
    if not sets_plans(session):
        return None
    found = plan_set_as_of(session, up_to=up_to, after=after)
    return found[1] if found is not None else None


def sets_plans(session: Session) -> bool:
    """Say whether the session's version has `update_plan` (else no record it inherits set one)."""
    return "update_plan" in (session.agent_version.snapshot.get("tools") or [])


def plan_set_as_of(
    session: Session, *, up_to: int | None, after: int = 0
) -> tuple[tuple[int, Any, str], str] | None:
    """`plan_as_of` for any version, with the result that set it (`inherited_plan_set`)."""
    rows = SessionMessage.objects.filter(
        session=session,
        instance=MAIN_INSTANCE,
        kind__in=(SessionMessage.Kind.ASSISTANT, SessionMessage.Kind.TOOL_RESULT),
        seq__gt=after,
    )
    if up_to is not None:
        rows = rows.filter(seq__lte=up_to)
    return inherited_plan_set(_journal_records(rows.order_by("-seq")))


def project_after_view(
    records: list[JournalRecord],
    view: SessionView | None,
    *,
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS,
    judge: ExcerptJudge | None = None,
    excerpts: Mapping[int, int] | None = None,
    rendering: int | None = None,
    point: ProjectionPoint | None = None,
    keep_point: bool = False,
    imported: ImportedHistory | None = None,
    masks: Mapping[int, str] | None = None,
) -> ProjectedHistory:
    """Return `view` (if any) followed by the projection of `records` (those after it).

    `judge` decides which records are shown as excerpts; `excerpts` repeats earlier decisions;
    `rendering` is the version of the rules records are shown with (default: the current one).
    With `point` (saved after `view`), projection resumes from it and `records` are those after
    its watermark. With `keep_point`, the history carries the point after its last record
    (`history.point`). `imported` names an imported session's records (`imported_history`);
    `masks` the results runs masked (`selectors.masks`).
    """
    options = {
        "tool_result_chars": tool_result_chars,
        "judge": judge,
        "excerpts": excerpts,
        "rendering": rendering,
        "point": point,
        "keep_point": keep_point,
        "imported": imported,
        "masks": masks,
    }
    if view is None:
        return project_history(records, **options)
    messages, origins = view_content(view)
    return project_history(
        records,
        view=ReusableView(
            revision=view.revision,
            watermark=view.watermark,
            messages=messages,
            origins=origins,
            user_turns=view.user_turns,
            model_steps=view.model_steps,
            baseline_user_turns=view.baseline_user_turns,
            baseline_model_steps=view.baseline_model_steps,
        ),
        **options,
    )


@dataclass
class InheritedHistory:
    """A new run's history, with what it was projected from."""

    history: ProjectedHistory
    view: SessionView | None
    binding_key: str
    # The saved point projection resumed from (None: from the view, or from the start).
    point_row: PointRow | None

    @property
    def resumed_at(self) -> int:
        """Return the watermark projection resumed from (the point's, else the view's, else 0)."""
        if self.point_row is not None:
            return self.point_row.watermark
        return self.view.watermark if self.view is not None else 0


def history_for_new_run(
    session: Session,
    binding: dict[str, Any],
    *,
    as_of: Run | None = None,
    masks: Mapping[int, str] | None = None,
) -> ProjectedHistory:
    """Return what a new run of `session` inherits under `binding`: the view the reusable-view
    rule chooses (`compliant_view`), then the main-instance records after its watermark, projected;
    with no view, every main-instance record, projected.

    With `as_of`, the session as it was when that run's question was asked (its inherited
    watermark): a question that waited in the queue, or was cancelled and resumed, still never
    sees what came after it. Projection resumes from the point saved after the chosen view, if
    any (see the module docstring); the result is the same. From rendering 7 the results runs
    masked are shown as their stubs: `masks` (seq -> reference) names them, by default those the
    runs' snapshots hold now (`selectors.masks`); a replay passes the ones its run was given.
    """
    return inherited_history(session, binding, as_of=as_of, masks=masks).history


def inherited_history(
    session: Session,
    binding: dict[str, Any],
    *,
    as_of: Run | None = None,
    masks: Mapping[int, str] | None = None,
) -> InheritedHistory:
    """`history_for_new_run`, with the view and the point it was projected from."""
    view = compliant_view(session, binding, as_of=as_of)
    up_to = as_of.inherited_watermark if as_of is not None else None
    key = binding_key(binding)
    row = projection_point_row(session, key, view, up_to=up_to)
    point = point_of(row) if row is not None else None
    after = view.watermark if view is not None else 0
    records = main_records_after(session, point.watermark if point else after, up_to=up_to)
    rules = rendering_of(binding)
    if masks is None and rules.keeps_masks:
        masks = carried_masks(session.pk, after=after, up_to=up_to)
    history = project_after_view(
        records,
        view,
        judge=history_judge(binding),
        rendering=rules.version,
        point=point,
        keep_point=True,
        imported=imported_history(session.origin, session.pk),
        masks=masks,
    )
    if point is not None and not sets_plans(session):
        history.plan = None  # as reading the records after the view would find
    elif point is not None and not history.plan_known:
        _read_plan_after_view(session, history, after=after, up_to=up_to)
    if view is not None and history.plan is None and rules.inherits_plan and sets_plans(session):
        _read_plan_before_view(session, history, view)
    return InheritedHistory(history=history, view=view, binding_key=key, point_row=row)


def _read_plan_after_view(
    session: Session, history: ProjectedHistory, *, after: int, up_to: int | None
) -> None:
    """Read the plan the records after the view set, where the point resumed from left it open
    (see `ProjectionPoint`), and keep it in the point the history carries."""
    found = plan_set_as_of(session, up_to=up_to, after=after)
    history.plan, history.plan_known = (found[1] if found else None), True
    if history.point is not None:
        history.point.plan = found[0] if found else None
        history.point.plan_text = found[1] if found else None
        history.point.plan_known = True


def _read_plan_before_view(session: Session, history: ProjectedHistory, view: SessionView) -> None:
    """Give the history the plan the records up to the view set (no record after it set one),
    read once per view: the point the history carries keeps it for the next load."""
    point = history.point
    if point is not None and point.view_plan_known:
        before = point.view_plan
    else:
        found = plan_set_as_of(session, up_to=view.watermark)
        before = (found[0][0], found[1]) if found is not None else None
        if point is not None:
            point.view_plan, point.view_plan_known = before, True
    history.plan = before[1] if before is not None else None


def projection_point_row(
    session: Session, key: str, view: SessionView | None, *, up_to: int | None
) -> PointRow | None:
    """Return the point saved after exactly `view` under the binding `key` at the highest
    watermark within `up_to`, without its state (clear columns only), or None."""
    if up_to is not None and up_to < 1:
        return None  # a point stands after at least one record (seqs start at 1)
    rows = PointRow.objects.filter(session=session, binding_key=key, view=view)
    if up_to is not None:
        rows = rows.filter(watermark__lte=up_to)
    return rows.defer("state").order_by("-watermark", "-pk").first()


def point_of(row: PointRow) -> ProjectionPoint:
    """Return the point `row` stores, its references read from the journal (or the cache)."""
    cached = DECRYPTED_POINTS.get(row.pk, row.watermark)
    if cached is not None:
        return cached
    stored = PointRow.objects.values_list("state", flat=True).get(pk=row.pk)
    body, inline = stored["body"], stored["inline"]
    seqs = ProjectionPoint.references(body)
    records: dict[int, dict[str, Any]] = {}
    sizes: dict[int, int | None] = {}
    if seqs:
        # One range query: a point refers to most main records up to its watermark.
        rows = SessionMessage.objects.filter(
            session_id=row.session_id,
            instance=MAIN_INSTANCE,
            seq__gte=min(seqs),
            seq__lte=max(seqs),
        ).values_list("seq", stored_message())
        for seq, stored in rows:
            records[seq], sizes[seq] = decrypt_sized(stored)
    point = ProjectionPoint.from_stored(body, inline, records, sizes)
    DECRYPTED_POINTS.put(row.pk, row.watermark, point)
    return point


class _DecryptedPoints:
    """The points a worker has read, decrypted, by (row, watermark, field keys); an LRU bounded
    by the messages it holds. See the module docstring for why this is safe."""

    def __init__(self, max_messages: int = 400_000):
        self.max_messages = max_messages
        self._points: OrderedDict[tuple[int, int, str], ProjectionPoint] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(pk: int, watermark: int) -> tuple[int, int, str]:
        """Return the key of the point row `pk` at `watermark`, read under the current keys."""
        return (pk, watermark, keyring_id())

    def get(self, pk: int, watermark: int) -> ProjectionPoint | None:
        key = self.key(pk, watermark)
        with self._lock:
            point = self._points.get(key)
            if point is not None:
                self._points.move_to_end(key)
            return point

    def put(self, pk: int, watermark: int, point: ProjectionPoint) -> None:
        key = self.key(pk, watermark)
        with self._lock:
            old = self._points.pop(key, None)
            if old is not None:
                self._held -= len(old.messages)
            self._points[key] = point
            self._held += len(point.messages)
            while self._points and self._held > self.max_messages:
                _, evicted = self._points.popitem(last=False)
                self._held -= len(evicted.messages)

    def clear(self) -> None:
        with self._lock:
            self._points.clear()
            self._held = 0


DECRYPTED_POINTS = _DecryptedPoints()


def history_block(
    session_id: int, block: dict[str, Any], *, rendering: int
) -> tuple[list[dict[str, Any]], list[Origin]]:
    """Rebuild the inherited history a checkpoint names: the same view, the same records and
    the checkpoint's rendering version."""
    view = None
    if block.get("view") is not None:
        view = SessionView.objects.get(session_id=session_id, revision=block["view"])
    origin = Session.objects.filter(pk=session_id).values_list("origin", flat=True).first()
    session = Session(pk=session_id, origin=origin or {})
    records = main_records_after(session, block["after"], up_to=block["upto"])
    history = project_after_view(
        records,
        view,
        tool_result_chars=block["cap"],
        excerpts=block_excerpts(block),
        masks=block_masks(block),
        rendering=rendering,
        imported=imported_history(session.origin, session_id),
    )
    return history.messages, history.origins
