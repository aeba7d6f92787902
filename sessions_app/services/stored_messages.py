"""Large inline messages stored once per session (`StoredMessage`), named by a marker elsewhere.

A handoff summary is the one large message that no journal record holds. It is inline in the
compaction snapshot that made it, and then in every snapshot and reusable view of the session
until the next summary: each masking stores a snapshot and saves a view, so a 30 KB summary was
stored dozens of times. `stored_once` stores each message of at least `ONCE_BYTES` (its compact
JSON) once, under its keyed digest, and returns the marker `{"once": key}` to hold in its place;
smaller ones (run notes, placeholders) stay inline, where a row of their own would cost more.
`selectors.stored_messages` reads markers back. Called inside the transaction that writes the
rows holding the markers, so a marker is never committed without its message. Rows saved before
hold their messages inline and still read; `stored_messages_batch` (`manage.py
store_messages_once`) stores theirs once.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from agentloom import encryption
from sessions_app.models import CompactionSnapshot, SessionView, StoredMessage
from sessions_app.selectors.stored_messages import ONCE, is_marker

# Messages whose compact JSON is shorter than this stay inline.
ONCE_BYTES = 1_024


def _large(message: Any) -> bool:
    if not isinstance(message, dict) or is_marker(message):
        return False
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":"))) >= ONCE_BYTES


def stored_once(session_id: int, messages: list[Any]) -> list[Any]:
    """Return `messages` with each large one replaced by its marker, storing those not stored.

    One query finds which are stored already and one statement stores the rest (none when no
    message is large).
    """
    keys = {
        index: encryption.message_digest(session_id, message)
        for index, message in enumerate(messages)
        if _large(message)
    }
    if not keys:
        return messages
    stored = set(
        StoredMessage.objects.filter(session_id=session_id, key__in=set(keys.values())).values_list(
            "key", flat=True
        )
    )
    fresh = {key: messages[index] for index, key in keys.items() if key not in stored}
    if fresh:
        StoredMessage.objects.bulk_create(
            [
                StoredMessage(session_id=session_id, key=key, message=message)
                for key, message in fresh.items()
            ],
            ignore_conflicts=True,
        )
    return [
        {ONCE: keys[index]} if index in keys else message for index, message in enumerate(messages)
    ]


def snapshot_stored_once(session_id: int, snapshot: dict[str, Any]) -> dict[str, Any]:
    """Return a compaction snapshot as it is stored: its view's large inline messages as markers.

    `snapshot` is not changed (the frame in memory keeps its messages).
    """
    entries = snapshot.get("view") or []
    at = [index for index, entry in enumerate(entries) if "m" in entry]
    if not at:
        return snapshot
    inline = [entries[index]["m"] for index in at]
    kept = stored_once(session_id, inline)
    if kept is inline:
        return snapshot
    view = list(entries)
    for index, message in zip(at, kept, strict=True):
        if message is not entries[index]["m"]:
            view[index] = {**entries[index], "m": message}
    return {**snapshot, "view": view}


def stored_messages_batch(model: type[CompactionSnapshot | SessionView], *, after: int, limit: int):
    """Store once the large inline messages of up to `limit` rows of `model` with an id above
    `after`, saved before messages were stored once; return (the last id looked at, 0 when none
    was left; rows rewritten).

    One short transaction per batch, locking only the rows it rewrites; a row that holds no
    large inline message (converted already, or never holding one) is left as it is, so a repeat
    changes nothing and a stopped migration resumes where it stopped.
    """
    column = "snapshot" if model is CompactionSnapshot else "messages"
    session = "run__session_id" if model is CompactionSnapshot else "session_id"
    rewritten = 0
    with transaction.atomic():
        rows = list(
            model.objects.filter(pk__gt=after)
            .order_by("pk")
            .select_for_update(of=("self",))
            .values_list("pk", session, column)[:limit]
        )
        for pk, session_id, value in rows:
            if model is CompactionSnapshot:
                kept = snapshot_stored_once(session_id, value)
            else:
                kept = stored_once(session_id, value)
            if kept is not value:
                model.objects.filter(pk=pk).update(**{column: kept})
                rewritten += 1
    return (rows[-1][0] if rows else 0), rewritten
