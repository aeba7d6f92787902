"""The history a new run inherits: best compliant view + main-instance records after it."""

from __future__ import annotations

from typing import Any

from agentloom.engine.projection import JournalRecord, ProjectedHistory, project_history
from sessions_app.models import MAIN_INSTANCE, Session, SessionMessage, SessionView


def compliant_view(session: Session, binding: dict[str, Any]) -> SessionView | None:
    """Return the highest-watermark reusable view saved under `binding`, or None."""
    for view in SessionView.objects.filter(session=session).order_by("-watermark", "-revision"):
        if view.binding == binding:
            return view
    return None


def main_records_after(session: Session, watermark: int) -> list[JournalRecord]:
    """Return the session's main-instance journal records with seq > watermark, in order."""
    rows = (
        SessionMessage.objects.filter(session=session, instance=MAIN_INSTANCE, seq__gt=watermark)
        .order_by("seq")
        .values_list("seq", "run__number", "kind", "message")
    )
    # Projected notes name runs by their number in the session ("[run 3 failed: …]").
    return [
        JournalRecord(seq=seq, run_id=number, instance=MAIN_INSTANCE, kind=kind, message=message)
        for seq, number, kind, message in rows.iterator(chunk_size=2_000)
    ]


def project_after_view(records: list[JournalRecord], view: SessionView | None) -> ProjectedHistory:
    """Return `view` (if any) followed by the projection of `records` (those after it)."""
    if view is None:
        return project_history(records)
    return project_history(
        records,
        view={
            "revision": view.revision,
            "watermark": view.watermark,
            "messages": view.messages,
            "user_turns": view.user_turns,
            "model_steps": view.model_steps,
            "baseline_user_turns": view.baseline_user_turns,
            "baseline_model_steps": view.baseline_model_steps,
        },
    )


def history_for_new_run(session: Session, binding: dict[str, Any]) -> ProjectedHistory:
    """Return what a new run of `session` inherits under `binding` (DESIGN.md §5)."""
    view = compliant_view(session, binding)
    return project_after_view(main_records_after(session, view.watermark if view else 0), view)
