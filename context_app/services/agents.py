"""Writes on agents: drafts with a validated context policy, and frozen published versions.

Each action is durable (`transaction.atomic(durable=True)`): one outermost transaction, committed
when it returns, and an error inside another atomic block. `agent_publish_nested` is the same
write as part of the caller's transaction (a savepoint there), for the admin's change page, which
Django runs in one transaction.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django.db import transaction
from django.db.models import Max

from agentloom.engine import DEFAULT_SAMPLES, ConfigurationError, ContextPolicy, LargeRecords
from agentloom.errors import InvalidInput
from agentloom.providers import ProviderError, retirement_of
from agentloom.spaces.selectors import require_space_admin
from agentloom.toolservers import SEPARATOR
from agentloom.validation import clean_text
from context_app.engine_adapter import (
    builtin_tool_names,
    estimator_binding,
    measure_unit,
    reasoning_rule,
    server_counter,
    snapshot_question_room,
    tokenizer_route,
)
from context_app.models import Agent, AgentVersion
from context_app.selectors import PUBLISHED_FIELDS
from context_app.services.server_tools import (
    clean_approval,
    clean_server_tool_names,
    frozen_resource_servers,
    frozen_server_tools,
)
from models_app.models import ModelConnection

SNAPSHOT_FORMAT = 1
SUB_AGENT_FIELDS = ("name", "description", "system_prompt", "tools")
SUB_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
SUB_AGENT_NAME_RULE = (
    "Sub-agent names use lower-case letters, digits and underscores, starting with a letter "
    "(at most 40 characters)."
)
MAX_SUB_AGENTS = 8
MAX_PROMPT_CHARS = 100_000


def _clean_tools(value: Any, *, field: str = "tools", space_id: int | None = None) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise InvalidInput("Must be a list of tool names.", field=field)
    clean_server_tool_names(value, space_id=space_id, field=field)
    known = builtin_tool_names()
    unknown = sorted(set(value) - set(known) - {name for name in value if SEPARATOR in name})
    if unknown:
        raise InvalidInput(
            f"Unknown tool(s): {', '.join(unknown)}. Available: {', '.join(known)}.", field=field
        )
    return list(dict.fromkeys(value))


def _clean_sub_agents(value: Any) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput("Must be a list of sub-agents.", field="sub_agents")
    if len(value) > MAX_SUB_AGENTS:
        raise InvalidInput(f"At most {MAX_SUB_AGENTS} sub-agents.", field="sub_agents")
    cleaned, names = [], set()
    for index, item in enumerate(value):
        try:
            sub_agent = clean_sub_agent(item)
        except InvalidInput as error:
            raise InvalidInput(f"Item {index}: {error.detail}", field="sub_agents") from None
        if sub_agent["name"] in names:
            raise InvalidInput(
                f"Duplicate sub-agent name {sub_agent['name']!r}.", field="sub_agents"
            )
        names.add(sub_agent["name"])
        cleaned.append(sub_agent)
    return cleaned


def clean_sub_agent(item: Any) -> dict:
    """Return one sub-agent validated, or raise InvalidInput (field `sub_agents`) saying why."""
    if not isinstance(item, dict):
        raise InvalidInput("A sub-agent must be an object.", field="sub_agents")
    extra = sorted(set(item) - set(SUB_AGENT_FIELDS))
    if extra:
        raise InvalidInput(
            f"A sub-agent may not set {', '.join(extra)}: it has only "
            f"{', '.join(SUB_AGENT_FIELDS)} and uses its parent's model and context policy.",
            field="sub_agents",
        )
    name = item.get("name")
    if not isinstance(name, str) or not SUB_AGENT_NAME.match(name):
        raise InvalidInput(SUB_AGENT_NAME_RULE, field="sub_agents")
    return {
        "name": name,
        "description": clean_text(
            item.get("description"), field="sub_agents", max_chars=2_000, required=False
        ),
        "system_prompt": clean_text(
            item.get("system_prompt"),
            field="sub_agents",
            max_chars=MAX_PROMPT_CHARS,
            required=False,
        ),
        "tools": _clean_tools(item.get("tools"), field="sub_agents"),
    }


def clean_context_policy(value: Any) -> dict:
    """Return `value` merged over the default policy and validated (the field is named on error)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidInput("Must be an object.", field="context_policy")
    try:
        return ContextPolicy.from_dict(value).to_dict()
    except ConfigurationError as error:
        raise InvalidInput(f"{error.field}: {error.message}", field="context_policy") from None


