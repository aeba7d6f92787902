"""OAuth for tool servers: connecting an account, the tokens runs send, and their end.

Whose account a server's tools act as is the server's `oauth` setting: `member`, each member
connects their own (a run acts as its session's creator, and fails as a tool error naming the
server when they have not connected); `space`, one shared connection that a space admin makes and
every run of the space acts as, which the journal says on each result (`identity`).

Connecting (`oauth_connect_start`, then `oauth_connect_finish` when the person comes back):
discovery and the request are `agentloom.toolservers` steps. The client is chosen in the
specification's order of preference: the client id registered beforehand on the server, else this
deployment's Client ID Metadata Document where the authorization server reads them and the
console's public origin (`CONSOLE_ORIGIN`) is https, else dynamic registration where offered;
none of these is a refusal naming what to set. `state` is bound to the person's browser session,
user and space: kept as digests with the PKCE verifier encrypted, used once, for
`AUTHORIZATION_MINUTES`.

Tokens are encrypted like keys and never shown, logged or returned. A run reads the access token
when a call starts (`server_address_for_run`), refreshed first when it expires within
`REFRESH_MARGIN_SECONDS`; a 401 during a call asks for a renewed one. Renewing
(`oauth_token_renew`) takes the connection's row lock first and refreshes only when the row still
holds the token that failed: a call that waited on the lock uses the token the other one got, so
a rotating refresh token is spent once and no second family is started. An authorization server
that answers `invalid_grant` (the token was spent elsewhere) gets the row read again: a newer
token there is used; otherwise the connection is over and the person connects again.

Disconnecting, deleting the server and removing a member from the space delete the connections
and, once that committed, revoke their tokens at the authorization server (RFC 7009, where it
offers revocation; best effort: the rows are gone either way).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection as db_connection
from django.db import transaction
from django.utils import timezone

from agentloom.errors import InvalidInput, NotFound, PermissionDenied
from agentloom.spaces.selectors import require_member, require_space_admin
from agentloom.toolservers import (
    AuthorizationServer,
    OAuthClient,
    Pkce,
    ServerAddress,
    Tokens,
    ToolServerError,
    authorization_url,
    client_metadata,
    discover,
    exchange_code,
    new_state,
    refresh,
    register,
    revoke,
)
from models_app.models import OAuthAuthorization, OAuthConnection, OAuthRegistration, ToolServer
from models_app.services.tool_servers import ToolServerUnavailable, server_address

__all__ = [
    "AUTHORIZATION_MINUTES",
    "CALLBACK_PATH",
    "METADATA_DOCUMENT_PATH",
    "REFRESH_MARGIN_SECONDS",
    "Connected",
    "client_metadata_document",
    "member_connections_removed",
    "metadata_document_url",
    "oauth_connect_finish",
    "oauth_connect_start",
    "oauth_disconnect",
    "oauth_revoke_later",
    "oauth_token_renew",
    "redirect_uri",
    "server_address_for_run",
]

logger = logging.getLogger(__name__)

AUTHORIZATION_MINUTES = 10
REFRESH_MARGIN_SECONDS = 60
CALLBACK_PATH = "/oauth/callback/"
METADATA_DOCUMENT_PATH = "/oauth/client-metadata.json"
MAX_CODE_CHARS = 2_000


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _durable_from_the_start() -> None:
    """Refuse at once inside another transaction, before any request goes out: each step's
    writes are a durable action of their own, and the requests run outside any transaction."""
    with transaction.atomic(durable=True):
        pass


# --- the console's address --------------------------------------------------------------------


def redirect_uri(request_origin: str) -> str:
    """Return where authorization servers send people back: `CONSOLE_ORIGIN`, else the origin
    the request came to (a host the deployment allows)."""
    return (settings.CONSOLE_ORIGIN or request_origin).rstrip("/") + CALLBACK_PATH


def metadata_document_url() -> str:
    """Return the URL of this deployment's Client ID Metadata Document, or "" when there is
    none: it needs a stable https origin (`CONSOLE_ORIGIN`), since it is the client id."""
    origin = settings.CONSOLE_ORIGIN
    return origin + METADATA_DOCUMENT_PATH if origin.startswith("https://") else ""


def client_metadata_document() -> dict[str, Any] | None:
    """Return the Client ID Metadata Document (its `client_id` is its own URL), or None."""
    url = metadata_document_url()
    if not url:
        return None
    return {"client_id": url, **client_metadata(redirect_uri(settings.CONSOLE_ORIGIN))}


# --- connecting ----------------------------------------------------------------------------------


def _require_oauth(server: ToolServer, *, shared: bool) -> None:
    wanted = ToolServer.OAuth.SPACE if shared else ToolServer.OAuth.MEMBER
    if server.oauth != wanted:
        raise InvalidInput(
            "This tool server does not use OAuth this way: "
            + (
                "its tools act as each member's own account."
                if server.oauth == ToolServer.OAuth.MEMBER
                else "its tools act as one shared account of the space."
                if server.oauth == ToolServer.OAuth.SPACE
                else "it takes headers only."
            ),
            field="oauth",
        )


def _plain_address(server: ToolServer) -> ServerAddress:
    return server_address(server)


def _client_of(
    server: ToolServer, found: AuthorizationServer, redirect: str
) -> tuple[str, OAuthClient]:
    """Return how the client is registered and the client, in the order of preference."""
    if server.oauth_client_id:
        return OAuthRegistration.Kind.PREREGISTERED, OAuthClient(
            client_id=server.oauth_client_id,
            secret=server.oauth_client_secret,
            auth_method="client_secret_basic" if server.oauth_client_secret else "none",
        )
    document = metadata_document_url()
    if document and found.client_id_metadata_documents:
        return OAuthRegistration.Kind.METADATA_DOCUMENT, OAuthClient(client_id=document)
    kept = OAuthRegistration.objects.filter(
        server=server,
        kind=OAuthRegistration.Kind.DYNAMIC,
        issuer=found.issuer,
        redirect_uri=redirect,
    ).first()
    if kept is not None:
        return kept.kind, OAuthClient(kept.client_id, kept.client_secret, kept.auth_method)
    if not found.registration_endpoint:
        raise InvalidInput(
            "The authorization server offers no way for this deployment to register: give the "
            "tool server a client id registered there"
            + ("" if document else ", or set CONSOLE_ORIGIN to the console's https origin")
            + ".",
            field="oauth_client_id",
        )
    client = register(_plain_address(server), found, redirect_uri=redirect)
    return OAuthRegistration.Kind.DYNAMIC, client


def oauth_connect_start(
    *, user, server: ToolServer, session_key: str, origin: str, shared: bool = False
) -> str:
    """Return the authorization URL that connects `user`'s account to `server` (or, `shared`,
    the space's account: admins only), remembering the request for the person's return.

    Raise `ToolServerUnavailable` when discovery or registration fails.
    """
    _durable_from_the_start()
    if shared:
        require_space_admin(user, server.space_id)
    else:
        require_member(user, server.space_id)
    _require_oauth(server, shared=shared)
    if not session_key:
        raise InvalidInput("Connecting needs a signed-in browser session.", field="session")
    redirect = redirect_uri(origin)
    try:
        found = discover(_plain_address(server))
        kind, client = _client_of(server, found, redirect)
    except ToolServerError as error:
        raise ToolServerUnavailable(error.message) from None
    state, pkce = new_state(), Pkce.generate()
    with transaction.atomic(durable=True):
        _forget_stale_authorizations()
        OAuthRegistration.objects.update_or_create(
            server=server,
            defaults={
                "kind": kind,
                "issuer": found.issuer,
                "client_id": client.client_id,
                "client_secret": client.secret,
                "auth_method": client.auth_method,
                "redirect_uri": redirect,
                "metadata": found.to_dict(),
            },
        )
        OAuthAuthorization.objects.create(
            state_digest=_digest(state),
            session_digest=_digest(session_key),
            space_id=server.space_id,
            server=server,
            user=user,
            shared=shared,
            verifier=pkce.verifier,
            redirect_uri=redirect,
        )
    return authorization_url(found, client, redirect_uri=redirect, state=state, pkce=pkce)


def _forget_stale_authorizations() -> None:
    cutoff = timezone.now() - datetime.timedelta(minutes=AUTHORIZATION_MINUTES)
    OAuthAuthorization.objects.filter(created_at__lt=cutoff).delete()


def _pending(*, user, session_key: str, state: str) -> OAuthAuthorization:
    """Take (delete) the authorization `state` names, or raise: it must be this user's, of this
    browser session, recent, and its server still in a space the user is in."""
    if not state or not session_key:
        raise InvalidInput("The authorization server's answer has no state.", field="state")
    with transaction.atomic(durable=True):
        _forget_stale_authorizations()
        pending = (
            OAuthAuthorization.objects.select_for_update()
            .select_related("server")
            .filter(state_digest=_digest(state))
            .first()
        )
        if pending is None:
            raise InvalidInput(
                "This authorization is unknown, already used or expired: connect again.",
                field="state",
            )
        pending.delete()
    if pending.user_id != user.pk or not hmac.compare_digest(
        pending.session_digest, _digest(session_key)
    ):
        raise PermissionDenied("This authorization was started by another browser session.")
    if pending.server.space_id != pending.space_id:
        raise InvalidInput("The tool server moved since this authorization started.", field="state")
    if pending.shared:
        require_space_admin(user, pending.space_id)
    else:
        require_member(user, pending.space_id)
    return pending


@dataclass(frozen=True)
class Connected:
    """What a finished connection says: the server, and whether it is the space's account."""

    server: ToolServer
    shared: bool


