"""Reads of the session journal: pages of records, records by seq, a run's journaled status."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db.models import BinaryField, Q
from django.db.models.functions import Cast

from agentloom import encryption
from agentloom.engine import status_key
from sessions_app.models import MAIN_INSTANCE, Run, Session, SessionMessage

JOURNAL_LIMIT_DEFAULT = 100
JOURNAL_LIMIT_MAX = 200
# What a page gives of each record, in this order.
JOURNAL_ITEM_FIELDS = ("seq", "run_id", "instance", "kind", "message", "created_at")


def journal_page(
    *,
    session: Session,
    after: int = 0,
    limit: int = JOURNAL_LIMIT_DEFAULT,
    instance=None,
    message_text: bool = False,
) -> dict[str, Any]:
    """Return `{items, next_after}`: up to `limit` journal records with seq > `after`.

    One query on the (session, seq) or (session, instance, seq) index. An empty page keeps the
    cursor where it was, so a poller can simply call again with `next_after`. With
    `message_text`, each record's message is its JSON text (`encryption.decrypt_text`) instead
    of the parsed value, for a reader that writes it out as JSON again.
    """
    rows = SessionMessage.objects.filter(session=session, seq__gt=after)
    if instance is not None:
        rows = rows.filter(instance=instance)
    rows = rows.order_by("seq")
    # Dicts straight from the rows: a page builds no model instance per record.
    if not message_text:
        items = list(rows.values(*JOURNAL_ITEM_FIELDS)[:limit])
    else:
        stored = rows.annotate(stored=Cast("message", output_field=BinaryField()))
        fields = [name if name != "message" else "stored" for name in JOURNAL_ITEM_FIELDS]
        items = [
            {
                name: encryption.decrypt_text(row["stored"]) if name == "message" else row[name]
                for name in JOURNAL_ITEM_FIELDS
            }
            for row in stored.values(*fields)[:limit]
        ]
    return {"items": items, "next_after": items[-1]["seq"] if items else after}


def journal_messages(session_id: int, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
    """Return the messages of the session's journal records `seqs` (one query), by seq.

    The query also bounds the seqs by their least and greatest: PostgreSQL then searches the
    (session, seq) index for that range alone, whatever its statistics say. Given the list
    only, a planner whose statistics predate most of the journal (before autovacuum's next
    ANALYZE, after an import or a fork) scanned every record of the session instead.
    """
    wanted = list(seqs)
    if not wanted:
        return {}
    rows = SessionMessage.objects.filter(
        session_id=session_id, seq__gte=min(wanted), seq__lte=max(wanted), seq__in=wanted
    )
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
