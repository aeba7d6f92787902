"""The request a guarded transport hands its connection pool, for httpx and for httpx2 alike.

Both guarded transports (the providers' on httpx, the tool-server client's on httpx2) check the
URL with the address guard's rules, then pass the request to an httpcore pool in the URL's raw
parts: the pool connects to that host and port, and sends the target exactly as encoded.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from agentloom.providers._urls import checked_url

__all__ = ["guarded_core_request"]


def guarded_core_request(request: Any, core: ModuleType) -> Any:
    """Return `request` as a `core.Request`, or raise `ProviderError` if its URL is refused.

    `request` is an `httpx.Request` with `core` the `httpcore` module, or an `httpx2.Request`
    with `httpcore2`.
    """
    checked_url(request.url)
    return core.Request(
        method=request.method,
        url=core.URL(
            scheme=request.url.raw_scheme,
            host=request.url.raw_host,
            port=request.url.port,
            target=request.url.raw_path,
        ),
        headers=request.headers.raw,
        content=request.stream,
        extensions=request.extensions,
    )
