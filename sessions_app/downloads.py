"""Downloads of session exports, shared by the API and the console: streamed as written."""

from __future__ import annotations

from collections.abc import Iterator

from django.http import StreamingHttpResponse

_OUTPUTS = {
    "jsonl": ("jsonl", "application/x-ndjson"),
    "openai": ("openai.json", "application/json"),
}


def export_response(lines: Iterator[bytes], *, session_id: int, output: str):
    """Return an export as an attachment streamed line by line (never held whole)."""
    suffix, content_type = _OUTPUTS[output]
    response = StreamingHttpResponse(lines, content_type=content_type)
    response["Content-Disposition"] = (
        f'attachment; filename="agentloom-session-{session_id}.{suffix}"'
    )
    response["Cache-Control"] = "no-store"
    return response
