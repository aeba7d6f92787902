"""The agent admin: a form of named fields (tools, sub-agents, context policy), and publishing.

The form checks its input with the same rules as the API
(`context_app.services.agents.draft_validate`) and shows each refusal on the field it is about. It
offers the tools of the space's tool servers from the start (on a new agent, those of every space
the caller administers), each with the approval mode the API's `approval` sets.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from agentloom.engine import DEFAULT_POLICY, ConfigurationError, ContextPolicy
from agentloom.errors import ApplicationError, InvalidInput
from agentloom.forms import JSONFormField
from agentloom.spaces.admin_json import json_tree
from agentloom.spaces.admin_scoping import ReadOnlyAdmin, SpaceScopedAdmin
from agentloom.spaces.models import Space
from agentloom.spaces.selectors import administered_spaces
from context_app.engine_adapter import builtin_tool_descriptions
from context_app.models import Agent, AgentVersion
from context_app.selectors import draft_changes, latest_versions
from context_app.services.agents import (
    MAX_SUB_AGENTS,
    agent_publish,
    agent_publish_nested,
    agent_question_room,
    clean_sub_agent,
    draft_validate,
)
from context_app.services.server_tools import choosable_server_tools

PUBLISH_BUTTON = "_publish"
# Blank rows shown below a draft's sub-agents for adding new ones.
BLANK_SUB_AGENT_ROWS = 2
SUB_AGENT_TEXT = ("name", "description", "system_prompt")
POLICY_HELP = {
    "context_ratio": "Compaction starts when the next request reaches this share of the "
    "effective input budget: a number above 0, at most 1.",
    "target_ratio": "Compaction aims to bring the request down to this share: above 0 and below "
    "the trigger share.",
    "user_turns": "Also compact after this many user turns since the last compaction. Blank: "
    "never.",
    "model_steps": "Also compact after this many model steps since the last compaction. Blank: "
    "never.",
    "max_compaction_calls": "Model calls one compaction may make: 1 to 16.",
    "mask_batch_ratio": "The least share of the effective input budget one masking of older "
    "tool results frees, or it does not mask (a summary compacts instead): from 0 to 1.",
}


def _tool_choices() -> list[tuple[str, str]]:
    """Return the built-in tools."""
    return [
        (name, f"{name} — {description}")
        for name, description in builtin_tool_descriptions().items()
    ]


def _server_tools(spaces: list[Space]) -> dict[str, dict[str, Any]]:
    """Return the listed tools of the spaces' tool servers by name; each names its space when
    there are several (a new agent's form, before its space is chosen)."""
    tools = {}
    for space in spaces:
        for name, entry in sorted(choosable_server_tools(space.pk).items()):
            where = f"tool server in {space.name}" if len(spaces) > 1 else "tool server"
            tools.setdefault(name, {**entry, "where": where})
    return tools


APPROVAL_MODES = (("always", "Always: a person approves each call"), ("never", "Never"))


class ApprovalWidget(forms.Widget):
    """One choice per tool-server tool: its server's default, always, or never."""

    template_name = "admin/context_app/agent/approval_widget.html"
    # Set by AgentForm: (model-facing name, the server's default mode) of each tool offered.
    tools: list[tuple[str, str]] = []

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        chosen = value if isinstance(value, dict) else {}
        context["widget"]["rows"] = [
            {
                "tool": tool,
                "name": f"{name}-{tool}",
                "options": [("", f"Server default ({default})"), *APPROVAL_MODES],
                "chosen": chosen.get(tool, ""),
            }
            for tool, default in self.tools
        ]
        return context

    def _render(self, template_name, context, renderer=None):
        # The project's templates, not the form renderer's (which reads only app templates).
        return mark_safe(render_to_string(template_name, context))  # noqa: S308 - autoescaped

    def value_from_datadict(self, data, files, name) -> dict[str, str]:
        """Return the mode chosen for each tool; a tool left at its server's default is absent."""
        prefix = f"{name}-"
        return {
            key[len(prefix) :]: value
            for key, value in data.items()
            if key.startswith(prefix) and value
        }

    def value_omitted_from_data(self, data, files, name) -> bool:
        return False


class ApprovalField(forms.Field):
    widget = ApprovalWidget

    def to_python(self, value):
        return value or {}


class SubAgentsWidget(forms.Widget):
    """A small table editor: one row per sub-agent (name, description, prompt, tools)."""

    template_name = "admin/context_app/agent/sub_agents_widget.html"
    # Set by AgentForm.clean: what is wrong with each row, by its position; only those rows
    # are outlined.
    row_errors: dict[int, str] = {}

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        rows = [dict(item) for item in (value or []) if isinstance(item, dict)]
        rows += [{} for _ in range(min(BLANK_SUB_AGENT_ROWS, MAX_SUB_AGENTS - len(rows)))]
        context["widget"].update(
            rows=[
                {
                    "prefix": f"{name}-{index}",
                    "index": index,
                    "error": self.row_errors.get(index, ""),
                    **row,
                }
                for index, row in enumerate(rows)
            ],
            tool_choices=_tool_choices(),
        )
        return context

    def _render(self, template_name, context, renderer=None):
        # The project's templates, not the form renderer's (which reads only app templates).
        return mark_safe(render_to_string(template_name, context))  # noqa: S308 - autoescaped

    def value_from_datadict(self, data, files, name) -> list[dict[str, Any]]:
        """Return the filled rows in order; a blank row or one marked for removal is left out."""
        rows = []
        for index in range(MAX_SUB_AGENTS):
            prefix = f"{name}-{index}-"
            if data.get(prefix + "remove"):
                continue
            row: dict[str, Any] = {key: (data.get(prefix + key) or "") for key in SUB_AGENT_TEXT}
            row["name"] = row["name"].strip()
            row["tools"] = data.getlist(prefix + "tools") if hasattr(data, "getlist") else []
            if any(row.values()):
                rows.append(row)
        return rows

    def value_omitted_from_data(self, data, files, name) -> bool:
        return False


class SubAgentsField(forms.Field):
    widget = SubAgentsWidget

    def to_python(self, value):
        return value or []


class AgentForm(forms.ModelForm):
    """The agent's draft as named fields; `clean` applies the API's rules to all of them."""

    tools = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Tools the agent may call; the model reads each description. Tools of the "
        "space's tool servers (`server__tool`) are those their servers listed; publishing freezes "
        "their schemas.",
    )
    approval = ApprovalField(
        required=False,
        label="Approval",
        help_text="Per tool-server tool: whether a person approves each call, else its server's "
        "default. Kept for the chosen tools; frozen at publish.",
    )
    sub_agents = SubAgentsField(
        required=False,
        label="Sub-agents",
        help_text=f"Up to {MAX_SUB_AGENTS}; each becomes a delegate_NAME tool of the agent. "
        "Names: lowercase letters, digits and _. A sub-agent uses the agent's model and policy.",
    )
    context_ratio = forms.FloatField(required=False, label="Trigger share")
    target_ratio = forms.FloatField(required=False, label="Target share")
    user_turns = forms.IntegerField(required=False, label="Every N user turns")
    model_steps = forms.IntegerField(required=False, label="Every N model steps")
    max_compaction_calls = forms.IntegerField(required=False, label="Calls per compaction")
    mask_batch_ratio = forms.FloatField(required=False, label="Least masking share")

    class Meta:
        model = Agent
        fields = ["space", "owner", "name", "system_prompt", "model_connection", "tools"]

    # Set per request by the admin: the caller, whose spaces a new agent may be made in.
    user = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        server_tools = _server_tools(self._spaces())
        self.fields["tools"].choices = _tool_choices() + [
            (name, f"{name} — {entry['description'] or '(no description)'} ({entry['where']})")
            for name, entry in server_tools.items()
        ]
        if "approval" in self.fields:
            self.fields["approval"].widget.tools = [
                (name, entry["default_approval"]) for name, entry in server_tools.items()
            ]
        policy = {**DEFAULT_POLICY, **(self.instance.context_policy or {})}
        for name, default in DEFAULT_POLICY.items():
            field = self.fields[name]
            field.initial = policy[name]
            shown = "blank (never)" if default is None else default
            field.help_text = f"{POLICY_HELP[name]} Default: {shown}."

    def _spaces(self) -> list[Space]:
        """Return the spaces whose tool-server tools the form offers: the agent's own, else the
        one chosen on the page, else every space the caller administers."""
        if self.instance.space_id is not None:
            return [self.instance.space]
        if self.user is None:
            return []
        spaces = administered_spaces(self.user).order_by("name")
        chosen = self.data.get(self.add_prefix("space")) if self.is_bound else None
        if chosen and "space" in self.fields:
            # The spaces the page may choose from (the admin scopes them), not only administered.
            choosable = self.fields["space"].queryset
            return list(choosable.filter(pk=chosen)) if str(chosen).isdigit() else []
        return list(spaces)

    def _policy(self) -> dict[str, Any]:
        """Return the policy the fields describe: a blank number means its default."""
        policy = {}
        for name, default in DEFAULT_POLICY.items():
            value = self.cleaned_data.get(name)
            if value is not None or default is None:
                policy[name] = value
        return policy

    def _label(self, name: str) -> str:
        return str(self.fields[name].label)

    def _in_words(self, field: str, message: str) -> str:
        """Return a policy rule's message with the labels the form shows for the fields."""
        for name in DEFAULT_POLICY:
            message = re.sub(rf"\b{name}\b", f"the {self._label(name).lower()}", message)
        # The form leaves a number blank where the policy says null.
        return f"{self._label(field)} {message.replace(' or null', ' or blank')}."

    def _policy_errors(self, policy: dict[str, Any]) -> list[tuple[str, str]]:
        """Return every rule the policy breaks, so that all are said at once: each value is
        checked beside the defaults, then the others together (a rule across fields).
        """
        found: dict[str, str] = {}
        for name in DEFAULT_POLICY:
            if name not in policy:
                continue
            try:
                ContextPolicy.from_dict({name: policy[name]})
            except ConfigurationError as error:
                if error.field == name:
                    found[name] = error.message
        try:
            ContextPolicy.from_dict({k: v for k, v in policy.items() if k not in found})
        except ConfigurationError as error:
            found.setdefault(error.field, error.message)
        return list(found.items())

    def _sub_agent_errors(self, rows: list[dict[str, Any]]) -> dict[int, str]:
        """Return what is wrong with each sub-agent row (the services' rule), by position."""
        errors, seen = {}, set()
        for index, row in enumerate(rows):
            try:
                name = clean_sub_agent(row)["name"]
            except InvalidInput as error:
                errors[index] = error.detail
                continue
            if name in seen:
                errors[index] = "Another sub-agent already has this name."
            seen.add(name)
        return errors

    def _form_errors(self) -> bool:
        """Add every fault of the policy and sub-agent fields; return whether there was one."""
        faulty = False
        if not any(name in self.errors for name in DEFAULT_POLICY):
            for field, message in self._policy_errors(self._policy()):
                named = field if field in self.fields else None
                self.add_error(named, self._in_words(field, message) if named else message)
                faulty = True
        rows = self.cleaned_data.get("sub_agents") or []
        row_errors = self._sub_agent_errors(rows)
        self.fields["sub_agents"].widget.row_errors = row_errors
        for index, message in row_errors.items():
            self.add_error("sub_agents", f"Sub-agent {index + 1}: {message}")
            faulty = True
        return faulty

    def clean(self):
        cleaned = super().clean()
        policy = self._policy()
        if self._form_errors() or any(name in self.errors for name in DEFAULT_POLICY):
            return cleaned
        if "space" not in cleaned or self.errors:
            return cleaned
        agent = copy.copy(self.instance)
        agent.space = cleaned["space"]
        connection = cleaned.get("model_connection")
        tools = cleaned.get("tools", [])
        changes = {
            "name": cleaned.get("name", ""),
            "system_prompt": cleaned.get("system_prompt", ""),
            "model_connection": connection.pk if connection else None,
            "tools": tools,
            # A mode set beside a tool that is not chosen goes with it.
            "approval": {
                name: mode
                for name, mode in (cleaned.get("approval") or {}).items()
                if name in tools
            },
            "sub_agents": cleaned.get("sub_agents", []),
            "verify_completion": cleaned.get("verify_completion", agent.verify_completion),
            "context_policy": policy,
        }
        try:
            self.validated = draft_validate(agent, changes)
        except InvalidInput as error:
            self.add_error(error.field if error.field in self.fields else None, error.detail)
        return cleaned

    def save(self, commit=True):
        validated = getattr(self, "validated", None)
        if validated is not None:
            self.instance.sub_agents = validated.sub_agents
            self.instance.context_policy = validated.context_policy
            self.instance.approval = validated.approval
        return super().save(commit)


