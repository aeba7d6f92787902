"""The one HTTP client every outbound provider call goes through.

It ignores environment proxies, never follows redirects, bounds connect, read and total time,
caps the body it reads, connects only to addresses the address guard checked, and turns every
failure into a `ProviderError` with fixed text.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import functools
import json
import logging
import math
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx

from agentloom.providers._addresses import Resolver, resolve_checked, system_resolver
from agentloom.providers._core_request import guarded_core_request
from agentloom.providers._errors import ProviderError
from agentloom.providers._refusals import length_refusal
from agentloom.providers._stream import sse_data
from agentloom.providers._urls import checked_url

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "GuardedTransport",
    "ProviderClient",
    "secure_client",
]

logger = logging.getLogger("agentloom.providers")

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
# An error body is read only to tell a context-length rejection from other 400s.
_ERROR_BODY_BYTES = 64 * 1024

_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# OpenAI answers an unknown model with 404 `model_not_found`; DeepSeek with a 400 "Model Not
# Exist" (as its API answers, not listed on its error-code page).
_MODEL_CODES = frozenset({"model_not_found"})
_MODEL_TEXT = re.compile(
    r"model not exist|model (\S+ )?does not exist|unknown model", re.IGNORECASE
)
# DeepSeek's 400 in thinking mode when an assistant message of a tool-call span lacks its
# reasoning: "The `reasoning_content` in the thinking mode must be passed back to the API."
_REASONING_TEXT = re.compile(r"reasoning_content.{0,40}must be passed back", re.IGNORECASE)
# The HTTP libraries log full URLs at INFO and response headers at DEBUG; a provider can put
# anything in its headers, including an echo of the key. During a provider call their records
# are dropped and this module logs its own line instead.
_LIBRARY_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
_IN_PROVIDER_CALL = contextvars.ContextVar("agentloom_provider_call", default=False)


class _DuringProviderCalls(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _IN_PROVIDER_CALL.get()


_LIBRARY_LOG_FILTER = _DuringProviderCalls()


def _quiet_library_loggers() -> None:
    # Idempotent, and repeated per client: logging configuration may replace loggers' state.
    for name in _LIBRARY_LOGGERS:
        library_logger = logging.getLogger(name)
        if _LIBRARY_LOG_FILTER not in library_logger.filters:
            library_logger.addFilter(_LIBRARY_LOG_FILTER)


# A connection that never opened may be retried; an answer that stopped arriving is not, since
# the model may have been working (and billing) the whole time.
_CONNECT_TIMEOUT = "The provider did not accept the connection in time."

# Header values may be sent only if they are visible ASCII; anything else would either be
# refused by the HTTP library with the value in its message, or split the header.
_HEADER_SAFE = re.compile(r"^[\x21-\x7e]+$")


class _GuardedBackend(httpcore.SyncBackend):
    """Open TCP connections only to addresses the guard checked, resolving each host once."""

    def __init__(self, *, resolver: Resolver, allow_private_hosts: bool):
        self._resolver = resolver
        self._allow_private_hosts = allow_private_hosts

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options=None,
    ) -> httpcore.NetworkStream:
        addresses = resolve_checked(
            host, port, resolver=self._resolver, allow_private_hosts=self._allow_private_hosts
        )
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            try:
                # An IP literal: the socket layer connects to it without another lookup. TLS
                # still verifies and sends SNI for `host`, which httpcore keeps from the URL.
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, *args, **kwargs) -> httpcore.NetworkStream:
        raise ProviderError("address_refused", "Provider calls use TCP only.")


@contextlib.contextmanager
def _transport_errors() -> Iterator[None]:
    try:
        yield
    except ProviderError:
        raise
    except (httpcore.ConnectTimeout, httpcore.PoolTimeout):
        raise ProviderError("timeout", _CONNECT_TIMEOUT) from None
    except httpcore.TimeoutException:
        raise ProviderError("timeout", retryable=False) from None
    except httpcore.ProtocolError:
        raise ProviderError("protocol") from None
    except httpcore.UnsupportedProtocol:
        raise ProviderError("address_refused", "The provider URL must use http or https.") from None
    except (httpcore.NetworkError, httpcore.ConnectionNotAvailable, OSError):
        raise ProviderError("network") from None


class _GuardedStream(httpx.SyncByteStream):
    def __init__(self, stream: Any):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _transport_errors():
            yield from self._stream

    def close(self) -> None:
        if hasattr(self._stream, "close"):
            self._stream.close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that refuses forbidden addresses and connects to the checked one.

    `resolver(host, port)` returns the host's addresses (default: `socket.getaddrinfo`); it is
    called once per new connection, never for IP literals or metadata host names.
    """

    def __init__(
        self,
        *,
        allow_private_hosts: bool = False,
        resolver: Resolver | None = None,
        max_connections: int = 10,
    ):
        backend = _GuardedBackend(
            resolver=resolver or system_resolver, allow_private_hosts=allow_private_hosts
        )
        self._pool = httpcore.ConnectionPool(
            ssl_context=_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            retries=0,
            network_backend=backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        core_request = guarded_core_request(request, httpcore)
        with _transport_errors():
            response = self._pool.handle_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_GuardedStream(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class ProviderClient:
    """Send JSON requests to a provider and return decoded JSON, or raise `ProviderError`.

    Build it with `secure_client()`. Close it (or use it as a context manager) when done.
    """

    def __init__(self, http: httpx.Client, *, max_response_bytes: int, total_timeout: float):
        self._http = http
        self.max_response_bytes = max_response_bytes
        self.total_timeout = total_timeout

    def get_json(self, url: str, *, api_key: str | None, optional: bool = False) -> Any:
        """GET `url` and return its JSON body.

        `optional`: a route the server may well not have; its failure is logged at debug level.
        """
        return self._request("GET", url, api_key=api_key, payload=None, optional=optional)

    def post_json(self, url: str, payload: Any, *, api_key: str | None) -> Any:
        """POST `payload` as JSON to `url` and return the JSON body of the answer."""
        return self._request("POST", url, api_key=api_key, payload=payload)

    def post_stream(
        self,
        url: str,
        payload: Any,
        *,
        api_key: str | None,
        on_data: Callable[[bytes], None],
        on_open: Callable[[Callable[[], None]], None] | None = None,
        shown: Callable[[], bool] | None = None,
    ) -> Any:
        """POST `payload` and pass the data of each server-sent event to `on_data`.

        Returns None once the stream ends, or the decoded JSON body when the server answered
        with JSON instead of a stream (some compatible servers ignore `stream`). `on_open` is
        given a function that closes the connection at once, from any thread. The body cap and
        the total timeout bound the whole stream. A failure once part of the answer was shown
        is not retryable, since the model was already working (and billing) and its words were
        seen: `shown()` says whether any was (default: whether any byte arrived). Before that,
        a broken connection is retried like one that never opened.
        """
        reader = _StreamReader(on_data, on_open, shown)
        body = self._request("POST", url, api_key=api_key, payload=payload, reader=reader)
        return body

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ProviderClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(
        self,
        method: str,
        url: str,
        *,
        api_key: str | None,
        payload: Any,
        reader: _StreamReader | None = None,
        optional: bool = False,
    ) -> Any:
        target = checked_url(url)
        headers = _headers(api_key, accept=reader.accept if reader else "application/json")
        content = None
        if payload is not None:
            try:
                content = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode()
            except (TypeError, ValueError):
                raise ProviderError(
                    "bad_request", "The request could not be encoded as JSON."
                ) from None
            headers["Content-Type"] = "application/json"
        failure: ProviderError | None = None
        quiet = _IN_PROVIDER_CALL.set(True)
        try:
            body = self._exchange(method, target, headers, content, reader)
        except ProviderError as exc:
            failure = exc
        finally:
            _IN_PROVIDER_CALL.reset(quiet)
        if failure is not None:
            if reader is not None and reader.shown() and failure.retryable:
                failure.retryable = False
            # The host only: a path or query may carry a token on some proxies.
            logger.log(
                logging.DEBUG if optional else logging.WARNING,
                "Provider call %s to %s failed: kind=%s status=%s",
                method,
                target.host,
                failure.kind,
                failure.status,
            )
            raise failure
        if body is None:
            return None
        try:
            return json.loads(body, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            raise ProviderError("protocol", "The provider's answer is not valid JSON.") from None

    def _exchange(
        self,
        method: str,
        target: httpx.URL,
        headers: dict[str, str],
        content: bytes | None,
        reader: _StreamReader | None = None,
    ) -> bytes | None:
        """Send the request and return the body of a 2xx answer, or raise `ProviderError`.

        With a `reader`, an event-stream answer is read through it and None returned.
        """
        deadline = time.monotonic() + self.total_timeout
        try:
            with self._http.stream(
                method, target, headers=headers, content=content, timeout=self._timeout()
            ) as response:
                status = response.status_code
                if 300 <= status < 400:
                    raise ProviderError("redirect", status=status)
                if status >= 400:
                    body = _read_capped(response, _ERROR_BODY_BYTES, deadline, strict=False)
                    raise _status_error(status, body, response.headers)
                if status < 200:
                    raise ProviderError("protocol", status=status)
                if reader is not None and reader.wants(response):
                    reader.read(response, self.max_response_bytes, deadline)
                    return None
                return _read_capped(response, self.max_response_bytes, deadline, strict=True)
        except ProviderError:
            raise
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            raise ProviderError("timeout", _CONNECT_TIMEOUT) from None
        except httpx.TimeoutException:
            raise ProviderError("timeout", retryable=False) from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol):
            raise ProviderError("address_refused", "The provider URL is not allowed.") from None
        except (httpx.ProtocolError, httpx.DecodingError, httpx.StreamError):
            raise ProviderError("protocol") from None
        except (httpx.HTTPError, OSError):
            raise ProviderError("network") from None

    def _timeout(self) -> httpx.Timeout:
        """Return the client's timeouts, none longer than the total time of one request."""
        timeout = self._http.timeout
        total = self.total_timeout

        def bounded(value: float | None) -> float:
            return total if value is None else min(value, total)

        return httpx.Timeout(
            connect=bounded(timeout.connect),
            read=bounded(timeout.read),
            write=bounded(timeout.write),
            pool=bounded(timeout.pool),
        )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Return the TLS settings of every provider call (system CAs, nothing from the environment).

    Built once per process: loading the CA bundle costs tens of milliseconds of CPU, which a
    client per call would pay on every model call of every run.
    """
    return httpx.create_ssl_context(trust_env=False)


def _headers(api_key: str | None, *, accept: str) -> dict[str, str]:
    headers = {
        "Accept": accept,
        # Ask for an uncompressed body: the size cap then bounds what is held in memory.
        "Accept-Encoding": "identity",
        "User-Agent": "AgentLoom",
    }
    if api_key:
        if not _HEADER_SAFE.match(api_key):
            raise ProviderError(
                "bad_request", "The API key contains characters that cannot be sent."
            )
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class _StreamReader:
    """Read an event-stream answer, event by event, within the size cap and the deadline."""

    accept = "text/event-stream, application/json"

    def __init__(
        self,
        on_data: Callable[[bytes], None],
        on_open: Callable[[Callable[[], None]], None] | None,
        shown: Callable[[], bool] | None = None,
    ):
        self.on_data = on_data
        self.on_open = on_open
        self.started = False
        self._shown = shown

    def shown(self) -> bool:
        """Return whether part of the answer was shown (without a judge: any byte arrived)."""
        return self._shown() if self._shown is not None else self.started

    @staticmethod
    def wants(response: httpx.Response) -> bool:
        return "text/event-stream" in response.headers.get("content-type", "")

    def read(self, response: httpx.Response, limit: int, deadline: float) -> None:
        if self.on_open is not None:
            self.on_open(functools.partial(_abort, response))
        for data in sse_data(self._chunks(response, limit, deadline)):
            self.on_data(data)

    def _chunks(self, response: httpx.Response, limit: int, deadline: float) -> Iterator[bytes]:
        size = 0
        for chunk in response.iter_bytes():
            self.started = True
            size += len(chunk)
            if size > limit:
                raise ProviderError("too_large", status=response.status_code)
            if time.monotonic() > deadline:
                # The model worked the whole allowed time: asking again would do the same.
                raise ProviderError("timeout", retryable=False)
            yield chunk


def _abort(response: httpx.Response) -> None:
    """Close a response's connection now, waking a read blocked on it in another thread."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        return
    with contextlib.suppress(Exception):
        response.close()


def secure_client(
    *,
    allow_private_hosts: bool = False,
    resolver: Resolver | None = None,
    connect_timeout: float = 10.0,
    read_timeout: float = 120.0,
    total_timeout: float = 600.0,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    transport: httpx.BaseTransport | None = None,
) -> ProviderClient:
    """Return the client every outbound provider call must use.

    `allow_private_hosts` permits loopback and private addresses (pass the deployment's
    `ALLOW_PRIVATE_MODEL_HOSTS`); link-local and metadata addresses are refused regardless.
    `read_timeout` bounds each wait for data and `total_timeout` the reading of the body.
    `resolver` replaces DNS resolution (see `GuardedTransport`). `transport` replaces the
    guarded network layer entirely and exists for tests; proxies stay off, redirects stay
    unfollowed and the body cap still applies.
    """
    if max_response_bytes <= 0:
        raise ValueError("max_response_bytes must be positive")
    _quiet_library_loggers()
    http = httpx.Client(
        transport=transport
        or GuardedTransport(allow_private_hosts=allow_private_hosts, resolver=resolver),
        # Given a transport, httpx reads no proxy variables whatever this says; off, nothing a
        # later httpx reads from the environment (proxies, certificates, netrc credentials, as
        # earlier versions did) can send a provider call or its key anywhere else.
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        ),
    )
    return ProviderClient(http, max_response_bytes=max_response_bytes, total_timeout=total_timeout)


def _read_capped(response: httpx.Response, limit: int, deadline: float, *, strict: bool) -> bytes:
    """Return the body, stopping past `limit` bytes: an error if `strict`, else a cut body."""
    declared = response.headers.get("content-length", "")
    if strict and declared.isdigit() and int(declared) > limit:
        raise ProviderError("too_large", status=response.status_code)
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            if strict:
                raise ProviderError("too_large", status=response.status_code)
            chunks.append(chunk[: limit - (size - len(chunk))])
            break
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise ProviderError("timeout")
    return b"".join(chunks)


def _status_error(status: int, body: bytes, headers: httpx.Headers) -> ProviderError:
    """Return the error for an HTTP error answer, its kind read from the status and error code.

    The body is read for its error code, message and numeric fields only to choose among fixed
    texts and to read the numbers of a length refusal; none of its text reaches the error.
    """
    code, text, error = _error_details(body)
    return classify_error(status, code, text, retry_after=_retry_after(headers), error=error)


# Codes and types of an error event inside a stream (which has no status of its own).
_STREAM_CODES = {
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "server_error": "upstream",
    "unavailable_error": "upstream",
}


def classify_error(
    status: int | None,
    code: str | None,
    text: str | None,
    *,
    retry_after: float | None = None,
    error: dict[str, Any] | None = None,
) -> ProviderError:
    """Return the error for a provider's status, error code and message (None: not known).

    `error` is the whole error object, read for the numbers some servers put beside a length
    refusal. An error event in a stream has no status of its own: its code decides, and an
    unknown one is the provider failing to answer. A length refusal is recognised under any
    status but auth, quota, 404, 408 and 429: some servers send it as a 500 (llama.cpp's
    "Context size has been exceeded." when its cache fills mid-answer).
    """
    if status in (401, 403):
        return ProviderError("auth", status=status)
    if status == 402 or code in _QUOTA_CODES:
        # DeepSeek answers 402 "Insufficient Balance"; OpenAI 429 with `insufficient_quota`.
        return ProviderError("quota", status=status, retryable=False)
    if code in _MODEL_CODES or (
        status in (None, 400, 404, 422) and text and _MODEL_TEXT.search(text)
    ):
        return ProviderError("model_unknown", status=status)
    if status not in (404, 408, 429):
        refusal = length_refusal(code, text, error, status=status)
        if refusal is not None:
            return refusal
    if status is None:
        return ProviderError(_STREAM_CODES.get(code or "", "upstream"), retryable=False)
    by_status = _status_kind(status, retry_after)
    if by_status is not None:
        return by_status
    if status == 413:
        return ProviderError(
            "context_length",
            status=status,
            evidence="the server refused the request body as too large (HTTP 413)",
        )
    if text and _REASONING_TEXT.search(text):
        return ProviderError("reasoning_missing", status=status)
    return ProviderError("bad_request", status=status)


def _status_kind(status: int, retry_after: float | None) -> ProviderError | None:
    """Return the error a status alone decides (404, 408, 429, 5xx), else None."""
    if status == 404:
        return ProviderError("not_found", status=status)
    if status == 408:
        return ProviderError("timeout", status=status)
    if status == 429:
        return ProviderError("rate_limit", status=status, retry_after=retry_after)
    if status >= 500:
        return ProviderError("upstream", status=status, retry_after=retry_after)
    return None


def _error_details(body: bytes) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """Return the error code, message and object of an OpenAI-style error body, to classify.

    The code is the error's `code` when it is a string, else its `type` (llama.cpp puts the
    HTTP status in `code` and its kind in `type`).
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, body[:4096].decode("utf-8", "replace"), None
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, str):
        return None, error, None
    if not isinstance(error, dict):
        return None, None, None
    return error_code(error), _message(error), error


def error_code(error: dict[str, Any]) -> str | None:
    """Return an error object's code: its `code` if a string, else its `type` if a string."""
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _message(error: dict[str, Any]) -> str | None:
    message = error.get("message") or error.get("detail")
    return message if isinstance(message, str) else None


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")
