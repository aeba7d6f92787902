"""What the model reads of a tool server's result.

The journal keeps the whole result; the model reads its text blocks, joined by line breaks, with
every other block as a one-line placeholder naming its type and size (an image, audio, an
embedded resource, a resource link). A result with no text block but `structuredContent` shows
that as JSON. Large results then follow the large-record rules of the engine (an excerpt and a
reference that `read_record` reads).

A result names a resource by a resource link or an embedded resource block (`named_uris`); what
`read_resource` returns reads the same way (`resource_text`): text contents, blobs as one line.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

__all__ = ["block_placeholder", "named_uris", "resource_text", "result_text"]


def _decoded_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def block_placeholder(block: dict[str, Any]) -> str:
    """Return the one line that stands for a non-text content block."""
    kind = str(block.get("type", "unknown"))
    if kind in ("image", "audio"):
        mime = block.get("mimeType") or "unknown type"
        return f"[{kind} block: {mime}, {_decoded_size(block.get('data')):,} bytes]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            size = f"{len(str(resource['text'])):,} characters"
        else:
            size = f"{_decoded_size(resource.get('blob')):,} bytes"
        return f"[resource block: {resource.get('uri', '?')}, {size}]"
    if kind == "resource_link":
        return f"[resource link: {block.get('uri', '?')}]"
    return f"[{kind} block]"


def result_text(result: dict[str, Any]) -> str:
    """Return the text the model reads of a `tools/call` result."""
    blocks = [block for block in result.get("content") or [] if isinstance(block, dict)]
    parts = [
        str(block.get("text", "")) if block.get("type") == "text" else block_placeholder(block)
        for block in blocks
    ]
    has_text = any(block.get("type") == "text" for block in blocks)
    if not has_text and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False, sort_keys=True))
    return "\n".join(parts) if parts else "(the tool returned no content)"


def named_uris(result: dict[str, Any]) -> set[str]:
    """Return the resource URIs a `tools/call` result names (links and embedded resources)."""
    uris: set[str] = set()
    for block in result.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "resource_link" and isinstance(block.get("uri"), str):
            uris.add(block["uri"])
        elif block.get("type") == "resource":
            uri = (block.get("resource") or {}).get("uri")
            if isinstance(uri, str):
                uris.add(uri)
    return uris


def resource_text(result: dict[str, Any]) -> str:
    """Return the text the model reads of a `resources/read` result."""
    parts = []
    for contents in result.get("contents") or []:
        if not isinstance(contents, dict):
            continue
        if "text" in contents:
            parts.append(str(contents["text"]))
        else:
            mime = contents.get("mimeType") or "unknown type"
            size = _decoded_size(contents.get("blob"))
            parts.append(f"[blob: {contents.get('uri', '?')}, {mime}, {size:,} bytes]")
    return "\n".join(parts) if parts else "(the resource has no contents)"
