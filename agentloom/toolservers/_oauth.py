"""OAuth 2.1 for remote tool servers, as the MCP authorization specification says, in steps.

The SDK's `OAuthClientProvider` runs the whole flow inside one HTTP request, waiting on a
callback; here a person leaves for the authorization server and comes back to another request,
so the flow is cut into steps, each plain and synchronous, built from the SDK's own pieces
(`mcp.client.auth.utils`, `mcp.shared.auth`):

- `discover`: the server's 401 names its protected-resource metadata (`WWW-Authenticate`
  `resource_metadata`, else the well-known paths, RFC 9728); that names the authorization
  server, whose metadata (RFC 8414, OpenID discovery as fallback) must name the same issuer and
  offer PKCE with S256 (the spec's MUST: no S256, no flow). The resource indicator (RFC 8707) is
  the server's canonical URL, or the metadata's `resource` when it is a parent of it.
- `register`: dynamic client registration (RFC 7591), only where the server offers it. The order
  of preference (a pre-registered client, a Client ID Metadata Document, then this) is the
  application's, which knows the deployment's public origin.
- `authorization_url`: the authorization request with `state`, the S256 challenge of a fresh
  verifier, `resource` and `scope`.
- `exchange_code`, `refresh`, `revoke`: the token endpoint (always with `resource`) and the
  revocation endpoint (RFC 7009).

Every request goes through the guarded transport (the address guard, no redirects, capped
bodies), and so does every URL handed to a browser (`checked_oauth_url`): http only to a
loopback or private host where the deployment allows those, https otherwise. Tokens, codes and
secrets never appear in a repr, a message or a log line: errors carry the server's error code,
never its body.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import httpx2
from mcp.client.auth import OAuthRegistrationError
from mcp.client.auth.oauth2 import PKCEParameters, check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    issuers_match,
)
from mcp.shared.auth import OAuthClientMetadata, OAuthMetadata, OAuthToken
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import AnyUrl, ValidationError

from agentloom.providers import (
    ProviderError,
    checked_url,
    numeric_host,
    resolve_checked,
    system_resolver,
)
from agentloom.toolservers._client import ServerAddress, _run_in_own_loop
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._transport import GuardedAsyncTransport, guarded_http_client

__all__ = [
    "AuthorizationServer",
    "OAuthClient",
    "Pkce",
    "Tokens",
    "authorization_url",
    "checked_oauth_url",
    "client_metadata",
    "discover",
    "exchange_code",
    "new_state",
    "refresh",
    "register",
    "revoke",
]

T = TypeVar("T")

OAUTH_SECONDS = 15.0
# An OAuth answer (metadata, a token) is small; a larger one is refused.
MAX_OAUTH_RESPONSE_BYTES = 256 * 1024
CLIENT_NAME = "AgentLoom"
_LOOPBACK_NAMES = {"localhost"}


@dataclass(frozen=True)
class AuthorizationServer:
    """What discovery found for one tool server: the resource indicator, the issuer and its
    endpoints, whether it reads Client ID Metadata Documents, and the scope to ask for."""

    resource: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str = ""
    revocation_endpoint: str = ""
    client_id_metadata_documents: bool = False
    iss_parameter: bool = False
    scope: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuthorizationServer:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


@dataclass(frozen=True)
class OAuthClient:
    """The client this deployment is at one authorization server. `secret` is empty for a
    public client (`auth_method` "none")."""

    client_id: str
    secret: str = ""
    auth_method: str = "none"

    def __repr__(self) -> str:
        return f"OAuthClient(client_id={self.client_id!r}, auth_method={self.auth_method!r})"


@dataclass(frozen=True)
class Tokens:
    """A token response: the access token, the refresh token ("" when none), the seconds the
    access token lives (None: not said) and the granted scope."""

    access_token: str
    refresh_token: str = ""
    expires_in: int | None = None
    scope: str = ""

    def __repr__(self) -> str:
        return f"Tokens(expires_in={self.expires_in!r}, scope={self.scope!r})"


@dataclass(frozen=True)
class Pkce:
    """A PKCE pair (S256): the verifier kept until the code comes back, the challenge sent."""

    verifier: str
    challenge: str

    def __repr__(self) -> str:
        return "Pkce(...)"

    @classmethod
    def generate(cls) -> Pkce:
        pair = PKCEParameters.generate()
        return cls(verifier=pair.code_verifier, challenge=pair.code_challenge)


def new_state() -> str:
    """Return a fresh `state` value (256 bits)."""
    return secrets.token_urlsafe(32)


def _oauth_error(message: str, *, kind: str = "auth") -> ToolServerError:
    return ToolServerError(kind, message)


def checked_oauth_url(url: str, *, allow_private_hosts: bool, resolver=None) -> str:
    """Return `url` when the address guard allows it as an OAuth URL, else raise.

    https always; http only to a loopback or private host where the deployment allows those.
    """
    try:
        parsed = checked_url(url)
        resolve_checked(
            parsed.host,
            parsed.port or (443 if parsed.scheme == "https" else 80),
            resolver=resolver or system_resolver,
            allow_private_hosts=allow_private_hosts,
        )
    except ProviderError as error:
        message = error.message.replace("The provider", "The OAuth").replace("provider", "OAuth")
        raise _oauth_error(message, kind="address_refused") from None
    if parsed.scheme != "https" and not (allow_private_hosts and _private_host(parsed.host)):
        raise _oauth_error("OAuth URLs must use https.", kind="address_refused")
    return str(url)


def _private_host(host: str) -> bool:
    literal = numeric_host(host)
    if literal is None:
        return host.lower().rstrip(".") in _LOOPBACK_NAMES
    return literal.is_loopback or literal.is_private


# --- the HTTP underneath -------------------------------------------------------------------------


def _exchange(
    server: ServerAddress, work: Callable[[httpx2.AsyncClient, Callable[[str], str]], Awaitable[T]]
) -> T:
    """Run `work` with a guarded client; `work` checks each URL with the given function."""

    def check(url: str) -> str:
        return checked_oauth_url(
            url, allow_private_hosts=server.allow_private_hosts, resolver=server.resolver
        )

    async def main() -> T:
        transport = GuardedAsyncTransport(
            allow_private_hosts=server.allow_private_hosts,
            resolver=server.resolver,
            max_response_bytes=MAX_OAUTH_RESPONSE_BYTES,
        )
        http = guarded_http_client(
            transport,
            headers={"Accept": "application/json"},
            connect_timeout=server.connect_timeout,
            read_timeout=OAUTH_SECONDS,
        )
        async with http:
            return await work(http, check)

    try:
        return _run_in_own_loop(main)
    except ToolServerError:
        raise
    except (httpx2.HTTPError, OSError, ValueError):
        raise _oauth_error("The authorization server could not be reached.") from None


# --- discovery -----------------------------------------------------------------------------------


async def _challenge(http: httpx2.AsyncClient, server: ServerAddress) -> httpx2.Response:
    """Return the tool server's answer to an unauthenticated request (its 401, if it wants one)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", **dict(server.headers)}
    headers.pop("Authorization", None)
    headers.pop("authorization", None)
    response = await http.post(server.url, json=body, headers=headers)
    await response.aread()
    return response


