"""The tool-server client against real SDK servers on loopback: both protocol eras, every kind
of result, the guard (private addresses, redirects, proxies, size cap), the retry rule, schema
drift, time limits and cancellation."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agentloom.toolservers import (
    RetryRule,
    ServerAddress,
    ToolServerError,
    call_tool,
    list_tools,
    result_text,
)
from tests.support.mcp_servers import (
    BIG_RESULT_CHARS,
    PNG_BYTES,
    Calls,
    mcp_app,
    redirecting_app,
    serve,
)

SECRET = "Bearer tok-NONCE-9f8e7d6c5b4a"


def _address(url: str, **fields) -> ServerAddress:
    return ServerAddress(url, allow_private_hosts=True, **fields)


def _schemas(url: str) -> dict:
    return {tool.name: tool.input_schema for tool in list_tools(_address(url)).tools}


def _call(url: str, name: str, arguments: dict, **options):
    options.setdefault("timeout", 10)
    return call_tool(
        _address(url), name, arguments, expected_schema=_schemas(url)[name], **options
    ).result


def test_both_protocol_eras_list_the_tools_with_their_schemas(era_server):
    era, url, _calls = era_server
    listing = list_tools(_address(url))
    assert listing.protocol_version == ("2026-07-28" if era == "2026" else "2025-11-25")
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == {"greet", "weather", "picture", "slow", "broken", "big"}
    assert tools["greet"].description == "Return a greeting for a name."
    assert tools["greet"].input_schema["properties"]["who"]["type"] == "string"
    assert tools["greet"].input_schema["required"] == ["who"]


def test_both_eras_call_a_text_tool_and_keep_the_whole_result(era_server):
    _era, url, calls = era_server
    result = _call(url, "greet", {"who": "Ada"})
    assert result["content"] == [{"type": "text", "text": "hello Ada"}]
    assert result["isError"] is False
    assert ("greet", {"who": "Ada"}) in calls.calls
    assert result_text(result) == "hello Ada"


def test_structured_content_and_meta_are_kept(server):
    url, _calls = server
    result = _call(url, "weather", {"city": "Oslo"})
    assert result["structuredContent"] == {"city": "Oslo", "celsius": 21}
    assert result["_meta"]["source"] == "test"
    assert result_text(result) == "Oslo: 21 C"


def test_an_image_block_is_kept_whole_and_shown_as_one_line(server):
    url, _calls = server
    result = _call(url, "picture", {})
    image = result["content"][1]
    assert (image["type"], image["mimeType"]) == ("image", "image/png")
    assert result_text(result) == (
        f"a picture follows\n[image block: image/png, {len(PNG_BYTES)} bytes]"
    )


def test_is_error_is_returned_as_a_result_not_raised(server):
    url, _calls = server
    result = _call(url, "broken", {})
    assert result["isError"] is True
    assert result_text(result) == "the disk is full"


def test_a_40000_character_result_arrives_whole(server):
    url, _calls = server
    assert len(result_text(_call(url, "big", {}))) == BIG_RESULT_CHARS


def test_a_response_above_the_cap_is_refused(server):
    url, _calls = server
    schema = _schemas(url)["big"]
    with pytest.raises(ToolServerError) as caught:
        call_tool(
            _address(url, max_response_bytes=20_000), "big", {}, expected_schema=schema, timeout=10
        )
    assert caught.value.kind == "too_large"
    assert caught.value.before_call is False


def test_schema_drift_sends_no_call_and_names_the_tool(server):
    url, calls = server
    before = len(calls.calls)
    frozen = {"type": "object", "properties": {"name": {"type": "string"}}}
    with pytest.raises(ToolServerError) as caught:
        call_tool(_address(url), "greet", {"name": "x"}, expected_schema=frozen, timeout=10)
    assert caught.value.kind == "schema_changed"
    assert "'greet'" in caught.value.message and "publish" in caught.value.message
    assert caught.value.before_call is True
    assert len(calls.calls) == before, "nothing was called"


def test_a_tool_the_server_no_longer_lists_is_not_called(server):
    url, _calls = server
    with pytest.raises(ToolServerError) as caught:
        call_tool(_address(url), "gone", {}, expected_schema={}, timeout=10)
    assert caught.value.kind == "unknown_tool"


def test_headers_are_sent_and_never_shown_in_a_repr(server):
    url, calls = server
    address = _address(url, headers={"Authorization": SECRET})
    list_tools(address)
    assert calls.headers[-1]["authorization"] == SECRET
    assert SECRET not in repr(address) and "Authorization" in repr(address)


def test_environment_proxies_are_ignored(server, monkeypatch):
    url, _calls = server
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    assert list_tools(_address(url)).tools


def test_a_call_past_its_time_limit_is_stopped(server):
    url, _calls = server
    started = time.monotonic()
    with pytest.raises(ToolServerError) as caught:
        _call(url, "slow", {"seconds": 20}, timeout=1.5)
    assert caught.value.kind == "timeout" and caught.value.before_call is False
    assert time.monotonic() - started < 5


def test_a_cancellation_stops_a_call_mid_call(server):
    url, calls = server
    calls.started.clear()
    signal = threading.Event()

    def cancel_once_called():
        calls.started.wait(10)
        signal.set()

    threading.Thread(target=cancel_once_called, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(ToolServerError) as caught:
        _call(url, "slow", {"seconds": 20}, timeout=30, cancelled=signal)
    assert caught.value.kind == "cancelled"
    assert calls.started.is_set(), "the call had reached the server"
    assert time.monotonic() - started < 5


# --- the address guard -------------------------------------------------------------------------


class StubResolver:
    """Resolve every name to `addresses`; count lookups."""

    def __init__(self, *addresses: str):
        self.addresses = list(addresses)
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.addresses


@pytest.fixture
def connects(monkeypatch):
    """Record every TCP connection attempt of the tool-server transport."""
    import httpcore2

    seen: list[tuple[str, int]] = []
    real = httpcore2.AnyIOBackend.connect_tcp

    async def recording(self, host, port, *args, **kwargs):
        seen.append((host, port))
        return await real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore2.AnyIOBackend, "connect_tcp", recording)
    return seen


@pytest.mark.parametrize("address", ["10.0.0.7", "192.168.1.20", "127.0.0.1", "::1"])
def test_a_name_resolving_to_a_private_address_is_refused_without_connecting(address, connects):
    resolver = StubResolver(address)
    server = ServerAddress("http://tools.example.com/mcp", resolver=resolver)
    with pytest.raises(ToolServerError) as caught:
        list_tools(server)
    assert caught.value.kind == "address_refused"
    assert "loopback or private" in caught.value.message
    assert resolver.lookups == ["tools.example.com"]
    assert connects == []


def test_metadata_addresses_are_refused_even_when_private_hosts_are_allowed(connects):
    server = ServerAddress(
        "http://tools.example.com/mcp",
        resolver=StubResolver("169.254.169.254"),
        allow_private_hosts=True,
    )
    with pytest.raises(ToolServerError) as caught:
        list_tools(server)
    assert caught.value.kind == "address_refused"
    assert connects == []


def test_the_transport_connects_only_to_the_checked_address(server, connects):
    url, _calls = server
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    resolver = StubResolver("127.0.0.1")
    listing = list_tools(
        ServerAddress(
            f"http://tools.example.com:{port}/mcp", resolver=resolver, allow_private_hosts=True
        )
    )
    assert listing.tools
    assert connects and all(seen == ("127.0.0.1", port) for seen in connects)


@pytest.mark.parametrize("where", ["same origin", "other origin"])
def test_a_redirect_is_refused_and_never_followed(where):
    calls = Calls()
    with serve(mcp_app(calls)) as target:
        location = "/elsewhere/mcp" if where == "same origin" else target + "/mcp"
        with serve(redirecting_app(location)) as base, pytest.raises(ToolServerError) as caught:
            list_tools(_address(base + "/mcp"))
    assert caught.value.kind == "redirect"
    assert calls.headers == [], "the redirect's target was never asked"


def test_an_unreachable_server_is_tried_by_the_retry_rule_then_reported(connects):
    rule = RetryRule(attempts=3, backoff_seconds=(0.05, 0.1))
    resolver = StubResolver("127.0.0.1")
    with pytest.raises(ToolServerError) as caught:
        list_tools(
            ServerAddress(
                "http://tools.example.com:9/mcp",
                resolver=resolver,
                allow_private_hosts=True,
                retry=rule,
            )
        )
    assert caught.value.kind == "unreachable"
    assert caught.value.message == "The tool server could not be reached."
    assert len(resolver.lookups) == 3 and len(connects) == 3


def test_a_call_whose_connection_broke_after_sending_is_not_retried(server):
    url, calls = server
    schema = _schemas(url)["slow"]
    before = len([c for c in calls.calls if c[0] == "slow"])
    with pytest.raises(ToolServerError):
        call_tool(_address(url), "slow", {"seconds": 5}, expected_schema=schema, timeout=1)
    time.sleep(0.2)
    assert len([c for c in calls.calls if c[0] == "slow"]) == before + 1


def test_arguments_results_and_headers_stay_out_of_the_logs(server, caplog):
    url, _calls = server
    caplog.set_level(logging.DEBUG)
    result = call_tool(
        _address(url, headers={"Authorization": SECRET}),
        "greet",
        {"who": "NONCE-LOGGED-ARGUMENT"},
        expected_schema=_schemas(url)["greet"],
        timeout=10,
    ).result
    assert result["content"][0]["text"] == "hello NONCE-LOGGED-ARGUMENT"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "NONCE-LOGGED-ARGUMENT" not in logged and "tok-NONCE" not in logged


def test_a_call_from_a_thread_that_runs_an_event_loop_still_works(server):
    import asyncio

    url, _calls = server

    async def inside_a_loop():
        return list_tools(_address(url))

    assert asyncio.run(inside_a_loop()).tools
