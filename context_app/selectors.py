"""Reads of agents and versions, scoped to the caller's spaces."""

from __future__ import annotations

from django.db.models import QuerySet

from agentloom.errors import NotFound
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import spaces_for_user
from context_app.models import Agent, AgentVersion


def agents_for_user(user) -> QuerySet[Agent]:
    """Return the agents of every space `user` is a member of."""
    return Agent.objects.filter(space__memberships__user=user).order_by("id")


def agent_get(*, user, agent_id: int) -> Agent:
    """Return the agent if `user` may read it (any member of its space), else raise NotFound."""
    agent = agents_for_user(user).filter(pk=agent_id).first()
    if agent is None:
        raise NotFound("Not found.")
    return agent


def space_get(*, user, space_id: int) -> Space:
    """Return the space if `user` is a member of it, else raise NotFound."""
    space = spaces_for_user(user).filter(pk=space_id).first()
    if space is None:
        raise NotFound("Not found.")
    return space


def versions_of(agent: Agent) -> QuerySet[AgentVersion]:
    """Return the published versions of `agent`, newest first."""
    return AgentVersion.objects.filter(agent=agent).order_by("-number")


def version_get(*, user, version_id: int) -> AgentVersion:
    """Return a published version whose agent `user` may read, else raise NotFound."""
    version = (
        AgentVersion.objects.filter(pk=version_id, agent__space__memberships__user=user)
        .select_related("agent")
        .first()
    )
    if version is None:
        raise NotFound("Not found.")
    return version
