"""An OAuth authorization server and an MCP server that requires its tokens, both on 127.0.0.1.

`AuthServer` is the SDK's authorization-server routes (`mcp.server.auth.routes`: metadata,
authorize, token, registration, revocation) over an in-memory provider: it approves at once as
`subject` (the person the test says is at the browser), binds each code and token to the RFC
8707 `resource` it was asked for, rotates refresh tokens and, as OAuth 2.1 recommends, revokes
the whole family when a spent refresh token comes back. `dynamic=False` offers no dynamic
registration; `documents=True` says it reads Client ID Metadata Documents (which the test hands
it in `documents`, standing in for the fetch). `tokens_live` is the seconds an access token lives.

`protected_app` is the test tool server (`tests.support.mcp_servers.tool_server`) behind the SDK's
bearer middleware, with protected-resource metadata naming the authorization server; it accepts
only live tokens issued for its own URL, and records which subject each call came as.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.mcp_servers import Calls, answer_lifespan, free_port, serve, tool_server

SCOPE = "tools"


@dataclass
class _Issued:
    subject: str
    resource: str | None
    family: str
    client_id: str
    expires_at: int | None = None


@dataclass
class AuthState:
    """What the authorization server holds and saw."""

    subject: str = "alice@idp"
    tokens_live: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    documents: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, tuple[AuthorizationCode, str]] = field(default_factory=dict)
    access: dict[str, _Issued] = field(default_factory=dict)
    refresh: dict[str, _Issued] = field(default_factory=dict)
    spent: dict[str, str] = field(default_factory=dict)
    revoked_families: set[str] = field(default_factory=set)
    authorize_params: list[AuthorizationParams] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    refreshes: int = 0
    revocations: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def live_access(self, subject: str) -> list[str]:
        now = int(time.time())
        return [
            token
            for token, issued in self.access.items()
            if issued.subject == subject
            and issued.family not in self.revoked_families
            and (issued.expires_at is None or issued.expires_at >= now)
        ]


class _Provider:
    """The in-memory provider of `mcp.server.auth` (`OAuthAuthorizationServerProvider`)."""

    def __init__(self, state: AuthState):
        self.state = state

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.state.clients.get(client_id) or self.state.documents.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.state.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.state.authorize_params.append(params)
        code = secrets.token_urlsafe(24)
        self.state.codes[code] = (
            AuthorizationCode(
                code=code,
                scopes=params.scopes or [SCOPE],
                expires_at=time.time() + 300,
                client_id=client.client_id,
                code_challenge=params.code_challenge,
                redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource,
                subject=self.state.subject,
            ),
            self.state.subject,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        found = self.state.codes.get(authorization_code)
        return found[0] if found and found[0].client_id == client.client_id else None

    def _issue(self, client_id: str, subject: str, resource: str | None, family: str) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.state.tokens_live
        self.state.access[access] = _Issued(subject, resource, family, client_id, expires)
        self.state.refresh[refresh] = _Issued(subject, resource, family, client_id)
        return OAuthToken(
            access_token=access,
            expires_in=self.state.tokens_live,
            refresh_token=refresh,
            scope=SCOPE,
        )

    async def exchange_authorization_code(self, client, authorization_code) -> OAuthToken:
        code, subject = self.state.codes.pop(authorization_code.code)
        return self._issue(client.client_id, subject, code.resource, secrets.token_hex(8))

    async def load_refresh_token(self, client, refresh_token: str):
        with self.state.lock:
            if refresh_token in self.state.spent:
                # A spent refresh token came back: the family is revoked (as OAuth 2.1 recommends).
                self.state.revoked_families.add(self.state.spent[refresh_token])
                return None
            issued = self.state.refresh.get(refresh_token)
        if issued is None or issued.family in self.state.revoked_families:
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=client.client_id,
            scopes=[SCOPE],
            resource=issued.resource,
            subject=issued.subject,
        )

    async def exchange_refresh_token(self, client, refresh_token, scopes) -> OAuthToken:
        with self.state.lock:
            issued = self.state.refresh.pop(refresh_token.token, None)
            if issued is None:
                raise TokenError(error="invalid_grant", error_description="refresh token spent")
            self.state.spent[refresh_token.token] = issued.family
            self.state.refreshes += 1
        for token, access in list(self.state.access.items()):
            if access.family == issued.family:
                del self.state.access[token]
        return self._issue(client.client_id, issued.subject, issued.resource, issued.family)

    async def load_access_token(self, token: str) -> AccessToken | None:
        issued = self.state.access.get(token)
        if issued is None or issued.family in self.state.revoked_families:
            return None
        return AccessToken(
            token=token,
            client_id=issued.client_id,
            scopes=[SCOPE],
            expires_at=issued.expires_at,
            resource=issued.resource,
            subject=issued.subject,
        )

    async def revoke_token(self, token) -> None:
        self.state.revocations += 1
        issued = self.state.access.get(token.token) or self.state.refresh.get(token.token)
        if issued is not None:
            self.state.revoked_families.add(issued.family)


class _Verifier:
    def __init__(self, provider: _Provider):
        self.provider = provider

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.provider.load_access_token(token)


async def _body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def _recording_requests(app, state: AuthState):
    """Record each token request's form; give revocation requests an empty `client_secret`.

    (The SDK's revocation handler requires the field even of a public client, which RFC 7009
    does not: the client sends none, so this shim adds it.)
    """

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in ("/token", "/revoke"):
            await app(scope, receive, send)
            return
        body = await _body(receive)
        form = dict(parse_qsl(body.decode()))
        if scope["path"] == "/token":
            state.token_requests.append(form)
        elif "client_secret" not in form:
            body += b"&client_secret="
        sent = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay():
            return sent.pop(0) if sent else {"type": "http.disconnect"}

        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await app({**scope, "headers": headers}, replay, send)

    return wrapped


def auth_app(state: AuthState, issuer: str, *, dynamic: bool = True, documents: bool = False):
    """Return the authorization server's ASGI app, issuing as `issuer`."""
    provider = _Provider(state)
    registration = ClientRegistrationOptions(enabled=dynamic, valid_scopes=[SCOPE])
    revocation = RevocationOptions(enabled=True)
    routes = create_auth_routes(
        provider,
        AnyHttpUrl(issuer),
        client_registration_options=registration,
        revocation_options=revocation,
    )
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, revocation)
    metadata.client_id_metadata_document_supported = documents or None
    metadata.token_endpoint_auth_methods_supported = ["none", "client_secret_post"]

    async def described(request):
        return JSONResponse(metadata.model_dump(mode="json", exclude_none=True))

    # The SDK's metadata route cannot say it reads metadata documents: this one replaces it.
    routes = [Route("/.well-known/oauth-authorization-server", described), *routes[1:]]
    return _recording_requests(Starlette(routes=routes), state)


