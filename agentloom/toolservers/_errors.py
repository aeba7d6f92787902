"""The one error a tool-server call raises, with fixed text that never repeats a header."""

from __future__ import annotations

__all__ = ["ToolServerError"]

_MESSAGES = {
    "address_refused": "The tool server's address is not allowed.",
    "unreachable": "The tool server could not be reached.",
    "network": "The connection to the tool server broke.",
    "timeout": "The tool server did not answer in time.",
    "redirect": "The tool server answered with a redirect, which is refused.",
    "too_large": "The tool server's answer is larger than allowed.",
    "protocol": "The tool server did not answer as an MCP server over Streamable HTTP.",
    "auth": "The tool server refused the request's credentials.",
    "upstream": "The tool server failed to answer.",
    "unknown_tool": "The tool server does not offer this tool.",
    "schema_changed": "The tool's input schema on the server changed.",
    "cancelled": "The call was stopped by a cancellation.",
}


class ToolServerError(Exception):
    """A tool-server call failed. `kind` is one of `_MESSAGES`; `message` is safe to show.

    `before_call` says the failure happened before `tools/call` was sent (so nothing ran).
    """

    def __init__(self, kind: str, message: str | None = None, *, before_call: bool = True):
        self.kind = kind
        self.message = message or _MESSAGES.get(kind, "The tool server call failed.")
        self.before_call = before_call
        super().__init__(self.message)

    @property
    def unreachable(self) -> bool:
        """Return whether no connection opened, so nothing reached the server."""
        return self.kind == "unreachable"
