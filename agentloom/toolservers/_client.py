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

A person's answers (`agentloom.toolservers._questions` holds the forms): a call made where a
person can answer declares the elicitation capability (form and URL modes), and only there.
Under 2026-07-28 a server that needs answers ends the call `input_required`: the outcome carries
its questions and request state, and the caller sends the same call again later with the answers
(`input_responses`, `request_state`). Under the 2025 revisions the server asks while the call is
open (`elicitation/create`): `ask(questions, seconds)` gets the person's answers within the time
the call has left, less `ANSWER_MARGIN_SECONDS` for the server to finish; when that leaves no
time, or no one answers, the question is declined.

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
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx2
import mcp.types as mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentloom.providers import Resolver
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._questions import question_of
from agentloom.toolservers._transport import (
    DEFAULT_MAX_RESPONSE_BYTES,
    GuardedAsyncTransport,
    guarded_http_client,
)

__all__ = [
    "ANSWER_MARGIN_SECONDS",
    "Bearer",
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
# Of the time a call has left, what a question asked during it leaves the server to finish.
ANSWER_MARGIN_SECONDS = 5.0
# A server that answers `input_required` with state only (no question) is asked again this often.
MAX_STATE_ONLY_ROUNDS = 10


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


class Bearer(Protocol):
    """An OAuth access token for a server, and how to get another when the server refuses it.

    `token` is the access token to send; `renewed(stale)` returns the token to send instead of
    `stale` once the server answered 401 to it (refreshed, or refreshed meanwhile by another
    call), or None when there is none. It is called from a thread of its own.
    """

    token: str

    def renewed(self, stale: str) -> str | None: ...


@dataclass(frozen=True)
class ServerAddress:
    """Where a server is and how to reach it. `headers` are sent with every request; `bearer`,
    when the server uses OAuth, gives the `Authorization` header, and `identity` says whose
    account it is (journaled with each result)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    allow_private_hosts: bool = False
    resolver: Resolver | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    connect_timeout: float = 10.0
    retry: RetryRule = DEFAULT_RETRY
    bearer: Bearer | None = None
    identity: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Header values and tokens are credentials: never in a repr, a log line or a traceback.
        oauth = ", oauth" if self.bearer is not None else ""
        return f"ServerAddress(url={self.url!r}, headers=[{', '.join(self.headers)}]{oauth})"


class _BearerAuth(httpx2.Auth):
    """Send the bearer's token; on a 401, send the request once more with a renewed token.

    A 401 means the server did not act on the request, so sending it again is safe. A second
    401, or no renewed token, ends the operation as an "auth" failure of the transport.
    """

    def __init__(self, bearer: Bearer, transport: GuardedAsyncTransport):
        self._bearer = bearer
        self._token = bearer.token
        self._transport = transport

    async def async_auth_flow(self, request: httpx2.Request):
        request.headers["Authorization"] = f"Bearer {self._token}"
        response = yield request
        if response.status_code != 401:
            return
        stale = self._token
        fresh = await anyio.to_thread.run_sync(self._bearer.renewed, stale)
        if fresh and fresh != stale:
            self._token = fresh
            request.headers["Authorization"] = f"Bearer {fresh}"
            response = yield request
            if response.status_code != 401:
                return
        self._transport.refuse(
            ToolServerError(
                "auth",
                "The tool server refused the OAuth token, and no fresh one could be had: "
                "connect the account again on the console's tool-server page.",
            )
        )


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    # The tool can only be called as a task (`execution.taskSupport: "required"`), which this
    # client does not declare: listed, never offered.
    requires_tasks: bool = False


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
    # `input_required` (2026-07-28): the server's questions and its opaque state; `result` is
    # then empty, and the call is sent again with the answers.
    questions: tuple[dict[str, Any], ...] = ()
    request_state: str | None = None

    @property
    def input_required(self) -> bool:
        return bool(self.questions)


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


Ask = Callable[[list[dict[str, Any]], float], Mapping[str, dict[str, Any]] | None]


def call_tool(
    server: ServerAddress,
    name: str,
    arguments: dict[str, Any],
    *,
    expected_schema: dict[str, Any] | None,
    timeout: float,
    cancelled: threading.Event | None = None,
    may_ask: bool = False,
    ask: Ask | None = None,
    input_responses: Mapping[str, dict[str, Any]] | None = None,
    request_state: str | None = None,
) -> CallOutcome:
    """Call tool `name` and return its whole result, or raise `ToolServerError`.

    `expected_schema` is the input schema frozen at publish; a server that now lists another
    one (or no such tool) gets no call. `timeout` bounds the whole operation; `cancelled`
    stops it (raising `ToolServerError("cancelled")`). `may_ask` declares that a person can
    answer the server's questions; `ask` asks them during the call (2025 revisions), and
    `input_responses` with `request_state` answer the questions of an earlier `input_required`.
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
            result = await _send_call(client, name, arguments, input_responses, request_state)
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
        if isinstance(result, mcp_types.InputRequiredResult):
            return CallOutcome(
                client.protocol_version,
                {},
                listing,
                notices.tools_changed,
                questions=_questions_of(result),
                request_state=result.request_state,
            )
        payload = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        payload.pop("resultType", None)
        return CallOutcome(client.protocol_version, payload, listing, notices.tools_changed)

    return _with_retries(
        server,
        work,
        timeout=timeout,
        cancelled=cancelled,
        asking=_Asking(ask) if may_ask else None,
    )


async def _send_call(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    input_responses: Mapping[str, dict[str, Any]] | None,
    request_state: str | None,
) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
    """Send `tools/call` (with the answers to an earlier `input_required`, if any); a state-only
    `input_required` (no question) is sent again with its state, a few times."""
    responses = (
        {key: mcp_types.ElicitResult(**answer) for key, answer in input_responses.items()}
        if input_responses is not None
        else None
    )
    delay = _POLL_SECONDS
    for _ in range(MAX_STATE_ONLY_ROUNDS):
        result = await client.session.call_tool(
            name,
            arguments,
            input_responses=responses,
            request_state=request_state,
            allow_input_required=True,
        )
        if not isinstance(result, mcp_types.InputRequiredResult) or result.input_requests:
            return result
        responses, request_state = None, result.request_state
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.25)
    raise ToolServerError(
        "protocol", "The tool server kept answering input_required without a question."
    )


