"""List and call the tools of an MCP server over Streamable HTTP, from synchronous code.

Each operation opens one MCP session with the official SDK (`mcp.Client`, `mode="auto"`: the
2026-07-28 `server/discover` probe, falling back to the `initialize` handshake of the 2025
revisions), does its work and closes it. The HTTP underneath is the guarded client of
`agentloom.toolservers._transport`.

Retry rule: a server that could not be reached (no connection opened, so nothing ran) is tried
`RetryRule.attempts` times in all, waiting `RetryRule.backoff_seconds` between tries. Once a
connection opened, nothing is retried: a `tools/call` may have had its effects.

A call compares the tool's input schema listed by the server with the schema frozen at publish
before sending `tools/call`; when they differ, nothing is sent and the call fails naming the tool.
The listing it saw comes back with its result, and whether the server said during the call that
its tools changed (`notifications/tools/list_changed`): the console marks the stored listing stale.

A listing also says whether the server declares resources, and lists them; `read_resource` reads
one URI (`resources/read`) under the same guard, cap and time limit as a call. Which URIs a run may
read is decided before it is called (`agentloom.toolservers._resources`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import mcp.types as mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentloom.providers import Resolver
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._transport import (
    DEFAULT_MAX_RESPONSE_BYTES,
    GuardedAsyncTransport,
    guarded_http_client,
)

__all__ = [
    "CallOutcome",
    "ListedResource",
    "ListedTool",
    "ResourceOutcome",
    "RetryRule",
    "ServerAddress",
    "ToolListing",
    "call_tool",
    "list_tools",
    "read_resource",
]

T = TypeVar("T")

# The SDK logs every message it sends and receives (tool arguments and results) at DEBUG, and the
# HTTP libraries log URLs and headers at INFO and DEBUG: tool-server traffic is session content, so
# these loggers (and their children, which inherit the level) say only warnings and errors.
QUIET_LOGGERS = ("mcp", "httpx2", "httpcore2")


def _quiet_library_loggers() -> None:
    for name in QUIET_LOGGERS:
        library_logger = logging.getLogger(name)
        if library_logger.level < logging.WARNING:
            library_logger.setLevel(logging.WARNING)


_quiet_library_loggers()

# A listing longer than this many pages is cut (a paginator that never ends cannot hang a call).
MAX_LIST_PAGES = 20
MAX_ERROR_CHARS = 500
_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class RetryRule:
    """How often an unreachable server is tried, and how long to wait between tries."""

    attempts: int = 3
    backoff_seconds: tuple[float, ...] = (0.5, 1.0)

    def wait_before(self, attempt: int) -> float:
        """Return the wait before try number `attempt` (2 and up)."""
        if not self.backoff_seconds:
            return 0.0
        return self.backoff_seconds[min(attempt - 2, len(self.backoff_seconds) - 1)]


DEFAULT_RETRY = RetryRule()


@dataclass(frozen=True)
class ServerAddress:
    """Where a server is and how to reach it. `headers` are sent with every request."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    allow_private_hosts: bool = False
    resolver: Resolver | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    connect_timeout: float = 10.0
    retry: RetryRule = DEFAULT_RETRY

    def __repr__(self) -> str:
        # Header values are credentials: never in a repr, a log line or a traceback.
        return f"ServerAddress(url={self.url!r}, headers=[{', '.join(self.headers)}])"


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ListedResource:
    uri: str
    name: str
    description: str = ""
    mime_type: str = ""


@dataclass(frozen=True)
class ToolListing:
    """A server's tools; `declares_resources` when its capabilities name resources, and then
    the resources it lists."""

    protocol_version: str
    tools: tuple[ListedTool, ...]
    declares_resources: bool = False
    resources: tuple[ListedResource, ...] = ()


@dataclass(frozen=True)
class CallOutcome:
    """A finished `tools/call`: the whole result as JSON (`content`, `structuredContent`,
    `isError`, `_meta`) and the protocol revision the session spoke; the tools the server listed
    before the call, and whether it said during the call that they changed."""

    protocol_version: str
    result: dict[str, Any]
    listed: tuple[ListedTool, ...] = ()
    tools_changed: bool = False


