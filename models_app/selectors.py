"""Reads of model connections, scoped to the caller's spaces."""

from __future__ import annotations

from django.db.models import QuerySet

from agentloom.errors import NotFound
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import spaces_for_user
from models_app.models import ModelConnection


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
