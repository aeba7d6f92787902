"""Saving projection points: where projecting a session's history for new runs stopped.

A new run's history is loaded through `new_run_history`, which saves the projector's state after
the records it projected as the session's point for that binding and view (one row, moved
forward), so the next run resumes from there (`selectors.history`). A point is saved once at
least `POINT_STRIDE` session seqs were projected since the one it resumed from: a load then reads
at most that many records more, and a point (whose stored form grows with the history it stands
for) is written once per few runs, not once per run.
"""

from __future__ import annotations

from typing import Any

from agentloom.engine import ProjectedHistory
from sessions_app.models import ProjectionPoint, Run, Session
from sessions_app.selectors.history import DECRYPTED_POINTS, InheritedHistory, inherited_history

# Session seqs projected since the last point before a new one is saved.
POINT_STRIDE = 16


def new_run_history(
    session: Session, binding: dict[str, Any], *, as_of: Run | None = None
) -> ProjectedHistory:
    """Return `history_for_new_run(session, binding, as_of=as_of)`, saving the point it reached."""
    loaded = inherited_history(session, binding, as_of=as_of)
    save_point(session, loaded)
    return loaded.history


def save_point(session: Session, loaded: InheritedHistory) -> ProjectionPoint | None:
    """Save the point `loaded` reached, when it is `POINT_STRIDE` seqs past where it resumed."""
    point = loaded.history.point
    if point is None or point.watermark - loaded.resumed_at < POINT_STRIDE:
        return None
    body, inline = point.stored()
    state = {"body": body, "inline": inline}
    rows = ProjectionPoint.objects.filter(
        session=session, binding_key=loaded.binding_key, view=loaded.view
    )
    row = rows.order_by("-watermark", "-pk").first()
    if row is None:
        row = ProjectionPoint.objects.create(
            session=session,
            binding_key=loaded.binding_key,
            view=loaded.view,
            watermark=point.watermark,
            state=state,
        )
    elif row.watermark < point.watermark:
        row.watermark, row.state = point.watermark, state
        row.save(update_fields=["watermark", "state", "updated_at"])
    else:
        return None
    DECRYPTED_POINTS.put(row.pk, row.watermark, point)
    return row