@dataclass(frozen=True)
class ResourceOutcome:
    """A finished `resources/read`: its whole result as JSON (`contents`)."""

    protocol_version: str
    result: dict[str, Any]


class _Notices:
    """What the server said on its own during one session (only list changes are kept)."""

    def __init__(self) -> None:
        self.tools_changed = False

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tools_changed = True
        await anyio.lowlevel.checkpoint()


def list_tools(
    server: ServerAddress, *, timeout: float = 30.0, cancelled: threading.Event | None = None
) -> ToolListing:
    """Return the server's tools, or raise `ToolServerError`."""

    async def work(client: Client, _notices: _Notices) -> ToolListing:
        tools = tuple(await _all_tools(client))
        declares = client.server_capabilities.resources is not None
        resources = tuple(await _all_resources(client)) if declares else ()
        return ToolListing(client.protocol_version, tools, declares, resources)

    return _with_retries(server, work, timeout=timeout, cancelled=cancelled)


def read_resource(
    server: ServerAddress,
    uri: str,
    *,
    timeout: float,
    cancelled: threading.Event | None = None,
) -> ResourceOutcome:
    """Read resource `uri` and return its whole result, or raise `ToolServerError`."""

    async def work(client: Client, _notices: _Notices) -> ResourceOutcome:
        try:
            result = await client.read_resource(uri, cache_mode="bypass")
        except MCPError as error:
            raise _mcp_error(error, before_call=False) from None
        except ValidationError:
            raise ToolServerError(
                "protocol",
                "The tool server's answer is not a valid MCP resource.",
                before_call=False,
            ) from None
        payload = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        payload.pop("resultType", None)
        return ResourceOutcome(client.protocol_version, payload)

    return _with_retries(server, work, timeout=timeout, cancelled=cancelled)


def call_tool(
    server: ServerAddress,
    name: str,
    arguments: dict[str, Any],
    *,
    expected_schema: dict[str, Any] | None,
    timeout: float,
    cancelled: threading.Event | None = None,
) -> CallOutcome:
    """Call tool `name` and return its whole result, or raise `ToolServerError`.

    `expected_schema` is the input schema frozen at publish; a server that now lists another
    one (or no such tool) gets no call. `timeout` bounds the whole operation; `cancelled`
    stops it (raising `ToolServerError("cancelled")`).
    """

    async def work(client: Client, notices: _Notices) -> CallOutcome:
        listing = tuple(await _all_tools(client))
        listed = {tool.name: tool for tool in listing}
        if name not in listed:
            raise ToolServerError("unknown_tool", f"The tool server no longer offers {name!r}.")
        if expected_schema is not None and listed[name].input_schema != expected_schema:
            raise ToolServerError(
                "schema_changed",
                f"The input schema of {name!r} on the tool server changed since this version "
                "was published; publish the agent again to use the new schema.",
            )
        try:
            result = await client.call_tool(name, arguments)
        except ToolServerError as error:
            raise ToolServerError(error.kind, error.message, before_call=False) from None
        except MCPError as error:
            raise _mcp_error(error, before_call=False) from None
        except ValidationError:
            raise ToolServerError(
                "protocol",
                "The tool server's result is not a valid MCP tool result.",
                before_call=False,
            ) from None
        payload = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        payload.pop("resultType", None)
        return CallOutcome(client.protocol_version, payload, listing, notices.tools_changed)

    return _with_retries(server, work, timeout=timeout, cancelled=cancelled)


async def _all_tools(client: Client) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(
            ListedTool(
                name=tool.name,
                description=tool.description or "",
                input_schema=dict(tool.input_schema or {}),
            )
            for tool in page.tools
        )
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def _all_resources(client: Client) -> list[ListedResource]:
    resources: list[ListedResource] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_resources(cursor=cursor, cache_mode="bypass")
        resources.extend(
            ListedResource(
                uri=str(resource.uri),
                name=resource.name,
                description=resource.description or "",
                mime_type=resource.mime_type or "",
            )
            for resource in page.resources
        )
        cursor = page.next_cursor
        if not cursor:
            break
    return resources