def _clean_connection(value: Any, *, space_id: int) -> ModelConnection | None:
    if value is None or value == "":
        return None
    connection_id = value.pk if isinstance(value, ModelConnection) else value
    if isinstance(connection_id, bool) or not isinstance(connection_id, int):
        raise InvalidInput("Must be a model connection id.", field="model_connection")
    connection = ModelConnection.objects.filter(pk=connection_id, space_id=space_id).first()
    if connection is None:
        raise InvalidInput("No such model connection in this space.", field="model_connection")
    return connection


# What publishing freezes, and the approval modes of the tool-server tools: those are frozen
# inside each tool's entry of the snapshot (`frozen_server_tools`), not compared on their own.
_DRAFT_FIELDS = (*PUBLISHED_FIELDS, "approval")


def _apply_draft(agent: Agent, changes: dict[str, Any]) -> None:
    unknown = sorted(set(changes) - set(_DRAFT_FIELDS))
    if unknown:
        raise InvalidInput("Unknown field.", field=unknown[0])
    if "name" in changes:
        agent.name = clean_text(changes["name"], field="name", max_chars=120)
    if "system_prompt" in changes:
        agent.system_prompt = clean_text(
            changes["system_prompt"],
            field="system_prompt",
            max_chars=MAX_PROMPT_CHARS,
            required=False,
        )
    if "model_connection" in changes:
        agent.model_connection = _clean_connection(
            changes["model_connection"], space_id=agent.space_id
        )
    if "tools" in changes:
        agent.tools = _clean_tools(changes["tools"], space_id=agent.space_id)
    if "approval" in changes:
        agent.approval = clean_approval(changes["approval"], tools=agent.tools)
    elif "tools" in changes:
        # A tool no longer chosen takes its mode with it.
        agent.approval = {n: m for n, m in (agent.approval or {}).items() if n in agent.tools}
    if "sub_agents" in changes:
        agent.sub_agents = _clean_sub_agents(changes["sub_agents"])
    if "verify_completion" in changes:
        if not isinstance(changes["verify_completion"], bool):
            raise InvalidInput("Must be a boolean.", field="verify_completion")
        agent.verify_completion = changes["verify_completion"]
    # Every save writes the full policy: a partial one is merged over the defaults, none at all
    # keeps the stored policy (or the defaults for a draft that never had one).
    agent.context_policy = clean_context_policy(changes.get("context_policy", agent.context_policy))
    delegates = {f"delegate_{sub['name']}" for sub in agent.sub_agents}
    clash = delegates & set(agent.tools)
    if clash:
        raise InvalidInput(f"Tool name clash: {', '.join(sorted(clash))}.", field="sub_agents")


def draft_validate(agent: Agent, changes: dict[str, Any]) -> Agent:
    """Return an unsaved copy of `agent` with `changes` applied and validated as a save would
    (InvalidInput names the field). The admin form checks its input with it before saving.
    """
    probe = copy.copy(agent)
    _apply_draft(probe, changes)
    return probe


@transaction.atomic(durable=True)
def agent_create(*, user, space, **fields: Any) -> Agent:
    """Create a draft agent in `space`; the creator must be a space admin."""
    require_space_admin(user, space)
    agent = Agent(space=space, owner=user, name="")
    fields.setdefault("context_policy", None)
    if "name" not in fields:
        raise InvalidInput("This field is required.", field="name")
    _apply_draft(agent, fields)
    agent.save()
    return agent


@transaction.atomic(durable=True)
def agent_update(*, user, agent: Agent, **changes: Any) -> Agent:
    """Change a draft; published versions and their runs are unaffected."""
    require_space_admin(user, agent.space_id)
    agent = Agent.objects.select_for_update().get(pk=agent.pk)
    _apply_draft(agent, changes)
    agent.save()
    return agent


def agent_question_room(agent: Agent) -> dict[str, int] | None:
    """Return the room the agent's draft would leave for a question (None: no connection)."""
    if agent.model_connection is None:
        return None
    try:
        snapshot = version_snapshot(agent)
    except InvalidInput:
        return None  # a chosen tool-server tool is no longer listed: publishing says so
    # Measured with the server's counts the latest version kept (no call to the server here):
    # what changed since is bounded in bytes until the next publish counts it.
    latest = agent.versions.order_by("-number").first()
    if latest is not None and latest.model_connection_id == agent.model_connection_id:
        kept = latest.snapshot.get("server_tokenizer")
        if kept:
            snapshot["server_tokenizer"] = kept
    return snapshot_question_room(snapshot).to_dict()


