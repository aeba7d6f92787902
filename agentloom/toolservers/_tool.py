"""A tool of a tool server, as the engine sees it: a plain `Tool` whose call this package makes.

The engine hands it the checked arguments and a `ToolContext`; it calls the server under the
per-tool time limit, stops when the context's cancellation signal is set, and returns the text
for the model with the whole result as the journal's detail. `isError` and protocol failures are
tool errors the model is told about, never an exception out of the engine. What the server listed
before the call, and whether it said its tools changed, goes to `on_listing` (the console's
stale mark); a failure there never fails the call.

A person answers the server's questions only where the context can ask one (the engine's main
instance with the application's hooks): only there does the call declare the capability. A
2026-07-28 `input_required` raises the engine's `InputRequired` (the run waits); the context's
`reply` then sends the same call again with the answers. Under the 2025 revisions the context's
`ask` answers during the call (see `agentloom.toolservers._client`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentloom.engine import (
    InputRequired,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolError,
    ToolOutput,
)
from agentloom.toolservers._client import ListedTool, ServerAddress, call_tool
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._results import result_text

__all__ = ["DEFAULT_CALL_SECONDS", "SEPARATOR", "ServerTool", "failure_reason", "model_tool_name"]

DEFAULT_CALL_SECONDS = 60.0
SEPARATOR = "__"
# Time beyond the call's own limit for the engine's watch: the call stops itself first.
_WATCH_SLACK_SECONDS = 5.0
_MAY_HAVE_RUN = " The call may have run on the server; do not assume it did or did not."


def model_tool_name(server: str, tool: str) -> str:
    """Return the name the model calls a server's tool by: `<server>__<tool>`."""
    return f"{server}{SEPARATOR}{tool}"


class ServerTool(Tool):
    """Tool `tool` of a tool server, frozen at publish: name, description and input schema.

    `address` returns where the server is now (its URL and headers are read when the call is
    made, so a rotated header works for old versions); it raises `ToolServerError` when the
    server is gone. An address with an OAuth identity puts it in the result's detail
    (`identity`: whose account the call acted as).
    """

    def __init__(
        self,
        *,
        name: str,
        tool: str,
        description: str,
        input_schema: dict[str, Any],
        address: Callable[[], ServerAddress],
        server: str = "",
        call_seconds: float = DEFAULT_CALL_SECONDS,
        needs_approval: bool = False,
        on_listing: Callable[[tuple[ListedTool, ...], bool], None] | None = None,
    ):
        self.name = name
        self.tool = tool
        self.description = description
        self.parameters = input_schema
        self._address = address
        self.server = server or name.split(SEPARATOR, 1)[0]
        self._call_seconds = call_seconds
        self.needs_approval = needs_approval
        self._on_listing = on_listing

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return self.run_in(arguments, ToolContext())

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        reply = context.reply
        person = context.ask
        ask = (
            None
            if person is None
            else lambda questions, seconds: person(self.server, questions, seconds)
        )
        try:
            address = self._address()
            outcome = call_tool(
                address,
                self.tool,
                arguments,
                expected_schema=self.parameters,
                timeout=self._call_seconds,
                cancelled=context.cancelled,
                may_ask=person is not None,
                ask=ask,
                input_responses=reply.responses if reply is not None else None,
                request_state=reply.request_state if reply is not None else None,
            )
        except ToolServerError as error:
            if error.kind == "cancelled":
                raise ToolCancelled(
                    f"the call to {self.name} was stopped by a cancellation"
                ) from None
            raise ToolError(
                f"{self.name}: {error.message}" + ("" if error.before_call else _MAY_HAVE_RUN)
            ) from None
        if self._on_listing is not None:
            self._on_listing(outcome.listed, outcome.tools_changed)
        if outcome.input_required:
            if person is None:
                raise ToolError(
                    f"{self.name}: the tool server asked for a person's answer, and none can "
                    "answer this call." + _MAY_HAVE_RUN
                )
            raise InputRequired(
                server=self.server,
                questions=list(outcome.questions),
                request_state=outcome.request_state,
            )
        text = result_text(outcome.result)
        detail = {"mcp": {"protocol_version": outcome.protocol_version, **outcome.result}}
        if address.identity:
            detail["identity"] = dict(address.identity)
        failed = bool(outcome.result.get("isError"))
        return ToolOutput(text=text, detail=detail, error=failure_reason(text) if failed else None)

    def limit_seconds(self, arguments: dict[str, Any]) -> float | None:
        return self._call_seconds + _WATCH_SLACK_SECONDS


def failure_reason(text: str, limit: int = 200) -> str:
    """Return the feedback's reason for a result the server marked `isError`: its first line."""
    line = text.strip().splitlines()[0] if text.strip() else "(no text)"
    line = line if len(line) <= limit else line[: limit - 1] + "…"
    return f"the tool server reported an error: {line}"
