"""Tool servers: writes and reads, and the rules every way of writing one (API, admin) goes through.

A space admin registers an MCP server by name and URL, with optional headers. Headers are
write-only: encrypted like API keys, never returned or shown, and their values are redacted from
everything a run of the space writes (`tool_server_secrets`). A URL change that does not send
headers again drops the stored ones, so credentials never follow a server to another address.
A server that uses OAuth (`oauth`: each member's account, or the space's shared one) may name a
client registered beforehand (`oauth_client_id`, a write-only secret); a new URL drops it, and
a new URL or identity ends the OAuth connections made (`models_app.services.tool_server_oauth`).

"List tools" (`tool_server_refresh`) asks the server for its tools (and, when it declares
resources, its resources) and stores the listing; a
failure is a `ToolServerUnavailable` (502) with a fixed message and changes nothing stored. A
registration lists the tools at once (`tool_server_list_new`, once the registration committed); a
server that does not answer is registered all the same, and the caller says why it is not listed.

A run's call to a server tool reports the tools the server listed before the call and whether it
said they changed (`notifications/tools/list_changed`); `tool_server_listing_seen` marks the
stored listing stale when either is so. Published versions keep their frozen schemas (a call
whose schema drifted stays a tool error naming the tool); the console shows the mark until the
next refresh.

The writes are durable actions (`transaction.atomic(durable=True)`): one outermost transaction,
committed when it returns, and an error inside another atomic block. Each `<action>_nested` is
the same write as part of the caller's transaction (a savepoint there), for the admin's pages,
which Django runs in one transaction.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentloom.errors import ApplicationError, InvalidInput, NotFound
from agentloom.providers import (
    METADATA_HOSTNAMES,
    ProviderError,
    address_refusal,
    normalise_base_url,
    numeric_host,
)
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import require_space_admin
from agentloom.toolservers import (
    SEPARATOR,
    ListedTool,
    ServerAddress,
    ToolServerError,
    list_tools,
    model_tool_name,
)
from agentloom.validation import clean_text
from models_app.models import OAuthConnection, OAuthRegistration, ToolServer

__all__ = [
    "MAX_HEADERS",
    "SERVER_NAME",
    "ToolServerUnavailable",
    "server_address",
    "tool_server_create",
    "tool_server_create_nested",
    "tool_server_delete",
    "tool_server_delete_nested",
    "tool_server_list_new",
    "tool_server_listing_seen",
    "tool_server_refresh",
    "tool_server_update",
    "tool_server_update_nested",
    "tool_server_validate",
]

# Lower case, digits and single `-` or `_` between them: `<server>__<tool>` stays unambiguous.
SERVER_NAME = re.compile(r"^[a-z](?:[a-z0-9]|[-_](?=[a-z0-9])){0,29}$")
MODEL_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_HEADERS = 20
MAX_HEADER_VALUE_CHARS = 4_096
MAX_URL_CHARS = 500
HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
# Set by the MCP transport itself; a configured value would break or spoof the protocol.
RESERVED_HEADERS = frozenset(
    {
        "accept",
        "connection",
        "content-length",
        "content-type",
        "host",
        "last-event-id",
        "mcp-protocol-version",
        "mcp-session-id",
        "transfer-encoding",
    }
)
# The shortest header value redacted on its own (shorter ones, such as `1`, would garble text).
LIST_SECONDS = 30.0


class ToolServerUnavailable(ApplicationError):
    """The tool server could not list its tools; the message is fixed text."""

    status = 502


# --- reads ---------------------------------------------------------------------------------------


def server_address(server: ToolServer) -> ServerAddress:
    """Return how the tool-server client reaches `server` under this deployment's settings."""
    return ServerAddress(
        url=server.url,
        headers=dict(server.headers or {}),
        allow_private_hosts=settings.ALLOW_PRIVATE_TOOL_HOSTS,
    )


# --- field cleaning ------------------------------------------------------------------------------


def _clean_name(value: Any) -> str:
    name = clean_text(value, field="name", max_chars=30, single_line=True)
    if not SERVER_NAME.match(name):
        raise InvalidInput(
            "1 to 30 lower-case letters and digits, starting with a letter; single - or _ "
            "between them.",
            field="name",
        )
    return name


