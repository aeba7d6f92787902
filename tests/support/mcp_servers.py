"""Real MCP servers for tests: built with the SDK, served over Streamable HTTP on 127.0.0.1.

`serve(app)` runs an ASGI app with uvicorn in a thread and yields its base URL. `tool_server()`
builds the server the tool-server tests talk to (`settings` go to `MCPServer`, such as its OAuth
settings and token verifier): a text tool, a `structuredContent` tool, an
image block, a slow tool, a failing tool (`isError`) and a 40,000-character result; `Calls`
records what it was asked. `drift=True` lists another input schema for `greet`. `era` picks the
protocol it answers: `"2026"` (both eras, as the SDK serves), or `"2025"` (the `initialize`
handshake only, as servers built before the 2026-07-28 revision). `resources=True` adds resources
(a listed text note, text reports and pictures behind templates, so never listed) and `linker`,
a tool whose result links a report and embeds a picture; `Calls.reads` records each read.
`changing=True` adds `grow`, a tool that adds a tool and says so
(`notifications/tools/list_changed`, on the SSE answer of the call: `json_response=False`).
`asking=True` adds `book`, a tool that asks the person which day (a form of a string, a number,
a boolean and an enum; its message carries markup): under 2026-07-28 it answers
`input_required` with the question and `BOOK_STATE`, and books when the call comes again with
the answer; under 2025 it asks during the call (`elicitation/create`). `Calls.answers` records
each answer it got (action, content, the request state sent back), `Calls.declared` whether each
2026-era call declared the elicitation capability (one that did not is an error result).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from mcp import types as mcp_types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    ResourceLink,
    TextContent,
)
from pydantic import BaseModel, Field

BIG_RESULT_CHARS = 40_000
PNG_BYTES = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class Calls:
    """What the server saw: each tool call's name and arguments, and the headers of requests."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.reads: list[str] = []
        self.answers: list[tuple[str, dict[str, Any] | None, str | None]] = []
        self.declared: list[bool] = []
        self.subjects: list[str] = []
        self.started = threading.Event()


NOTE_URI = "demo://notes/readme"
NOTE_TEXT = "the readme of NONCE-NOTE-31"


def _add_resources(server: MCPServer, calls: Calls) -> None:
    @server.resource(NOTE_URI, name="readme", description="The readme.", mime_type="text/plain")
    def readme() -> str:
        calls.reads.append(NOTE_URI)
        return NOTE_TEXT

    @server.resource("demo://report/{number}", mime_type="text/plain")
    def report(number: str) -> str:
        calls.reads.append(f"demo://report/{number}")
        return f"report {number}: NONCE-REPORT-{number}"

    @server.resource("demo://pixel/{number}", mime_type="image/png")
    def pixel(number: str) -> bytes:
        calls.reads.append(f"demo://pixel/{number}")
        return PNG_BYTES

    @server.tool(description="Link a report and embed a picture.")
    def linker(number: int) -> CallToolResult:
        calls.calls.append(("linker", {"number": number}))
        return CallToolResult(
            content=[
                TextContent(type="text", text=f"report {number} is ready"),
                ResourceLink(
                    type="resource_link", uri=f"demo://report/{number}", name=f"report {number}"
                ),
                EmbeddedResource(
                    type="resource",
                    resource=BlobResourceContents(
                        uri=f"demo://pixel/{number}",
                        mime_type="image/png",
                        blob=base64.b64encode(PNG_BYTES).decode(),
                    ),
                ),
            ]
        )


BOOK_STATE = "booking-state-NONCE-STATE-39"
BOOK_MESSAGE = "Which day for <b>{room}</b>?"
BOOK_SCHEMA = {
    "type": "object",
    "properties": {
        "day": {"type": "string", "title": "Day", "description": "The day, as YYYY-MM-DD."},
        "nights": {"type": "integer", "title": "Nights"},
        "breakfast": {"type": "boolean", "title": "Breakfast"},
        "size": {"type": "string", "enum": ["single", "double"], "title": "Size"},
    },
    "required": ["day", "nights"],
}


class BookingForm(BaseModel):
    day: str = Field(title="Day", description="The day, as YYYY-MM-DD.")
    nights: int = Field(title="Nights")
    breakfast: bool = Field(default=False, title="Breakfast")


def _booked(room: str, action: str, content: dict[str, Any] | None) -> str:
    if action != "accept":
        return f"not booked: the person chose {action}"
    return f"booked {room} on {content['day']} for {content['nights']} nights"


