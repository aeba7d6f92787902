"""Reads of messages stored once (`StoredMessage`): each marker `{"once": key}` read back.

Compaction snapshots and reusable views name a large inline message by a marker instead of
holding it (`services.stored_messages` writes them); every reader of those rows reads them back
here, so the engine, replay, export and the pages see the messages as they were. Rows saved
before hold every message inline and read as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sessions_app.models import StoredMessage

ONCE = "once"


def is_marker(message: Any) -> bool:
    """True for the marker that stands for a message stored once (a message always has a role)."""
    return isinstance(message, dict) and ONCE in message and "role" not in message


def stored_messages(session_id: int, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Return the session's messages stored under `keys`, by key (one query; none for no key)."""
    wanted = set(keys)
    if not wanted:
        return {}
    found = dict(
        StoredMessage.objects.filter(session_id=session_id, key__in=wanted).values_list(
            "key", "message"
        )
    )
    missing = wanted - found.keys()
    if missing:
        raise StoredMessage.DoesNotExist(
            f"session {session_id} names {len(missing)} message(s) stored once that are not stored"
        )
    return found


def messages_read(session_id: int, messages: list[Any]) -> list[Any]:
    """Return a list of messages with each marker read back (the list itself when it has none)."""
    keys = [message[ONCE] for message in messages if is_marker(message)]
    if not keys:
        return messages
    found = stored_messages(session_id, keys)
    return [found[message[ONCE]] if is_marker(message) else message for message in messages]


def snapshots_read(
    session_id: int, snapshots: dict[Any, dict[str, Any]]
) -> dict[Any, dict[str, Any]]:
    """Return stored compaction snapshots with the markers of their view entries read back.

    One query for all of them (none when no entry holds a marker).
    """
    keys = [
        entry["m"][ONCE]
        for snapshot in snapshots.values()
        for entry in snapshot.get("view") or []
        if is_marker(entry.get("m"))
    ]
    if not keys:
        return snapshots
    found = stored_messages(session_id, keys)
    return {
        name: {
            **snapshot,
            "view": [
                {**entry, "m": found[entry["m"][ONCE]]} if is_marker(entry.get("m")) else entry
                for entry in snapshot.get("view") or []
            ],
        }
        for name, snapshot in snapshots.items()
    }
