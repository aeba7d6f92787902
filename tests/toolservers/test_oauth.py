"""The OAuth steps on their own: discovery's checks, and the address guard on every OAuth URL.

A small server on 127.0.0.1 answers 401 and publishes the metadata each test wants; nothing is
requested of an address the guard refuses (the suite fails any connection outside loopback).
"""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentloom.toolservers import ServerAddress, ToolServerError, checked_oauth_url, discover
from tests.support.mcp_servers import serve

METADATA_HOST = "http://169.254.169.254/authorize"


def _world(*, resource: str | None = None, authorize: str | None = None, s256: bool = True):
    """Return an app that is a protected MCP endpoint, its resource metadata and its issuer."""
    base: dict[str, str] = {}

    async def mcp(request):
        return JSONResponse(
            {"error": "invalid_token"},
            status_code=401,
            headers={
                "WWW-Authenticate": f'Bearer resource_metadata="{base["url"]}/.well-known/'
                'oauth-protected-resource/mcp", scope="tools"'
            },
        )

    async def resource_metadata(request):
        return JSONResponse(
            {"resource": resource or f"{base['url']}/mcp", "authorization_servers": [base["url"]]}
        )

    async def issuer_metadata(request):
        return JSONResponse(
            {
                "issuer": base["url"],
                "authorization_endpoint": authorize or f"{base['url']}/authorize",
                "token_endpoint": f"{base['url']}/token",
                "code_challenge_methods_supported": ["S256"] if s256 else ["plain"],
                "response_types_supported": ["code"],
            }
        )

    app = Starlette(
        routes=[
            Route("/mcp", mcp, methods=["POST"]),
            Route("/.well-known/oauth-protected-resource/mcp", resource_metadata),
            Route("/.well-known/oauth-authorization-server", issuer_metadata),
        ]
    )
    return app, base


def _discover(**options):
    app, base = _world(**options)
    with serve(app) as url:
        base["url"] = url
        return url, discover(ServerAddress(url=url + "/mcp", allow_private_hosts=True))


def test_discovery_follows_the_401_to_the_issuer_and_asks_its_scope():
    url, found = _discover()
    assert found.resource == url + "/mcp"
    assert found.issuer.rstrip("/") == url
    assert found.authorization_endpoint == url + "/authorize"
    assert found.scope == "tools"


def test_an_authorization_endpoint_the_guard_refuses_ends_discovery():
    with pytest.raises(ToolServerError) as refused:
        _discover(authorize=METADATA_HOST)
    assert refused.value.kind == "address_refused"


def test_metadata_naming_another_resource_is_refused():
    with pytest.raises(ToolServerError, match="names another resource"):
        _discover(resource="https://elsewhere.example/mcp")


def test_an_issuer_without_s256_is_refused():
    with pytest.raises(ToolServerError, match="S256"):
        _discover(s256=False)


@pytest.mark.parametrize(
    ("url", "allow_private_hosts", "reason"),
    [
        (METADATA_HOST, True, "metadata"),
        ("http://10.0.0.8/token", False, "loopback or private"),
        ("http://auth.example/token", True, "https"),
        ("https://user:pw@auth.example/token", True, "user name"),
        ("ftp://auth.example/token", True, "http or https"),
    ],
)
def test_the_address_guard_checks_every_oauth_url(url, allow_private_hosts, reason):
    def resolver(host, port):
        return ["93.184.216.34"]

    with pytest.raises(ToolServerError, match=reason):
        checked_oauth_url(url, allow_private_hosts=allow_private_hosts, resolver=resolver)


def test_https_to_a_public_address_and_http_on_loopback_where_allowed_pass():
    def resolver(host, port):
        return ["93.184.216.34"]

    url = "https://auth.example/authorize?x=1"
    assert checked_oauth_url(url, allow_private_hosts=False, resolver=resolver) == url
    assert checked_oauth_url("http://127.0.0.1:9/token", allow_private_hosts=True)
