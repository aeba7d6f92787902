"""Reads of model connections and tool servers, scoped to the caller's spaces."""

from __future__ import annotations

from django.db.models import QuerySet

from agentloom.errors import NotFound
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import spaces_for_user
from models_app.models import ModelConnection, ToolServer


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


def tool_server_secrets(space_id: int) -> list[str]:
    """Return the header values of the space's tool servers, to redact from what its runs write.

    A value like `Bearer <token>` is redacted whole and so is its token.
    """
    secrets: list[str] = []
    for headers in ToolServer.objects.filter(space_id=space_id).values_list("headers", flat=True):
        for value in (headers or {}).values():
            parts = [value, *str(value).split()[1:]]
            secrets.extend(part for part in parts if len(part) >= MIN_SECRET_CHARS)
    return list(dict.fromkeys(secrets))
