"""Reads of model connections and tool servers, scoped to the caller's spaces."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agentloom.errors import NotFound
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import spaces_for_user
from models_app.models import ModelConnection, OAuthConnection, ToolServer


def connections_for_user(user) -> QuerySet[ModelConnection]:
    """Return the connections of every space `user` is a member of."""
    return ModelConnection.objects.filter(space__in=spaces_for_user(user)).order_by("id")


def connection_get(*, user, connection_id: int) -> ModelConnection:
    """Return the connection if `user` is a member of its space, else raise NotFound."""
    connection = connections_for_user(user).filter(pk=connection_id).first()
    if connection is None:
        raise NotFound("Not found.")
    return connection


def space_get(*, user, space_id: int) -> Space:
    """Return the space if `user` is a member of it, else raise NotFound."""
    space = spaces_for_user(user).filter(pk=space_id).first()
    if space is None:
        raise NotFound("Not found.")
    return space


def connection_usage(connection: ModelConnection) -> tuple[list, list]:
    """Return the draft agents and the published versions that use `connection`."""
    agents = list(connection.agents.order_by("name", "id"))
    versions = list(
        connection.agent_versions.select_related("agent").order_by("agent_id", "number")
    )
    return agents, versions


MIN_SECRET_CHARS = 8


def tool_servers_for_user(user) -> QuerySet[ToolServer]:
    """Return the tool servers of every space `user` is a member of."""
    return ToolServer.objects.filter(space__in=spaces_for_user(user)).order_by("id")


def tool_servers_of_space(space_id: int) -> QuerySet[ToolServer]:
    return ToolServer.objects.filter(space_id=space_id).order_by("name")


def tool_server_get(*, user, server_id: int) -> ToolServer:
    """Return the server if `user` is a member of its space, else raise NotFound."""
    server = tool_servers_for_user(user).filter(pk=server_id).first()
    if server is None:
        raise NotFound("Not found.")
    return server


def oauth_identities(user, space_id: int) -> list[dict[str, Any]]:
    """Return the space's OAuth tool servers and whose account each acts as: `shared` (the
    space's connection, and who connected it) or each member's (whether `user` connected
    theirs, and how many members did). No token is read."""
    servers = list(
        ToolServer.objects.filter(space_id=space_id)
        .exclude(oauth="")
        .order_by("name")
        .only("pk", "name", "url", "oauth", "space_id")
    )
    rows = OAuthConnection.objects.filter(server__in=servers).values(
        "server_id", "member_id", "connected_by__username", "created_at"
    )
    found = []
    for server in servers:
        mine = [row for row in rows if row["server_id"] == server.pk]
        shared = next((row for row in mine if row["member_id"] is None), None)
        found.append(
            {
                "server": server,
                "shared": server.oauth == ToolServer.OAuth.SPACE,
                "shared_connection": shared,
                "own_connection": next((row for row in mine if row["member_id"] == user.pk), None),
                "members_connected": sum(1 for row in mine if row["member_id"] is not None),
            }
        )
    return found


def tool_server_secrets(space_id: int) -> list[str]:
    """Return the header values and OAuth tokens of the space's tool servers, to redact from
    what its runs write.

    A value like `Bearer <token>` is redacted whole and so is its token.
    """
    secrets: list[str] = []
    servers = ToolServer.objects.filter(space_id=space_id).values_list("headers", "oauth")
    oauth = False
    for headers, mode in servers:
        oauth = oauth or bool(mode)
        for value in (headers or {}).values():
            parts = [value, *str(value).split()[1:]]
            secrets.extend(part for part in parts if len(part) >= MIN_SECRET_CHARS)
    if oauth:
        # Read only where a server of the space uses OAuth: a run's statements stay as before.
        tokens = OAuthConnection.objects.filter(server__space_id=space_id).values_list(
            "access_token", "refresh_token"
        )
        secrets.extend(token for pair in tokens for token in pair if len(token) >= MIN_SECRET_CHARS)
    return list(dict.fromkeys(secrets))