def _add_questions(server: MCPServer, calls: Calls) -> None:
    @server.tool(description="Book a room; asks the person which day.")
    async def book(room: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        calls.calls.append(("book", {"room": room}))
        message = BOOK_MESSAGE.format(room=room)
        if ctx.protocol_version and ctx.protocol_version.startswith("2025"):
            outcome = await ctx.elicit(message, BookingForm)
            content = outcome.data.model_dump() if outcome.action == "accept" else None
            calls.answers.append((outcome.action, content, None))
            text = _booked(room, outcome.action, content)
            return CallToolResult(content=[TextContent(type="text", text=text)])
        caps = ctx.client_capabilities
        calls.declared.append(bool(caps and caps.elicitation))
        if not calls.declared[-1]:
            return CallToolResult(
                content=[TextContent(type="text", text="no one to ask: not booked")],
                is_error=True,
            )
        answer = (ctx.input_responses or {}).get("day")
        if answer is None:
            question = ElicitRequest(
                params=ElicitRequestFormParams(message=message, requested_schema=BOOK_SCHEMA)
            )
            return InputRequiredResult(input_requests={"day": question}, request_state=BOOK_STATE)
        content = dict(answer.content) if answer.content else None
        calls.answers.append((answer.action, content, ctx.request_state))
        if ctx.request_state != BOOK_STATE:
            return CallToolResult(
                content=[TextContent(type="text", text="the request state is wrong")],
                is_error=True,
            )
        text = _booked(room, answer.action, content)
        return CallToolResult(content=[TextContent(type="text", text=text)])


def _add_growth(server: MCPServer, calls: Calls) -> None:
    @server.tool(description="Add a tool, and say the list changed.")
    async def grow(ctx: Context) -> str:
        calls.calls.append(("grow", {}))

        def fresh() -> str:
            return "fresh"

        if "fresh" not in {tool.name for tool in await server.list_tools()}:
            server.add_tool(fresh, description="A tool added while serving.")
        if ctx.protocol_version and ctx.protocol_version.startswith("2025"):
            # Related to this request, so it goes on the call's own SSE answer, before the
            # result. (`send_tool_list_changed()` relates it to nothing: the SDK sends it on the
            # standalone GET stream, and drops it while the client has not opened that one yet.)
            await ctx.session.send_notification(
                mcp_types.ToolListChangedNotification(), related_request_id=ctx.request_id
            )
        else:
            await ctx.notify_tools_changed()
        return "grown"


def tool_server(
    calls: Calls,
    *,
    name: str = "demo",
    drift: bool = False,
    resources: bool = False,
    changing: bool = False,
    asking: bool = False,
    **settings: Any,
) -> MCPServer:
    server = MCPServer(name, log_level="WARNING", **settings)
    if resources:
        _add_resources(server, calls)
    if asking:
        _add_questions(server, calls)
    if changing:
        _add_growth(server, calls)

    if drift:

        @server.tool(name="greet", description="Return a greeting for a name.")
        def greet_loudly(who: str, loud: bool) -> str:
            calls.calls.append(("greet", {"who": who, "loud": loud}))
            return f"HELLO {who}" if loud else f"hello {who}"

    else:

        @server.tool(description="Return a greeting for a name.")
        def greet(who: str) -> str:
            calls.calls.append(("greet", {"who": who}))
            return f"hello {who}"

    @server.tool(description="Return the weather as structured content.")
    def weather(city: str) -> CallToolResult:
        calls.calls.append(("weather", {"city": city}))
        return CallToolResult(
            content=[TextContent(type="text", text=f"{city}: 21 C")],
            structured_content={"city": city, "celsius": 21},
            _meta={"source": "test"},
        )

    @server.tool(description="Return a one-pixel picture.")
    def picture() -> CallToolResult:
        calls.calls.append(("picture", {}))
        return CallToolResult(
            content=[
                TextContent(type="text", text="a picture follows"),
                ImageContent(
                    type="image", data=base64.b64encode(PNG_BYTES).decode(), mime_type="image/png"
                ),
            ]
        )

    @server.tool(description="Wait, then answer.")
    async def slow(seconds: float) -> str:
        import anyio

        calls.calls.append(("slow", {"seconds": seconds}))
        calls.started.set()
        await anyio.sleep(seconds)
        return "done waiting"

    @server.tool(description="Always fail.")
    def broken() -> CallToolResult:
        calls.calls.append(("broken", {}))
        return CallToolResult(
            content=[TextContent(type="text", text="the disk is full")], is_error=True
        )

    @server.tool(description="Return a long text.")
    def big() -> str:
        calls.calls.append(("big", {}))
        line = "0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
        return (line * (BIG_RESULT_CHARS // len(line) + 1))[:BIG_RESULT_CHARS]

    return server


def _only_handshake(app):
    """Answer every request that is not of a 2025 handshake-era session as such a server does."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode()
            if version and not version.startswith("2025"):
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def _recording(app, calls: Calls):
    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            calls.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    return wrapped


def mcp_app(
    calls: Calls,
    *,
    era: str = "2026",
    name: str = "demo",
    drift: bool = False,
    resources: bool = False,
    changing: bool = False,
    asking: bool = False,
):
    """Return the ASGI app of the test tool server, at path `/mcp`."""
    # Tests reach it by other host names too (a stub resolver), so no Host-header check.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server = tool_server(
        calls, name=name, drift=drift, resources=resources, changing=changing, asking=asking
    )
    # A question asked during a 2025-era call goes on the call's own SSE answer.
    app = server.streamable_http_app(
        json_response=not (changing or asking), transport_security=security
    )
    app = _recording(app, calls)
    return _only_handshake(app) if era == "2025" else app


async def answer_lifespan(receive, send) -> None:
    """Answer an ASGI lifespan until shutdown (an app with nothing to start or stop)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def redirecting_app(target: str):
    """Answer every request with a 307 to `target`."""

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 307,
                "headers": [(b"location", target.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(app, *, port: int | None = None) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (on `port`, else a free one) in a thread; yield
    `http://127.0.0.1:<port>`."""
    port = port or free_port()
    # A call still running at the test's end (a killed worker's, a cancelled one's slow tool) is
    # cut a second after the stop instead of holding the test's end until it finishes.
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