def _pick_issuer_metadata(metadata: OAuthMetadata, expected: str) -> None:
    if not issuers_match(str(metadata.issuer), expected):
        raise _oauth_error("The authorization server's metadata names another issuer.")
    if "S256" not in (metadata.code_challenge_methods_supported or []):
        raise _oauth_error("The authorization server does not offer PKCE with S256.")


def discover(server: ServerAddress) -> AuthorizationServer:
    """Return the authorization server of `server` and what to ask it, or raise
    `ToolServerError` ("auth" with a reason; "address_refused" for a refused URL)."""

    async def work(http: httpx2.AsyncClient, check: Callable[[str], str]) -> AuthorizationServer:
        check(server.url)
        response = await _challenge(http, server)
        if response.status_code != 401:
            raise _oauth_error("The tool server does not ask for OAuth (no 401 answer).")
        named = extract_resource_metadata_from_www_auth(response)
        resource_metadata = None
        for url in build_protected_resource_metadata_discovery_urls(named, server.url):
            found = await handle_protected_resource_response(await http.get(check(url)))
            if found is not None:
                resource_metadata = found
                break
        if resource_metadata is None or not resource_metadata.authorization_servers:
            raise _oauth_error("The tool server publishes no protected-resource metadata.")
        resource = resource_url_from_server_url(server.url)
        if resource_metadata.resource is not None:
            named_resource = str(resource_metadata.resource)
            if not check_resource_allowed(resource, named_resource):
                raise _oauth_error("The protected-resource metadata names another resource.")
            resource = named_resource
        issuer = str(resource_metadata.authorization_servers[0])
        metadata = None
        for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server.url):
            ok, found = await handle_auth_metadata_response(await http.get(check(url)))
            if found is not None:
                metadata = found
                break
            if not ok:
                break
        if metadata is None:
            raise _oauth_error("The authorization server publishes no metadata.")
        _pick_issuer_metadata(metadata, issuer)
        scope = get_client_metadata_scopes(
            extract_scope_from_www_auth(response),
            resource_metadata,
            metadata,
            ["authorization_code", "refresh_token"],
        )
        endpoints = {
            "authorization_endpoint": check(str(metadata.authorization_endpoint)),
            "token_endpoint": check(str(metadata.token_endpoint)),
            "registration_endpoint": (
                check(str(metadata.registration_endpoint)) if metadata.registration_endpoint else ""
            ),
            "revocation_endpoint": (
                check(str(metadata.revocation_endpoint)) if metadata.revocation_endpoint else ""
            ),
        }
        return AuthorizationServer(
            resource=resource,
            issuer=str(metadata.issuer),
            client_id_metadata_documents=metadata.client_id_metadata_document_supported is True,
            iss_parameter=metadata.authorization_response_iss_parameter_supported is True,
            scope=scope or "",
            **endpoints,
        )

    return _exchange(server, work)