def oauth_connect_finish(
    *,
    user,
    session_key: str,
    state: str,
    code: str = "",
    error: str = "",
    iss: str | None = None,
) -> Connected:
    """Finish the authorization `state` names with the code the person brought back: exchange
    it (with the PKCE verifier and the resource indicator) and keep the tokens, replacing the
    connection's earlier ones. Raise when the person declined, or anything does not match."""
    _durable_from_the_start()
    pending = _pending(user=user, session_key=session_key, state=state)
    server = pending.server
    if error:
        code_name = error if error.replace("_", "").isalnum() else "error"
        raise InvalidInput(
            f"The authorization server did not grant access ({code_name[:40]}).", field="code"
        )
    if not code or len(code) > MAX_CODE_CHARS:
        raise InvalidInput("The authorization server's answer has no code.", field="code")
    registration = OAuthRegistration.objects.filter(server=server).first()
    if registration is None:
        raise InvalidInput("The tool server's OAuth client is gone: connect again.", field="code")
    found = AuthorizationServer.from_dict(registration.metadata)
    if (iss is not None and iss != found.issuer) or (iss is None and found.iss_parameter):
        raise InvalidInput("The answer comes from another authorization server.", field="iss")
    client = OAuthClient(
        registration.client_id, registration.client_secret, registration.auth_method
    )
    try:
        tokens = exchange_code(
            _plain_address(server),
            found,
            client,
            code=code,
            verifier=pending.verifier,
            redirect_uri=pending.redirect_uri,
        )
    except ToolServerError as failure:
        raise ToolServerUnavailable(failure.message) from None
    member_id = None if pending.shared else user.pk
    with transaction.atomic(durable=True):
        if not ToolServer.objects.filter(pk=server.pk).exists():
            raise NotFound("Not found.")
        previous = list(
            OAuthConnection.objects.select_for_update().filter(server=server, member_id=member_id)
        )
        replaced = [_revocation(row) for row in previous]
        OAuthConnection.objects.filter(pk__in=[row.pk for row in previous]).delete()
        OAuthConnection.objects.create(
            server=server,
            member_id=member_id,
            connected_by=user,
            **_token_fields(tokens),
        )
        _revoke_on_commit(replaced)
    return Connected(server=server, shared=pending.shared)