Work = Callable[[Client, _Notices], Awaitable[T]]


def _with_retries(
    server: ServerAddress,
    work: Work[T],
    *,
    timeout: float,
    cancelled: threading.Event | None,
) -> T:
    deadline = time.monotonic() + timeout
    attempt = 1
    while True:
        try:
            return _run_once(server, work, deadline=deadline, cancelled=cancelled)
        except ToolServerError as error:
            if not (error.unreachable and attempt < server.retry.attempts):
                raise
        attempt += 1
        wait = server.retry.wait_before(attempt)
        if time.monotonic() + wait >= deadline:
            raise ToolServerError("unreachable")
        if cancelled is not None and cancelled.wait(wait):
            raise ToolServerError("cancelled")
        if cancelled is None:
            time.sleep(wait)


def _run_once(
    server: ServerAddress,
    work: Work[T],
    *,
    deadline: float,
    cancelled: threading.Event | None,
) -> T:
    transport = GuardedAsyncTransport(
        allow_private_hosts=server.allow_private_hosts,
        resolver=server.resolver,
        max_response_bytes=server.max_response_bytes,
    )

    async def session(scope: anyio.CancelScope) -> T:
        transport.on_failure = lambda _error: scope.cancel()
        http = guarded_http_client(
            transport,
            headers=dict(server.headers),
            connect_timeout=server.connect_timeout,
            read_timeout=max(1.0, deadline - time.monotonic()),
        )
        async with http:
            stream = streamable_http_client(server.url, http_client=http)
            notices = _Notices()
            async with Client(stream, mode="auto", cache=None, message_handler=notices) as client:
                return await work(client, notices)

    async def main() -> T:
        outcome: list[T] = []
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as timer:
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    outcome.append(await session(group.cancel_scope))
                    group.cancel_scope.cancel()

                group.start_soon(run)
                if cancelled is not None:
                    group.start_soon(_watch, cancelled, group.cancel_scope)
        if outcome:
            return outcome[0]
        if transport.failure is not None:
            raise transport.failure
        if cancelled is not None and cancelled.is_set():
            raise ToolServerError("cancelled", before_call=False)
        if timer.cancelled_caught:
            raise ToolServerError("timeout", before_call=False)
        raise ToolServerError("protocol", before_call=False)

    with _errors_of(transport):
        return _run_in_own_loop(main)


def _run_in_own_loop(main: Callable[[], Awaitable[T]]) -> T:
    """Run `main` in an event loop of its own: in a thread of its own when this thread already
    runs one (an async server's thread, a test's browser driver)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(main)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = anyio.run(main)
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    thread = threading.Thread(target=target, name="tool-server-call", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def _watch(signal: threading.Event, scope: anyio.CancelScope) -> None:
    while not signal.is_set():
        await anyio.sleep(_POLL_SECONDS)
    scope.cancel()


@contextlib.contextmanager
def _errors_of(transport: GuardedAsyncTransport) -> Iterator[None]:
    """Turn whatever the SDK raised into one `ToolServerError`."""
    try:
        yield
    except ToolServerError:
        raise
    except BaseExceptionGroup as group:
        raise _first_error(group, transport) from None
    except MCPError as error:
        raise transport.failure or _mcp_error(error, before_call=True) from None
    except (ValidationError, ValueError, RuntimeError, OSError):
        raise transport.failure or ToolServerError("protocol") from None


def _first_error(group: BaseExceptionGroup, transport: GuardedAsyncTransport) -> ToolServerError:
    if transport.failure is not None:
        return transport.failure
    for error in _leaves(group):
        if isinstance(error, ToolServerError):
            return error
        if isinstance(error, MCPError):
            return _mcp_error(error, before_call=True)
    return ToolServerError("protocol")


def _leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


def _mcp_error(error: MCPError, *, before_call: bool) -> ToolServerError:
    text = " ".join(str(error.message).split())[:MAX_ERROR_CHARS]
    return ToolServerError(
        "protocol",
        f"The tool server answered with error {error.code}: {text}",
        before_call=before_call,
    )
