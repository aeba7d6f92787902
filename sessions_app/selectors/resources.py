"""The resource URIs a session's tool results named: what `read_resource` may read.

A URI counts only when a main-instance `tool_result` of one of the given tools (a server's
model-facing names) named it in its whole journaled result (a resource link or an embedded
resource); text the user or the assistant wrote never counts, nor a result of another server.
"""

from __future__ import annotations

from collections.abc import Collection

from agentloom.toolservers import named_uris
from sessions_app.models import MAIN_INSTANCE, SessionMessage

# Where a tool result's record keeps what the model does not see (the server's whole result).
TOOL_DETAIL = "detail"


def resource_uris_named(session_id: int, tool_names: Collection[str]) -> set[str]:
    """Return the URIs that results of the tools `tool_names` named in the session."""
    rows = (
        SessionMessage.objects.filter(
            session_id=session_id,
            instance=MAIN_INSTANCE,
            kind__in=(SessionMessage.Kind.ASSISTANT, SessionMessage.Kind.TOOL_RESULT),
        )
        .order_by("seq")
        .only("kind", "message")
    )
    # Call ids may repeat across runs: each result belongs to the latest call of its id before it.
    called: dict[str, str] = {}
    uris: set[str] = set()
    for row in rows.iterator(chunk_size=200):
        message = row.message or {}
        if row.kind == SessionMessage.Kind.ASSISTANT:
            for call in message.get("tool_calls") or []:
                called[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
            continue
        if called.get(str(message.get("tool_call_id"))) not in tool_names:
            continue
        detail = message.get(TOOL_DETAIL)
        result = detail.get("mcp") if isinstance(detail, dict) else None
        if isinstance(result, dict):
            uris |= named_uris(result)
    return uris