def version_snapshot(agent: Agent) -> dict[str, Any]:
    """Return the frozen snapshot of `agent` as it is now: what a published version runs with,
    whatever the agent, its connection or its tool servers become later."""
    connection = agent.model_connection
    server_tools = frozen_server_tools(agent.space_id, list(agent.tools), agent.approval)
    return {
        "format": SNAPSHOT_FORMAT,
        "agent": {"id": agent.pk, "name": agent.name},
        "system_prompt": agent.system_prompt,
        "tools": list(agent.tools),
        # Each chosen tool-server tool as listed at publish (context_app.services.server_tools).
        "server_tools": server_tools,
        # Those tools' servers that declare resources: the version offers `read_resource`.
        "resource_servers": frozen_resource_servers(server_tools),
        "sub_agents": [dict(sub) for sub in agent.sub_agents],
        "verify_completion": agent.verify_completion,
        "budget": {
            "connection_id": connection.pk,
            "provider": connection.provider,
            "model_id": connection.model_id,
            "context_window": connection.context_window,
            "max_output_tokens": connection.max_output_tokens,
            "safety_margin_tokens": connection.safety_margin_tokens,
        },
        "context_policy": clean_context_policy(agent.context_policy),
        "estimator": estimator_binding(connection.estimator),
        # Which replies' reasoning goes back to the model (engine_adapter.reasoning_rule).
        "reasoning": reasoning_rule(connection),
        # DeepSeek's thinking settings, sent with every call of the version (None: the default).
        "thinking": {
            "thinking": connection.thinking or None,
            "reasoning_effort": connection.reasoning_effort or None,
        },
        # Bytes over-count tokens several times: triggers learn the provider's counts. The demo
        # model's counts are made up, so it keeps its small byte window.
        "calibration": (
            {"samples": DEFAULT_SAMPLES}
            if connection.estimator == "bytes" and connection.provider != "local"
            else None
        ),
        # Records too large for their share of the budget are shown as excerpts and read back
        # with `read_record`; versions published before keep the 24,000-character truncation.
        "large_records": LargeRecords().to_dict(),
    }


def _tokenizer_route(connection: ModelConnection) -> str:
    """Return the route the connection's server tokenizes on, frozen into the version."""
    try:
        route = tokenizer_route(connection)
    except ProviderError as error:
        raise InvalidInput(
            f"The server's tokenizer could not be asked: {error.message}", field="model_connection"
        ) from None
    if route is None:
        raise InvalidInput(
            "The connection counts with the server's own tokenizer, but its server does not "
            "tokenize: choose another estimator.",
            field="model_connection",
        )
    return route


def _counted_room(snapshot: dict[str, Any], counter: Any):
    """Return the room for a question, counted by the server's tokenizer when there is one."""
    try:
        return snapshot_question_room(snapshot, counter=counter)
    except ProviderError as error:
        raise InvalidInput(
            f"The server's tokenizer did not count the request: {error.message}",
            field="model_connection",
        ) from None


@transaction.atomic(durable=True)
def agent_publish(*, user, agent: Agent) -> AgentVersion:
    """Freeze the draft into the next immutable AgentVersion."""
    return agent_publish_nested(user=user, agent=agent)


@transaction.atomic
def agent_publish_nested(*, user, agent: Agent) -> AgentVersion:
    """`agent_publish` as part of the caller's transaction."""
    require_space_admin(user, agent.space_id)
    agent = (
        Agent.objects.select_for_update(of=("self",))
        .select_related("model_connection")
        .get(pk=agent.pk)
    )
    if agent.model_connection is None:
        raise InvalidInput("Choose a model connection before publishing.", field="model_connection")
    connection = agent.model_connection
    retirement = retirement_of(connection.provider, connection.base_url, connection.model_id)
    if retirement is not None:
        raise InvalidInput(
            f"{retirement.message(connection.get_provider_display())} A new version cannot be "
            "published on a retired model.",
            field="model_connection",
        )
    if agent.model_connection.effective_input_budget <= 0:
        raise InvalidInput(
            "The connection's context window leaves no input budget after max output and "
            "safety margin.",
            field="model_connection",
        )
    snapshot = version_snapshot(agent)
    counter = None
    if connection.estimator == ModelConnection.Estimator.SERVER:
        snapshot["server_tokenizer"] = {"route": _tokenizer_route(connection)}
        counter = server_counter(snapshot, connection)
    room = _counted_room(snapshot, counter)
    if not room.fits:
        # Its sessions could not be kept alive: refused with the figures (README, publishing),
        # in the unit its runs' hard check counts in.
        raise InvalidInput(
            f"Counted in {measure_unit(snapshot)}: {room.describe()}", field="question_room"
        )
    number = (agent.versions.aggregate(top=Max("number"))["top"] or 0) + 1
    return AgentVersion.objects.create(
        agent=agent,
        number=number,
        snapshot=snapshot,
        model_connection=agent.model_connection,
        published_by=user,
    )