def _questions_of(result: mcp_types.InputRequiredResult) -> tuple[dict[str, Any], ...]:
    questions = []
    for key, request in (result.input_requests or {}).items():
        if not isinstance(request, mcp_types.ElicitRequest):
            raise ToolServerError(
                "protocol",
                f"The tool server asked for {request.method}, which this client does not offer.",
                before_call=False,
            )
        params = request.params.model_dump(mode="json", by_alias=True, exclude_none=True)
        questions.append(question_of(key, params))
    return tuple(questions)


class _Asking:
    """The elicitation capability of one call: `ask` asks the person during the call (2025
    revisions), within the call's deadline less the margin; without it, every question is
    declined (a 2026-07-28 call's questions come back in its result instead)."""

    def __init__(self, ask: Ask | None):
        self.ask = ask
        self.deadline = 0.0
        self.asked = 0

    async def __call__(self, _context: Any, params: Any) -> mcp_types.ElicitResult:
        seconds = self.deadline - time.monotonic() - ANSWER_MARGIN_SECONDS
        if self.ask is None or seconds <= 0:
            return mcp_types.ElicitResult(action="decline")
        dumped = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.asked += 1
        key = f"elicitation-{self.asked}"
        question = question_of(key, dumped)
        ask = self.ask
        answers = await anyio.to_thread.run_sync(
            lambda: ask([question], seconds), abandon_on_cancel=True
        )
        answer = (answers or {}).get(key)
        if answer is None:
            return mcp_types.ElicitResult(action="decline")
        return mcp_types.ElicitResult(**answer)


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
                requires_tasks=getattr(tool.execution, "task_support", None) == "required",
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
    asking: _Asking | None = None,
) -> T:
    deadline = time.monotonic() + timeout
    if asking is not None:
        asking.deadline = deadline
    attempt = 1
    while True:
        try:
            return _run_once(server, work, deadline=deadline, cancelled=cancelled, asking=asking)
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
    asking: _Asking | None = None,
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
            auth=_BearerAuth(server.bearer, transport) if server.bearer is not None else None,
        )
        async with http:
            stream = streamable_http_client(server.url, http_client=http)
            notices = _Notices()
            async with Client(
                stream,
                mode="auto",
                cache=None,
                message_handler=notices,
                elicitation_callback=asking,
            ) as client:
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