# --- registration and the authorization request ------------------------------------------------


def client_metadata(redirect_uri: str, *, scope: str = "") -> dict[str, Any]:
    """Return this deployment's client metadata (RFC 7591): a public client of the
    authorization-code grant with refresh tokens, sending people back to `redirect_uri`."""
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect_uri)],
        token_endpoint_auth_method="none",  # noqa: S106 (a method name, not a secret)
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        client_name=CLIENT_NAME,
        scope=scope or None,
    )
    return metadata.model_dump(by_alias=True, mode="json", exclude_none=True)


def register(
    server: ServerAddress, authorization: AuthorizationServer, *, redirect_uri: str
) -> OAuthClient:
    """Register a client by dynamic registration, or raise `ToolServerError`."""
    if not authorization.registration_endpoint:
        raise _oauth_error("The authorization server offers no dynamic client registration.")

    async def work(http: httpx2.AsyncClient, check: Callable[[str], str]) -> OAuthClient:
        response = await http.post(
            check(authorization.registration_endpoint),
            json=client_metadata(redirect_uri, scope=authorization.scope),
        )
        try:
            info = await handle_registration_response(response)
            check_registration_usable(info)
        except OAuthRegistrationError:
            raise _oauth_error(
                f"The authorization server refused the registration (HTTP {response.status_code})."
            ) from None
        return OAuthClient(
            client_id=info.client_id,
            secret=info.client_secret or "",
            auth_method=info.token_endpoint_auth_method or "client_secret_basic",
        )

    return _exchange(server, work)


