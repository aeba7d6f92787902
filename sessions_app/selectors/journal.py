"""Reads of the session journal: pages of records, records by seq, a run's journaled status."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db.models import Q

from agentloom.engine import status_key
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage

JOURNAL_LIMIT_DEFAULT = 100
JOURNAL_LIMIT_MAX = 200
# What a page gives of each record, in this order.
JOURNAL_ITEM_FIELDS = ("seq", "run_id", "instance", "kind", "message", "created_at")


def journal_page(
    *, session: Session, after: int = 0, limit: int = JOURNAL_LIMIT_DEFAULT, instance=None
) -> dict[str, Any]:
    """Return `{items, next_after}`: up to `limit` journal records with seq > `after`.

    One query on the (session, seq) or (session, instance, seq) index. An empty page keeps the
    cursor where it was, so a poller can simply call again with `next_after`.
    """
    rows = SessionMessage.objects.filter(session=session, seq__gt=after)
    if instance is not None:
        rows = rows.filter(instance=instance)
    # Dicts straight from the rows: a page builds no model instance per record.
    items = list(rows.order_by("seq").values(*JOURNAL_ITEM_FIELDS)[:limit])
    return {"items": items, "next_after": items[-1]["seq"] if items else after}


def journal_messages(session_id: int, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
    """Return the messages of the session's journal records `seqs` (one query), by seq."""
    rows = SessionMessage.objects.filter(session_id=session_id, seq__in=list(seqs))
    return dict(rows.values_list("seq", "message"))


def journaled_terminal(run: Run) -> dict[str, Any] | None:
    """Return the journaled terminal status ({status, error}) of the run's current attempt."""
    key = status_key(run.attempt)
    return (
        SessionMessage.objects.filter(run_id=run.pk, instance=MAIN_INSTANCE, kind="status")
        .filter(Q(entry_key=key) | Q(entry_key__startswith=f"{key}."))
        .order_by("-seq")
        .values_list("message", flat=True)
        .first()
    )
