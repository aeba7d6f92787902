"""The history a new run inherits: best compliant view + main-instance records after it.

With a reusable view, loading costs the view's references plus the records after its watermark;
without one, one query and one decryption per main-instance record.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from agentloom.engine import (
    TOOL_RESULT_VIEW_CHARS,
    ExcerptJudge,
    JournalRecord,
    Origin,
    ProjectedHistory,
    ReusableView,
    block_excerpts,
    history_judge,
    inherited_plan,
    project_history,
    rendering_of,
)
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage, SessionView
from sessions_app.selectors.views import compliant_view, view_content


def main_records_after(
    session: Session, watermark: int, *, up_to: int | None = None
) -> list[JournalRecord]:
    """Return the session's main-instance journal records with watermark < seq <= up_to."""
    rows = SessionMessage.objects.filter(session=session, instance=MAIN_INSTANCE, seq__gt=watermark)
    if up_to is not None:
        rows = rows.filter(seq__lte=up_to)
    return list(_journal_records(rows.order_by("seq")))


def _journal_records(rows) -> Iterator[JournalRecord]:
    """Yield main-instance journal rows as the engine reads them, decrypted one at a time."""
    rows = rows.values_list("seq", "run__number", "kind", "entry_key", "message")
    # Projected notes name runs by their number in the session ("[run 3 failed: …]").
    for seq, number, kind, entry_key, message in rows.iterator(chunk_size=2_000):
        yield JournalRecord(
            seq=seq,
            run_id=number,
            instance=MAIN_INSTANCE,
            kind=kind,
            message=message,
            entry_key=entry_key,
        )


def plan_as_of(session: Session, *, up_to: int | None) -> str | None:
    """Return the plan the session's main records up to `up_to` last set (`inherited_plan`).

    Read newest first and only until it is decided. A version without `update_plan` never set
    one (history grants no tool), so its journal is not read at all.
    """
    if "update_plan" not in (session.agent_version.snapshot.get("tools") or []):
        return None
    rows = SessionMessage.objects.filter(
        session=session,
        instance=MAIN_INSTANCE,
        kind__in=(SessionMessage.Kind.ASSISTANT, SessionMessage.Kind.TOOL_RESULT),
    )
    if up_to is not None:
        rows = rows.filter(seq__lte=up_to)
    return inherited_plan(_journal_records(rows.order_by("-seq")))


def project_after_view(
    records: list[JournalRecord],
    view: SessionView | None,
    *,
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS,
    judge: ExcerptJudge | None = None,
    excerpts: Mapping[int, int] | None = None,
    rendering: int | None = None,
) -> ProjectedHistory:
    """Return `view` (if any) followed by the projection of `records` (those after it).

    `judge` decides which records are shown as excerpts; `excerpts` repeats earlier decisions;
    `rendering` is the version of the rules records are shown with (default: the current one).
    """
    options = {
        "tool_result_chars": tool_result_chars,
        "judge": judge,
        "excerpts": excerpts,
        "rendering": rendering,
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


def history_for_new_run(
    session: Session, binding: dict[str, Any], *, as_of: Run | None = None
) -> ProjectedHistory:
    """Return what a new run of `session` inherits under `binding`: the view the reusable-view
    rule chooses (`compliant_view`), then the main-instance records after its watermark, projected;
    with no view, every main-instance record, projected.

    With `as_of`, the session as it was when that run's question was asked (its inherited
    watermark): a question that waited in the queue, or was cancelled and resumed, still never
    sees what came after it.
    """
    view = compliant_view(session, binding, as_of=as_of)
    up_to = as_of.inherited_watermark if as_of is not None else None
    records = main_records_after(session, view.watermark if view else 0, up_to=up_to)
    history = project_after_view(
        records, view, judge=history_judge(binding), rendering=rendering_of(binding).version
    )
    if view is not None and history.plan is None and rendering_of(binding).inherits_plan:
        # No record after the view set a plan: one before it may have (a view holds none).
        history.plan = plan_as_of(session, up_to=view.watermark)
    return history


def history_block(
    session_id: int, block: dict[str, Any], *, rendering: int
) -> tuple[list[dict[str, Any]], list[Origin]]:
    """Rebuild the inherited history a checkpoint names: the same view, the same records and
    the checkpoint's rendering version."""
    view = None
    if block.get("view") is not None:
        view = SessionView.objects.get(session_id=session_id, revision=block["view"])
    session = Session(pk=session_id)
    records = main_records_after(session, block["after"], up_to=block["upto"])
    history = project_after_view(
        records,
        view,
        tool_result_chars=block["cap"],
        excerpts=block_excerpts(block),
        rendering=rendering,
    )
    return history.messages, history.origins