def _token_fields(tokens: Tokens) -> dict[str, Any]:
    now = timezone.now()
    expires = now + datetime.timedelta(seconds=tokens.expires_in) if tokens.expires_in else None
    return {
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token,
        "expires_at": expires,
        "scope": tokens.scope[:1000],
        "refreshed_at": now,
    }


# --- disconnecting, and revocation once the rows are gone ----------------------------------------


@dataclass(frozen=True)
class _Revocation:
    address: ServerAddress
    authorization: AuthorizationServer
    client: OAuthClient
    tokens: tuple[tuple[str, str], ...]

    def __repr__(self) -> str:
        return f"_Revocation(server={self.address.url!r})"


def _revocation(row: OAuthConnection) -> _Revocation | None:
    registration = OAuthRegistration.objects.filter(server_id=row.server_id).first()
    if registration is None:
        return None
    server = ToolServer.objects.filter(pk=row.server_id).first()
    if server is None:
        return None
    tokens = [(row.refresh_token, "refresh_token")] if row.refresh_token else []
    tokens.append((row.access_token, "access_token"))
    return _Revocation(
        _plain_address(server),
        AuthorizationServer.from_dict(registration.metadata),
        OAuthClient(registration.client_id, registration.client_secret, registration.auth_method),
        tuple(tokens),
    )


def _revoke_on_commit(revocations: list[_Revocation | None]) -> None:
    wanted = [entry for entry in revocations if entry is not None]
    if not wanted:
        return

    def send() -> None:
        for entry in wanted:
            for token, hint in entry.tokens:
                revoke(entry.address, entry.authorization, entry.client, token=token, hint=hint)

    transaction.on_commit(send)


def oauth_revoke_later(connections) -> None:
    """Revoke the tokens of `connections` (a queryset, about to be deleted) once the caller's
    transaction commits."""
    _revoke_on_commit([_revocation(row) for row in connections])


