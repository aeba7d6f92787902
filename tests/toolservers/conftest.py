"""Real MCP servers on 127.0.0.1, one per protocol era, shared by a module's tests."""

from __future__ import annotations

import pytest

from tests.support.mcp_servers import Calls, mcp_app, serve


@pytest.fixture(scope="module", params=["2026", "2025"])
def era_server(request):
    """Yield (era, url, calls) of a running test server answering in that era."""
    calls = Calls()
    with serve(mcp_app(calls, era=request.param)) as base:
        yield request.param, base + "/mcp", calls


@pytest.fixture(scope="module")
def server():
    """Yield (url, calls) of a running test server of the 2026-07-28 revision."""
    calls = Calls()
    with serve(mcp_app(calls)) as base:
        yield base + "/mcp", calls
