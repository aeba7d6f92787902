"""`read_resource{server, uri}`: the agent reads a resource a tool server offered it.

Offered when a version froze tools of a server that declares resources. It reads only a URI that
a result of that same server named in this session (a resource link or an embedded resource) or
that the server lists (as last listed); any other URI — one from the user's or the assistant's
text, or one another server named — is a tool error and nothing is sent to any server. A read
goes through the same address guard, size cap and time limit as a tool call, and its whole
result is journaled like a tool result (the model reads text contents; blobs as one line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentloom.engine import Tool, ToolCancelled, ToolContext, ToolError, ToolOutput
from agentloom.toolservers._client import ServerAddress, read_resource
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._results import resource_text

__all__ = ["MAX_URI_CHARS", "READ_RESOURCE", "ReadResourceTool", "ResourceSource"]

READ_RESOURCE = "read_resource"
MAX_URI_CHARS = 2_048
# Time beyond the read's own limit for the engine's watch: the read stops itself first.
_WATCH_SLACK_SECONDS = 5.0
_SHOWN_URI_CHARS = 200


@dataclass(frozen=True)
class ResourceSource:
    """A server whose resources a version may read: its frozen name, where it is now, and the
    URIs it offered (named by its results in this session, or listed by it)."""

    server: str
    address: Callable[[], ServerAddress]
    offered: Callable[[], set[str]]


def _shown(uri: str) -> str:
    return repr(uri if len(uri) <= _SHOWN_URI_CHARS else uri[: _SHOWN_URI_CHARS - 1] + "…")


class ReadResourceTool(Tool):
    """The built-in `read_resource` of a version whose tool servers declare resources."""

    name = READ_RESOURCE
    description = (
        "Read a resource a tool server offered: a URI that one of its tool results named (a "
        "resource link or block) or that the server lists. Give the server's name and the URI "
        "exactly as shown."
    )

    def __init__(self, sources: Sequence[ResourceSource], *, call_seconds: float):
        self._sources = {source.server: source for source in sources}
        self._call_seconds = call_seconds
        self.parameters = {
            "type": "object",
            "properties": {
                "server": {"type": "string", "enum": sorted(self._sources)},
                "uri": {"type": "string", "minLength": 1, "maxLength": MAX_URI_CHARS},
            },
            "required": ["server", "uri"],
            "additionalProperties": False,
        }

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return self.run_in(arguments, ToolContext())

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        server, uri = arguments["server"], arguments["uri"]
        source = self._sources.get(server)
        if source is None:
            raise ToolError(f"{self.name}: {server!r} is not a tool server of this agent.")
        if uri not in source.offered():
            raise ToolError(
                f"{self.name}: {_shown(uri)} was not named by a result of tool server "
                f"{server!r} in this session, nor listed by it; nothing was requested."
            )
        try:
            outcome = read_resource(
                source.address(), uri, timeout=self._call_seconds, cancelled=context.cancelled
            )
        except ToolServerError as error:
            if error.kind == "cancelled":
                raise ToolCancelled(f"the read of {_shown(uri)} was stopped") from None
            raise ToolError(f"{self.name}: {error.message}") from None
        detail = {"mcp": {"protocol_version": outcome.protocol_version, **outcome.result}}
        return ToolOutput(text=resource_text(outcome.result), detail=detail)

    def limit_seconds(self, arguments: dict[str, Any]) -> float | None:
        return self._call_seconds + _WATCH_SLACK_SECONDS