def protected_app(state: AuthState, calls: Calls, *, issuer: str, resource: str):
    """Return the test tool server, requiring a bearer token of `issuer` for `resource`."""
    provider = _Provider(state)

    class Recording(_Verifier):
        async def verify_token(self, token: str) -> AccessToken | None:
            found = await super().verify_token(token)
            if found is not None:
                calls.subjects.append(found.subject or "")
            return found

    server = tool_server(
        calls,
        token_verifier=Recording(provider),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(resource),
            validate_token_resource=True,
            required_scopes=[SCOPE],
        ),
    )
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(json_response=True, transport_security=security)


@dataclass
class OAuthWorld:
    """Both servers running: the tool server's URL, the issuer, and what each saw."""

    url: str
    issuer: str
    state: AuthState
    calls: Calls


@contextlib.contextmanager
def oauth_servers(*, dynamic: bool = True, documents: bool = False) -> Iterator[OAuthWorld]:
    """Serve the authorization server and the protected tool server on 127.0.0.1."""
    state = AuthState()
    calls = Calls()
    with serve(_late_issuer(state, dynamic=dynamic, documents=documents)) as issuer:
        # Its port is taken before the tool server's is chosen: the two never collide.
        tool_port = free_port()
        resource = f"http://127.0.0.1:{tool_port}/mcp"
        with serve(protected_app(state, calls, issuer=issuer, resource=resource), port=tool_port):
            yield OAuthWorld(url=resource, issuer=issuer, state=state, calls=calls)


def _late_issuer(state: AuthState, *, dynamic: bool, documents: bool):
    """Return an app that builds the authorization server on its first request, once its own
    address (the issuer) is known from that request."""
    built: list[Any] = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if not built:
            host, port = scope["server"]
            built.append(
                auth_app(state, f"http://{host}:{port}", dynamic=dynamic, documents=documents)
            )
        await built[0](scope, receive, send)

    return app


def document_client(document: dict[str, Any]) -> OAuthClientInformationFull:
    """Return the client a Client ID Metadata Document describes (what the server would fetch),
    allowed this server's scope (the SDK's server grants a client only scopes it registered)."""
    return OAuthClientInformationFull.model_validate({**document, "scope": SCOPE})