@transaction.atomic(durable=True)
def oauth_disconnect(*, user, server: ToolServer, shared: bool = False) -> bool:
    """Delete `user`'s connection to `server` (or, `shared`, the space's: admins only) and
    revoke its tokens; return whether there was one."""
    if shared:
        require_space_admin(user, server.space_id)
    else:
        require_member(user, server.space_id)
    rows = OAuthConnection.objects.select_for_update().filter(
        server=server, member_id=None if shared else user.pk
    )
    found = list(rows)
    oauth_revoke_later(found)
    OAuthConnection.objects.filter(pk__in=[row.pk for row in found]).delete()
    return bool(found)


def member_connections_removed(*, space_id: int, user_id: int) -> None:
    """Delete (and revoke) the connections `user_id` made as a member to the space's servers,
    as part of the caller's transaction (the member is leaving the space)."""
    rows = list(OAuthConnection.objects.filter(server__space_id=space_id, member_id=user_id))
    oauth_revoke_later(rows)
    OAuthConnection.objects.filter(pk__in=[row.pk for row in rows]).delete()


# --- the tokens runs send -----------------------------------------------------------------------


def _identity(row: OAuthConnection) -> dict[str, str]:
    if row.member_id is None:
        by = row.connected_by.username if row.connected_by else "a deleted user"
        return {"kind": "space", "connected_by": by}
    return {"kind": "member", "member": row.member.username if row.member else ""}


class _RunBearer:
    """The access token of one connection, renewed on a 401 (`oauth_token_renew`)."""

    def __init__(self, connection_id: int, token: str):
        self.connection_id = connection_id
        self.token = token

    def __repr__(self) -> str:
        return f"_RunBearer(connection={self.connection_id})"

    def renewed(self, stale: str) -> str | None:
        # Called from a thread of the call's own: its database connection ends with it.
        try:
            return oauth_token_renew(connection_id=self.connection_id, stale=stale)
        finally:
            db_connection.close()


def server_address_for_run(server: ToolServer, *, member_id: int | None) -> ServerAddress:
    """Return how a run reaches `server`, as `member_id` (the session's creator) where each
    member connects their own account, as the space's shared account where there is one.

    Raise `ToolServerError("auth")` naming what to connect when there is no connection.
    """
    address = server_address(server)
    if server.oauth == ToolServer.OAuth.NONE:
        return address
    shared = server.oauth == ToolServer.OAuth.SPACE
    row = (
        OAuthConnection.objects.select_related("member", "connected_by")
        .filter(server=server, member_id=None if shared else member_id)
        .first()
        if shared or member_id is not None
        else None
    )
    if row is None:
        raise ToolServerError(
            "auth",
            f"The tool server {server.name} needs "
            + (
                "the space's shared account connected (a space admin connects it)"
                if shared
                else "the account of the session's creator connected"
            )
            + " on the console's page of the space.",
        )
    token = row.access_token
    margin = timezone.now() + datetime.timedelta(seconds=REFRESH_MARGIN_SECONDS)
    if row.expires_at is not None and row.expires_at <= margin and row.refresh_token:
        token = oauth_token_renew(connection_id=row.pk, stale=token) or token
    return ServerAddress(
        url=address.url,
        headers=address.headers,
        allow_private_hosts=address.allow_private_hosts,
        bearer=_RunBearer(row.pk, token),
        identity=_identity(row),
    )


def oauth_token_renew(*, connection_id: int, stale: str) -> str | None:
    """Return the access token to send instead of `stale`, refreshing under the connection's
    row lock when no other call has yet; None when there is none (connect again)."""
    with transaction.atomic():
        row = (
            OAuthConnection.objects.select_for_update()
            .select_related("server")
            .filter(pk=connection_id)
            .first()
        )
        if row is None:
            return None
        if row.access_token != stale:
            return row.access_token
        registration = OAuthRegistration.objects.filter(server_id=row.server_id).first()
        if not row.refresh_token or registration is None:
            return None
        try:
            tokens = refresh(
                _plain_address(row.server),
                AuthorizationServer.from_dict(registration.metadata),
                OAuthClient(
                    registration.client_id, registration.client_secret, registration.auth_method
                ),
                refresh_token=row.refresh_token,
            )
        except ToolServerError as error:
            if error.kind != "invalid_grant":
                return None
        else:
            for name, value in _token_fields(tokens).items():
                setattr(row, name, value)
            row.save()
            return row.access_token
    # Spent elsewhere: a refresh that committed meanwhile left its token in the row.
    fresh = (
        OAuthConnection.objects.filter(pk=connection_id)
        .values_list("access_token", flat=True)
        .first()
    )
    return fresh if fresh is not None and fresh != stale else None
