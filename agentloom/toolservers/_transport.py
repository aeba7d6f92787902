"""The HTTP client every tool-server call goes through.

The MCP SDK talks HTTP through an `httpx2.AsyncClient` it is given; this module builds that
client the way the provider client is built (`agentloom.providers.secure_client`): no proxy or
certificate settings read from the environment, a connection only to an address the providers'
address guard (`resolve_checked`) checked, every 3xx refused (the SDK follows same-origin
redirects by itself unless the client allows none), and each response body capped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpcore2
import httpx2

from agentloom.providers import (
    ProviderError,
    Resolver,
    guarded_core_request,
    resolve_checked,
    system_resolver,
)
from agentloom.toolservers._errors import ToolServerError

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "GuardedAsyncTransport", "guarded_http_client"]

# One MCP answer (a JSON body or one SSE stream) may be at most this large.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def _tool_server_error(error: ProviderError) -> ToolServerError:
    kind = "unreachable" if error.kind == "network" else error.kind
    # The guard's texts name "the provider"; these are about a tool server.
    return ToolServerError(kind, error.message.replace("provider", "tool server"))


class _GuardedAsyncBackend(httpcore2.AnyIOBackend):
    """Open TCP connections only to addresses the guard checked, resolving each host once."""

    def __init__(self, *, resolver: Resolver, allow_private_hosts: bool):
        self._resolver = resolver
        self._allow_private_hosts = allow_private_hosts

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await anyio.to_thread.run_sync(self._checked, host, port)
        except ProviderError as error:
            raise _tool_server_error(error) from None
        failure: Exception | None = None
        for address in addresses:
            try:
                # An IP literal: no second lookup. TLS still verifies and sends SNI for `host`.
                return await super().connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise ToolServerError("unreachable") from failure

    def _checked(self, host: str, port: int) -> list[str]:
        return resolve_checked(
            host, port, resolver=self._resolver, allow_private_hosts=self._allow_private_hosts
        )

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        raise ToolServerError("address_refused", "Tool servers are reached over TCP only.")


@contextlib.contextmanager
def _transport_errors() -> Iterator[None]:
    try:
        yield
    except ToolServerError:
        raise
    except (httpcore2.ConnectTimeout, httpcore2.ConnectError):
        raise ToolServerError("unreachable") from None
    except httpcore2.TimeoutException:
        raise ToolServerError("timeout", before_call=False) from None
    except (httpcore2.ProtocolError, httpcore2.UnsupportedProtocol):
        raise ToolServerError("protocol", before_call=False) from None
    except (httpcore2.NetworkError, OSError):
        raise ToolServerError("network", before_call=False) from None


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that raises once more than `limit` bytes arrived."""

    def __init__(self, stream: Any, limit: int):
        self._stream = stream
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        with _transport_errors():
            async for chunk in self._stream:
                size += len(chunk)
                if size > self._limit:
                    raise ToolServerError("too_large", before_call=False)
                yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedAsyncTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that refuses forbidden addresses, redirects and oversized bodies."""

    def __init__(
        self,
        *,
        allow_private_hosts: bool = False,
        resolver: Resolver | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        backend = _GuardedAsyncBackend(
            resolver=resolver or system_resolver, allow_private_hosts=allow_private_hosts
        )
        self._max_response_bytes = max_response_bytes
        # The SDK runs each POST in a task of its own and logs what that task raises instead of
        # handing it to the caller; the first failure is kept here and `on_failure` is told.
        self.failure: ToolServerError | None = None
        self.on_failure: Callable[[ToolServerError], None] | None = None
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            max_connections=4,
            max_keepalive_connections=4,
            retries=0,
            network_backend=backend,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._exchange(request)
        except ToolServerError as error:
            self.refuse(error)
            raise

    def refuse(self, error: ToolServerError) -> None:
        """Keep `error` as the operation's failure (the first one only) and say so."""
        if self.failure is None:
            self.failure = error
            if self.on_failure is not None:
                self.on_failure(error)

    async def _exchange(self, request: httpx2.Request) -> httpx2.Response:
        try:
            core_request = guarded_core_request(request, httpcore2)
        except ProviderError as error:
            raise _tool_server_error(error) from None
        with _transport_errors():
            response = await self._pool.handle_async_request(core_request)
        if 300 <= response.status < 400:
            await response.aclose()
            raise ToolServerError("redirect", before_call=False)
        declared = dict(response.headers).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self._max_response_bytes:
            await response.aclose()
            raise ToolServerError("too_large", before_call=False)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._max_response_bytes),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def guarded_http_client(
    transport: GuardedAsyncTransport,
    *,
    headers: dict[str, str],
    connect_timeout: float = 10.0,
    read_timeout: float = 60.0,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """Return the client the MCP transport must be given for one server."""
    return httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        auth=auth,
        trust_env=False,
        follow_redirects=False,
        # The SDK follows same-origin redirects itself up to this many times: none. (httpx2
        # counts a 401 answered again with a renewed token as one; the transport refuses
        # every 3xx before anyone sees it either way.)
        max_redirects=1 if auth is not None else 0,
        timeout=httpx2.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        ),
    )