def authorization_url(
    authorization: AuthorizationServer,
    client: OAuthClient,
    *,
    redirect_uri: str,
    state: str,
    pkce: Pkce,
) -> str:
    """Return the URL a person is sent to, to grant this client access to the resource."""
    parameters = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.challenge,
        "code_challenge_method": "S256",
        "resource": authorization.resource,
    }
    if authorization.scope:
        parameters["scope"] = authorization.scope
    separator = "&" if urlsplit(authorization.authorization_endpoint).query else "?"
    return f"{authorization.authorization_endpoint}{separator}{urlencode(parameters)}"


# --- the token and revocation endpoints ----------------------------------------------------------


def _client_auth(client: OAuthClient, data: dict[str, str]) -> dict[str, str]:
    """Add the client's authentication to `data`; return the headers it needs."""
    data["client_id"] = client.client_id
    if client.auth_method == "client_secret_basic" and client.secret:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.secret, safe='')}"
        return {"Authorization": f"Basic {base64.b64encode(pair.encode()).decode()}"}
    if client.auth_method == "client_secret_post" and client.secret:
        data["client_secret"] = client.secret
    return {}


async def _token_request(
    http: httpx2.AsyncClient,
    check: Callable[[str], str],
    authorization: AuthorizationServer,
    client: OAuthClient,
    data: dict[str, str],
) -> Tokens:
    data = {**data, "resource": authorization.resource}
    headers = _client_auth(client, data)
    response = await http.post(check(authorization.token_endpoint), data=data, headers=headers)
    body = await response.aread()
    if response.status_code != 200:
        code = _error_code(body)
        kind = "invalid_grant" if code == "invalid_grant" else "auth"
        raise ToolServerError(
            kind, f"The authorization server refused the token request ({code or 'no code'})."
        )
    try:
        token = OAuthToken.model_validate_json(body)
    except ValidationError:
        raise _oauth_error("The authorization server's token answer is malformed.") from None
    return Tokens(
        access_token=token.access_token,
        refresh_token=token.refresh_token or "",
        expires_in=token.expires_in,
        scope=token.scope or "",
    )


def _error_code(body: bytes) -> str:
    """Return the OAuth `error` code of an error answer (a short token, never its text)."""
    import json

    try:
        code = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        return ""
    return code if isinstance(code, str) and code.replace("_", "").isalnum() else ""


def exchange_code(
    server: ServerAddress,
    authorization: AuthorizationServer,
    client: OAuthClient,
    *,
    code: str,
    verifier: str,
    redirect_uri: str,
) -> Tokens:
    """Exchange an authorization code (with its PKCE verifier) for tokens, or raise."""

    async def work(http: httpx2.AsyncClient, check: Callable[[str], str]) -> Tokens:
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        return await _token_request(http, check, authorization, client, data)

    return _exchange(server, work)


def refresh(
    server: ServerAddress,
    authorization: AuthorizationServer,
    client: OAuthClient,
    *,
    refresh_token: str,
) -> Tokens:
    """Return fresh tokens for `refresh_token`, or raise (`kind` "invalid_grant" when the
    authorization server no longer accepts it)."""

    async def work(http: httpx2.AsyncClient, check: Callable[[str], str]) -> Tokens:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        tokens = await _token_request(http, check, authorization, client, data)
        if not tokens.refresh_token:
            # RFC 6749 (refreshing): a server that does not rotate keeps the refresh token in force.
            tokens = Tokens(tokens.access_token, refresh_token, tokens.expires_in, tokens.scope)
        return tokens

    return _exchange(server, work)


def revoke(
    server: ServerAddress,
    authorization: AuthorizationServer,
    client: OAuthClient,
    *,
    token: str,
    hint: str,
) -> bool:
    """Revoke `token` (RFC 7009) where the server offers revocation; return whether it said so."""
    if not authorization.revocation_endpoint:
        return False

    async def work(http: httpx2.AsyncClient, check: Callable[[str], str]) -> bool:
        data = {"token": token, "token_type_hint": hint}
        headers = _client_auth(client, data)
        response = await http.post(
            check(authorization.revocation_endpoint), data=data, headers=headers
        )
        await response.aread()
        return response.status_code == 200

    try:
        return _exchange(server, work)
    except ToolServerError:
        return False