def publication_text(agent: Agent) -> str:
    """Say whether the draft is published, and where it differs from its latest version."""
    version = latest_versions([agent]).get(agent.pk)
    if version is None:
        return "Not published yet: sessions cannot use this agent until it is published."
    changed = draft_changes(agent, version)
    if not changed:
        return f"Published as v{version.number}; the draft is the same."
    fields = ", ".join(name.replace("_", " ") for name in changed)
    return f"The draft differs from the latest version v{version.number} in: {fields}."


@admin.register(Agent)
class AgentAdmin(SpaceScopedAdmin):
    """Drafts of the staff user's spaces; changed and published by its admins, as in the API.

    The change page has a "Save and publish" button and the list a publish action: both go
    through `agent_publish`, so the same checks (space admin, usable connection) apply. The
    button publishes within the page's transaction, after the save (`agent_publish_nested`): a
    refusal leaves the save in place.
    """

    form = AgentForm
    change_form_template = "admin/context_app/agent/change_form.html"
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "space",
                    "owner",
                    "name",
                    "system_prompt",
                    "model_connection",
                    "verify_completion",
                    "publication",
                    "question_room",
                ]
            },
        ),
        ("Tools", {"fields": ["tools", "approval"]}),
        ("Sub-agents", {"fields": ["sub_agents"]}),
        (
            "Context policy",
            {
                "fields": list(DEFAULT_POLICY),
                "description": "When the agent's context is compacted. Shares are of the "
                "model's effective input budget (window − max output − safety margin).",
            },
        ),
    ]
    list_display = ["name", "space", "model_connection", "publication", "updated_at"]
    ordering = ["-id"]
    list_filter = ["space"]
    search_fields = ["name"]
    readonly_fields = ["publication", "question_room"]
    actions = ["publish_selected"]
    formfield_overrides = {models.JSONField: {"form_class": JSONFormField}}

    @admin.display(description="Publication")
    def publication(self, agent: Agent) -> str:
        if agent.pk is None:
            return "A new draft: save it, then publish it."
        return publication_text(agent)

    @admin.display(description="Room for a question")
    def question_room(self, agent: Agent) -> str:
        room = agent_question_room(agent) if agent.pk is not None else None
        if room is None:
            return "Choose a model connection and save to see it."
        below = room["room"] < room["floor"]
        verdict = " — below the floor: publishing refuses it" if below else ""
        return (
            f"{room['room']:,} of a trigger at {room['trigger_at']:,} (system prompt and tool "
            f"schemas {room['system_prompt_and_tools']:,}, plan reserve {room['plan_reserve']:,}, "
            f"summary limit {room['summary_limit']:,}, large-record limit "
            f"{room['large_record_limit']:,}; floor {room['floor']:,}){verdict}"
        )

    def _publish(self, request, agent: Agent, publish=agent_publish) -> bool:
        try:
            version = publish(user=request.user, agent=agent)
        except ApplicationError as error:
            field = f" ({error.field.replace('_', ' ')})" if error.field else ""
            self.message_user(
                request, f"{agent.name} not published{field}: {error.detail}", messages.ERROR
            )
            return False
        chat = reverse("home")
        self.message_user(
            request,
            format_html(
                'Published {} as v{}. Start a session with it on the <a href="{}">console</a>.',
                agent.name,
                version.number,
                chat,
            ),
            messages.SUCCESS,
        )
        return True

    @admin.action(description="Publish the selected agents' drafts")
    def publish_selected(self, request, queryset) -> None:
        for agent in queryset:
            if self.may_edit(request, agent):
                self._publish(request, agent)
            else:
                self.message_user(
                    request,
                    f"{agent.name} not published: only the space's admins may publish.",
                    messages.ERROR,
                )

    def _after_save(self, request, obj, response):
        if PUBLISH_BUTTON not in request.POST:
            return response
        self._publish(request, obj, agent_publish_nested)
        return HttpResponseRedirect(reverse("admin:context_app_agent_change", args=[obj.pk]))

    def response_change(self, request, obj):
        return self._after_save(request, obj, super().response_change(request, obj))

    def response_add(self, request, obj, post_url_continue=None):
        return self._after_save(request, obj, super().response_add(request, obj, post_url_continue))


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdmin, SpaceScopedAdmin):
    """Published versions are frozen: the admin shows them and never edits them."""

    space_path = "agent__space"
    list_display = ["agent", "number", "model_connection", "published_by", "created_at"]
    ordering = ["-id"]
    fields = ["agent", "number", "snapshot_tree", "model_connection", "published_by"]
    readonly_fields = fields

    class Media:
        css = {"all": ["admin_records/json_tree.css"]}

    @admin.display(description="Snapshot")
    def snapshot_tree(self, obj):
        return json_tree(obj.snapshot)
