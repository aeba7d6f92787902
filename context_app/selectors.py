"""Reads of agents and versions, scoped to the caller's spaces."""

from __future__ import annotations

from django.db.models import QuerySet

from agentloom.engine import ConfigurationError, ContextPolicy
from agentloom.errors import Conflict, NotFound
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


def latest_versions(agents) -> dict[int, AgentVersion]:
    """Return each agent's newest published version by agent id (agents never published: absent)."""
    latest: dict[int, AgentVersion] = {}
    for version in AgentVersion.objects.filter(agent__in=agents).order_by("agent_id", "number"):
        latest[version.agent_id] = version  # ascending, so the last one wins
    return latest


# What publishing freezes from the draft, in the order the pages list differences. A draft's
# fields are these and the approval modes (`context_app.services.agents`).
PUBLISHED_FIELDS = (
    "name",
    "system_prompt",
    "model_connection",
    "tools",
    "sub_agents",
    "verify_completion",
    "context_policy",
)


def draft_changes(agent: Agent, version: AgentVersion | None) -> list[str]:
    """Return the fields in which the draft differs from `version` (all of them when None).

    The draft's context policy is compared merged over the defaults, as publishing stores it;
    a model connection counts as changed when the draft points elsewhere or the connection's
    budget (window, max output, safety margin) changed since the version froze it.
    """
    if version is None:
        return list(PUBLISHED_FIELDS)
    snapshot = version.snapshot
    budget = snapshot.get("budget") or {}
    connection = agent.model_connection
    draft_budget = (
        None
        if connection is None
        else {
            "connection_id": connection.pk,
            "context_window": connection.context_window,
            "max_output_tokens": connection.max_output_tokens,
            "safety_margin_tokens": connection.safety_margin_tokens,
        }
    )
    frozen_budget = {key: budget.get(key) for key in draft_budget or {}}
    try:
        policy = ContextPolicy.from_dict(agent.context_policy or {}).to_dict()
    except ConfigurationError:
        policy = agent.context_policy  # an invalid stored draft differs from any version
    draft = {
        "name": agent.name,
        "system_prompt": agent.system_prompt,
        "model_connection": draft_budget,
        "tools": list(agent.tools or []),
        "sub_agents": list(agent.sub_agents or []),
        "verify_completion": agent.verify_completion,
        "context_policy": policy,
    }
    published = {
        "name": (snapshot.get("agent") or {}).get("name"),
        "system_prompt": snapshot.get("system_prompt"),
        "model_connection": frozen_budget if budget else None,
        "tools": list(snapshot.get("tools") or []),
        "sub_agents": list(snapshot.get("sub_agents") or []),
        "verify_completion": snapshot.get("verify_completion"),
        "context_policy": snapshot.get("context_policy"),
    }
    return [name for name in PUBLISHED_FIELDS if draft[name] != published[name]]


def latest_version(agent: Agent) -> AgentVersion:
    """Return the agent's newest published version, or raise Conflict when there is none."""
    version = agent.versions.order_by("-number").first()
    if version is None:
        raise Conflict("This agent has no published version yet.")
    return version
