"""Replaced keys stay redacted: what a connection's runs redact, and the keys kept for it.

When an update changes a connection's key, the old key joins the connection's previous keys
(encrypted like the key), which are used for redaction only (`redaction_secrets`), never sent to
a provider or shown. The last `PREVIOUS_KEYS_KEPT` (5) keys are kept, each for
`PREVIOUS_KEY_DAYS` (90) days after it was replaced, so a question or an answer that repeats a
key a client still holds is journaled as `[redacted]`.
"""

from __future__ import annotations

import datetime

from django.utils import timezone

from models_app.models import ModelConnection
from models_app.selectors import tool_server_secrets

__all__ = ["PREVIOUS_KEYS_KEPT", "PREVIOUS_KEY_DAYS", "keys_after_change", "redaction_secrets"]

# How many replaced keys a connection keeps for redaction, and for how long after replacement.
PREVIOUS_KEYS_KEPT = 5
PREVIOUS_KEY_DAYS = 90


def _previous_keys(connection: ModelConnection, *, now: datetime.datetime) -> list[dict[str, str]]:
    """Return the connection's previous keys that are still kept at `now`, newest first."""
    cutoff = now - datetime.timedelta(days=PREVIOUS_KEY_DAYS)
    kept = [
        entry
        for entry in connection.previous_api_keys or []
        if datetime.datetime.fromisoformat(entry["retired_at"]) > cutoff
    ]
    return kept[:PREVIOUS_KEYS_KEPT]


def redaction_secrets(
    connection: ModelConnection, *, now: datetime.datetime | None = None
) -> list[str]:
    """Return the secrets to redact from what `connection`'s runs write: its key, its previous
    keys, then the header values of its space's tool servers."""
    previous = [entry["key"] for entry in _previous_keys(connection, now=now or timezone.now())]
    keys = [key for key in (connection.api_key, *previous) if key]
    return keys + tool_server_secrets(connection.space_id)


def keys_after_change(current: ModelConnection, new_key: str) -> list[dict[str, str]]:
    """Return the previous keys once `current`'s key becomes `new_key`."""
    now = timezone.now()
    kept = [entry for entry in _previous_keys(current, now=now) if entry["key"] != new_key]
    if current.api_key and current.api_key != new_key:
        kept.insert(0, {"key": current.api_key, "retired_at": now.isoformat()})
    return kept[:PREVIOUS_KEYS_KEPT]
