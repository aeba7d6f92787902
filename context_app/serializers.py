"""Shapes of agents and published versions in the REST API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentloom.api import FlagField, StrictSerializer, TextField, id_field
from agentloom.engine import DEFAULT_POLICY
from context_app.engine_adapter import builtin_tool_names
from context_app.services.agents import (
    MAX_PROMPT_CHARS,
    MAX_SUB_AGENTS,
    SUB_AGENT_NAME,
    agent_question_room,
)

_RATIO = {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}
_COUNT = {"type": "integer", "minimum": 1, "nullable": True}
_POLICY_PROPERTIES = {
    "context_ratio": {**_RATIO, "description": "Compact at this share of the input budget."},
    "target_ratio": {
        **_RATIO,
        "exclusiveMaximum": True,
        "description": "Compaction aims at this share; must be below context_ratio.",
    },
    "user_turns": {**_COUNT, "description": "Compact after this many user turns (null: off)."},
    "model_steps": {**_COUNT, "description": "Compact after this many model steps (null: off)."},
    "max_compaction_calls": {"type": "integer", "minimum": 1, "maximum": 16},
    "mask_batch_ratio": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "One masking frees at least this share of the input budget, or none.",
    },
}


@extend_schema_field(
    {
        "type": "object",
        "properties": _POLICY_PROPERTIES,
        "required": list(DEFAULT_POLICY),
        "additionalProperties": False,
    }
)
class ContextPolicyField(serializers.JSONField):
    """The full context policy of a draft (defaults merged in)."""


@extend_schema_field(
    {
        "type": "object",
        "properties": _POLICY_PROPERTIES,
        "additionalProperties": False,
        "nullable": True,
        "description": (
            "Partial policy merged over the defaults "
            f"{DEFAULT_POLICY}; null or omitted means the defaults (or, on PATCH, no change)."
        ),
    }
)
class ContextPolicyInputField(serializers.JSONField):
    """A partial context policy; the service merges and validates it."""


def _tools_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=builtin_tool_names()), **kwargs
    )


def _agent_tools_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        # Every tool name is a valid function name for models: built-in and `<server>__<tool>`.
        child=serializers.RegexField(r"^[A-Za-z0-9_-]{1,64}$", max_length=64),
        help_text=f"Built-in tool names ({', '.join(builtin_tool_names())}) and tool-server "
        "tools as `<server>__<tool>` (as the server's listing names them).",
        **kwargs,
    )


class SubAgentSerializer(StrictSerializer):
    """A sub-agent: it has no model or policy of its own and uses its parent's."""

    name = serializers.RegexField(SUB_AGENT_NAME.pattern, max_length=40)
    description = TextField(
        max_length=2_000, allow_blank=True, trim_whitespace=False, required=False
    )
    system_prompt = TextField(
        max_length=MAX_PROMPT_CHARS, allow_blank=True, trim_whitespace=False, required=False
    )
    tools = _tools_field(required=False)

    unknown_field_message = (
        "A sub-agent has only name, description, system_prompt and tools; "
        "it uses its parent's model and context policy."
    )


class AgentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    space = serializers.IntegerField(source="space_id")
    owner = serializers.IntegerField(source="owner_id")
    name = serializers.CharField()
    system_prompt = serializers.CharField()
    model_connection = serializers.IntegerField(source="model_connection_id", allow_null=True)
    tools = _agent_tools_field()
    approval = serializers.DictField(
        child=serializers.ChoiceField(choices=["always", "never"]),
        help_text="Per tool-server tool: `always` (a person approves each call) or `never`; "
        "a tool not named takes its server's default. Frozen at publish.",
    )
    sub_agents = SubAgentSerializer(many=True)
    verify_completion = serializers.BooleanField()
    context_policy = ContextPolicyField()
    question_room = serializers.SerializerMethodField(
        help_text="The room the draft leaves for a question under its trigger, with the figures "
        "it is made of and the floor below which publishing refuses it; null without a "
        "model connection."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField(), allow_null=True))
    def get_question_room(self, agent) -> dict[str, int] | None:
        return agent_question_room(agent)


class AgentUpdateSerializer(StrictSerializer):
    name = TextField(max_length=120, required=False)
    system_prompt = TextField(
        max_length=MAX_PROMPT_CHARS, allow_blank=True, trim_whitespace=False, required=False
    )
    model_connection = id_field(
        allow_null=True,
        required=False,
        help_text="A model connection of the agent's space; an id of another space's "
        "connection, or of none, is refused (400).",
    )
    tools = _agent_tools_field(required=False)
    approval = serializers.DictField(
        child=serializers.ChoiceField(choices=["always", "never"]), required=False
    )
    sub_agents = SubAgentSerializer(many=True, required=False, max_length=MAX_SUB_AGENTS)
    verify_completion = FlagField(required=False)
    context_policy = ContextPolicyInputField(required=False, allow_null=True)


class AgentCreateSerializer(AgentUpdateSerializer):
    space = id_field()
    name = TextField(max_length=120)


class AgentVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.IntegerField(source="agent_id")
    number = serializers.IntegerField()
    snapshot = serializers.JSONField(help_text="The frozen agent, budget, policy and estimator.")