def _clean_url(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("This field is required.", field="url")
    if len(value.strip()) > MAX_URL_CHARS:
        raise InvalidInput(f"At most {MAX_URL_CHARS} characters.", field="url")
    try:
        url = normalise_base_url(value.strip())
    except ProviderError as error:
        raise InvalidInput(error.message.replace("provider", "tool server"), field="url") from None
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host in METADATA_HOSTNAMES:
        raise InvalidInput("The tool server host is a cloud metadata service.", field="url")
    literal = numeric_host(host)
    if literal is not None:
        reason = address_refusal(literal, allow_private_hosts=settings.ALLOW_PRIVATE_TOOL_HOSTS)
        if reason:
            raise InvalidInput(f"The tool server address is refused: {reason}.", field="url")
    return url


def _clean_headers(value: Any) -> dict[str, str]:
    """Return the headers; messages name a header, never repeat its value."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("Must be an object of header names and values.", field="headers")
    if len(value) > MAX_HEADERS:
        raise InvalidInput(f"At most {MAX_HEADERS} headers.", field="headers")
    cleaned: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise InvalidInput("A header name is letters, digits and hyphens.", field="headers")
        if name.lower() in RESERVED_HEADERS:
            raise InvalidInput(f"The {name} header is set by the MCP transport.", field="headers")
        if name.lower() in {known.lower() for known in cleaned}:
            raise InvalidInput(f"The {name} header is given twice.", field="headers")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"The value of {name} must be a non-blank string.", field="headers")
        text = text.strip()
        if len(text) > MAX_HEADER_VALUE_CHARS or not all(" " <= char <= "~" for char in text):
            raise InvalidInput(
                f"The value of {name} must be at most {MAX_HEADER_VALUE_CHARS} visible ASCII "
                "characters.",
                field="headers",
            )
        cleaned[name] = text
    return cleaned


# --- writes --------------------------------------------------------------------------------------

_FIELDS = ("name", "url", "headers", "approval", "oauth", "oauth_client_id", "oauth_client_secret")


_NAME_TAKEN = "A tool server with this name already exists in this space."


def _apply(server: ToolServer, changes: dict[str, Any]) -> None:
    unknown = sorted(set(changes) - set(_FIELDS))
    if unknown:
        raise InvalidInput("Unknown field.", field=unknown[0])
    if "name" in changes:
        server.name = _clean_name(changes["name"])
        taken = ToolServer.objects.filter(space_id=server.space_id, name=server.name)
        if taken.exclude(pk=server.pk).exists():
            raise InvalidInput(_NAME_TAKEN, field="name")
    if "url" in changes:
        url = _clean_url(changes["url"])
        if server.url and url != server.url and "headers" not in changes:
            server.headers = {}
        if server.url and url != server.url and "oauth_client_id" not in changes:
            server.oauth_client_id, server.oauth_client_secret = "", ""
        if url != server.url:
            server.tools, server.protocol_version, server.listed_at = [], "", None
            server.declares_resources, server.resources = False, []
            server.listing_stale_since = None
        server.url = url
    if "headers" in changes:
        server.headers = _clean_headers(changes["headers"])
    if "approval" in changes:
        if changes["approval"] not in ToolServer.Approval.values:
            raise InvalidInput("Must be never or always.", field="approval")
        server.approval = changes["approval"]
    _apply_oauth(server, changes)


def _apply_oauth(server: ToolServer, changes: dict[str, Any]) -> None:
    """Set whose account the tools act as, and the client registered beforehand (a new URL
    without them drops the client, as it drops headers)."""
    if "oauth" in changes:
        if changes["oauth"] not in ToolServer.OAuth.values:
            raise InvalidInput('Must be "", "member" or "space".', field="oauth")
        server.oauth = changes["oauth"]
    if "oauth_client_id" in changes:
        server.oauth_client_id = clean_text(
            changes["oauth_client_id"] or "",
            field="oauth_client_id",
            max_chars=500,
            single_line=True,
            required=False,
        )
        if "oauth_client_secret" not in changes:
            server.oauth_client_secret = ""
    if "oauth_client_secret" in changes:
        secret = changes["oauth_client_secret"] or ""
        if not isinstance(secret, str) or len(secret) > MAX_HEADER_VALUE_CHARS:
            raise InvalidInput(
                f"At most {MAX_HEADER_VALUE_CHARS} characters.", field="oauth_client_secret"
            )
        if secret and not server.oauth_client_id:
            raise InvalidInput("A secret needs its client id.", field="oauth_client_secret")
        server.oauth_client_secret = secret.strip()


def _save(server: ToolServer) -> None:
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        # Registered by another request since `_apply` looked.
        raise InvalidInput(_NAME_TAKEN, field="name") from None


def tool_server_validate(
    *,
    user,
    space: Space | None = None,
    server: ToolServer | None = None,
    changes: dict[str, Any],
) -> ToolServer:
    """Return, unsaved, what a create in `space` (or an update of `server`) with `changes` would
    store. Raise what the write would raise (InvalidInput names the field); write nothing."""
    if server is not None:
        require_space_admin(user, server.space_id)
        probe = copy.copy(server)
    elif space is None:
        raise InvalidInput("This field is required.", field="space")
    else:
        require_space_admin(user, space)
        for required in ("name", "url"):
            if required not in changes:
                raise InvalidInput("This field is required.", field=required)
        probe = ToolServer(space=space, name="", url="")
    _apply(probe, changes)
    return probe


@transaction.atomic(durable=True)
def tool_server_create(*, user, space: Space, **fields: Any) -> ToolServer:
    """Register a tool server in `space` (space admins only); `tool_server_list_new` lists its
    tools once this has committed."""
    return tool_server_create_nested(user=user, space=space, **fields)


@transaction.atomic
def tool_server_create_nested(*, user, space: Space, **fields: Any) -> ToolServer:
    """`tool_server_create` as part of the caller's transaction."""
    server = tool_server_validate(user=user, space=space, changes=fields)
    _save(server)
    return server


@transaction.atomic(durable=True)
def tool_server_update(*, user, server: ToolServer, **changes: Any) -> ToolServer:
    """Change a tool server (space admins only); published versions keep their frozen tools."""
    return tool_server_update_nested(user=user, server=server, **changes)


@transaction.atomic
def tool_server_update_nested(*, user, server: ToolServer, **changes: Any) -> ToolServer:
    """`tool_server_update` as part of the caller's transaction."""
    require_space_admin(user, server.space_id)
    current = ToolServer.objects.select_for_update().get(pk=server.pk)
    changed = tool_server_validate(user=user, server=current, changes=changes)
    _save(changed)
    if changed.url != current.url or changed.oauth != current.oauth:
        # Tokens and a registration never follow a server to another address or identity.
        _end_oauth(changed)
    return changed


def _end_oauth(server: ToolServer) -> None:
    # Imported here: the OAuth services build on this module.
    from models_app.services.tool_server_oauth import oauth_revoke_later

    connections = OAuthConnection.objects.filter(server=server)
    oauth_revoke_later(list(connections))
    connections.delete()
    OAuthRegistration.objects.filter(server=server).delete()


@transaction.atomic(durable=True)
def tool_server_delete(*, user, server: ToolServer) -> None:
    """Delete a tool server (space admins only); versions that froze its tools get tool errors."""
    tool_server_delete_nested(user=user, server=server)


@transaction.atomic
def tool_server_delete_nested(*, user, server: ToolServer) -> None:
    """`tool_server_delete` as part of the caller's transaction."""
    require_space_admin(user, server.space_id)
    ToolServer.objects.filter(pk=server.pk).delete()


def _listing_entry(server_name: str, tool) -> dict[str, Any]:
    name = model_tool_name(server_name, tool.name)
    entry = {
        "name": tool.name,
        "model_name": name,
        "description": tool.description,
        "input_schema": tool.input_schema,
    }
    if not MODEL_TOOL_NAME.match(name):
        entry["unavailable"] = (
            f"{name!r} is not a valid function name for models (letters, digits, _ and -, at "
            "most 64 characters)."
        )
    elif tool.input_schema.get("type") != "object":
        entry["unavailable"] = "Its input schema is not a JSON object schema."
    elif tool.requires_tasks:
        entry["unavailable"] = (
            "The server runs it only as a task (taskSupport: required), which AgentLoom does not "
            "speak."
        )
    return entry


def _listing_address(server: ToolServer, user) -> ServerAddress:
    """Return how a listing reaches `server`: as the admin's own OAuth account, or the space's
    shared one, when the server uses OAuth."""
    # Imported here: the OAuth services build on this module.
    from models_app.services.tool_server_oauth import server_address_for_run

    return server_address_for_run(server, member_id=user.pk)


def tool_server_refresh(*, user, server: ToolServer) -> ToolServer:
    """List the server's tools now and store the listing (space admins only).

    The server is called outside any transaction; a failure raises `ToolServerUnavailable`
    and keeps the stored listing.
    """
    require_space_admin(user, server.space_id)
    try:
        listing = list_tools(_listing_address(server, user), timeout=LIST_SECONDS)
    except ToolServerError as error:
        raise ToolServerUnavailable(error.message) from None
    tools = [_listing_entry(server.name, tool) for tool in listing.tools]
    with transaction.atomic(durable=True):
        current = ToolServer.objects.select_for_update().filter(pk=server.pk).first()
        if current is None:
            raise NotFound("Not found.")
        if current.url != server.url:
            raise InvalidInput("The server's URL changed while its tools were listed.", field="url")
        current.tools = tools
        current.declares_resources = listing.declares_resources
        current.resources = [
            {
                "uri": resource.uri,
                "name": resource.name,
                "description": resource.description,
                "mime_type": resource.mime_type,
            }
            for resource in listing.resources
        ]
        current.protocol_version = listing.protocol_version
        current.listed_at = timezone.now()
        current.listing_stale_since = None
        current.save(
            update_fields=[
                "tools",
                "declares_resources",
                "resources",
                "protocol_version",
                "listed_at",
                "listing_stale_since",
                "updated_at",
            ]
        )
    return current


def _listing_differs(stored: list[dict[str, Any]], listed: tuple[ListedTool, ...]) -> bool:
    def shape(name: str, description: str, schema: Any) -> tuple[str, str, str]:
        return name, description or "", json.dumps(schema or {}, sort_keys=True)

    kept = {shape(e["name"], e.get("description", ""), e.get("input_schema")) for e in stored}
    seen = {shape(tool.name, tool.description, tool.input_schema) for tool in listed}
    return kept != seen


def tool_server_listing_seen(
    *, server_id: int, listed: tuple[ListedTool, ...], notified: bool
) -> bool:
    """Mark the server's stored listing stale when a run's call saw other tools listed, or the
    server said its tools changed; return whether it is marked. A server never listed, or
    already marked, is left as it is."""
    server = (
        ToolServer.objects.filter(pk=server_id, listed_at__isnull=False)
        .only("pk", "tools", "listing_stale_since")
        .first()
    )
    if server is None or server.listing_stale_since is not None:
        return server is not None
    if not (notified or (listed and _listing_differs(server.tools or [], listed))):
        return False
    now = timezone.now()
    ToolServer.objects.filter(pk=server_id, listing_stale_since__isnull=True).update(
        listing_stale_since=now, updated_at=now
    )
    return True


def tool_server_list_new(*, user, server: ToolServer) -> tuple[ToolServer, str]:
    """List the tools of a server just registered; return it and "" or why they are not listed.

    Registering never waits on the server's answer to stand: a server that does not answer yet
    stays registered, unlisted, and is listed later (`tool_server_refresh`).
    """
    try:
        return tool_server_refresh(user=user, server=server), ""
    except ApplicationError as error:
        return server, error.detail


def split_model_name(name: str) -> tuple[str, str] | None:
    """Return (server, tool) of a model-facing name `<server>__<tool>`, or None."""
    server, separator, tool = name.partition(SEPARATOR)
    return (server, tool) if separator and server and tool else None
